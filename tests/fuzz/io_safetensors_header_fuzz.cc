// A whole .safetensors file (8-byte header length, JSON header, data) from the
// fuzzer: open() must accept it or name what is wrong, and every tensor it
// accepts must be readable in full.
#include "fuzz_util.h"
#include "loom/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = loom::fuzz::scratch_dir() / "model.safetensors";
  loom::fuzz::write_file(path, loom::fuzz::as_text(data, size));
  auto file = loom::SafetensorsFile::open(path.string());
  if (!file.ok()) return 0;
  for (const loom::TensorInfo& t : (*file)->tensors()) {
    loom::Tensor view = (*file)->view(t);
    loom::fuzz::touch(view.data(), view.nbytes());
  }
  return 0;
}
