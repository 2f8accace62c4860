// A whole .gguf file (header, metadata, tensor infos, data) from the fuzzer:
// open() must accept it or name what is wrong; every accepted tensor's bytes
// must be readable in full and every metadata value walkable.
#include "fuzz_util.h"
#include "loom/io/gguf.h"

namespace {

uint64_t walk(const loom::io::GgufValue& v) {
  uint64_t n = 1;
  (void)v.as_int("v");
  (void)v.as_uint("v");
  (void)v.as_double("v");
  (void)v.as_bool("v");
  if (auto s = v.as_string("v"); s.ok()) n += loom::fuzz::touch(s.value().data(), s.value().size());
  for (const auto& item : v.array()) n += walk(item);
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = loom::fuzz::scratch_dir() / "model.gguf";
  loom::fuzz::write_file(path, loom::fuzz::as_text(data, size));
  auto file = loom::io::GgufFile::open(path.string());
  if (!file.ok()) return 0;
  for (const auto& [key, value] : (*file)->metadata()) walk(value);
  (void)(*file)->architecture();
  for (const loom::io::GgufTensorInfo& t : (*file)->tensors()) {
    loom::Tensor view = (*file)->view(t);
    loom::fuzz::touch(view.data(), view.nbytes());
  }
  return 0;
}
