// model.safetensors.index.json from the fuzzer, next to two real shards (written
// once): Checkpoint::open must accept it or name what is wrong, and every tensor
// of an accepted checkpoint must be readable and convertible.
#include "fuzz_util.h"
#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"

namespace {

const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    auto d = loom::fuzz::scratch_dir() / "sharded";
    std::filesystem::create_directories(d);
    using loom::Tensor;
    loom::throw_if_error(loom::write_safetensors((d / "model-00001-of-00002.safetensors").string(),
                                                 {{"embed.weight", Tensor::from_f32({1, 2, 3, 4, 5, 6}, {2, 3})},
                                                  {"layers.0.norm", Tensor::from_f32({1, 1, 1}, {3})}}));
    loom::throw_if_error(loom::write_safetensors((d / "model-00002-of-00002.safetensors").string(),
                                                 {{"lm_head.weight", Tensor::zeros(loom::DType::kBF16, {2, 3})},
                                                  {"ids", Tensor::from_i32({7, 8}, {2})}}));
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = checkpoint_dir();
  loom::fuzz::write_file(dir / "model.safetensors.index.json", loom::fuzz::as_text(data, size));
  auto ck = loom::Checkpoint::open(dir.string());
  if (!ck.ok()) return 0;
  for (const std::string& name : ck->names()) {
    loom::Tensor t = ck->get(name).value();
    loom::fuzz::touch(t.data(), t.nbytes());
    auto f32 = ck->get_as(name, loom::DType::kF32);
    if (f32.ok()) loom::fuzz::touch(f32->data(), f32->nbytes());
  }
  ck->parameter_count();
  return 0;
}
