// The fuse direction (a kernel Layout wanting gate_up_proj from a checkpoint
// with gate_proj / up_proj), regex renamings, and load_weights end to end.
#include "loom/weights/weight_loader.h"

#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "loom/io/safetensors_writer.h"
#include "weights/weights_test_util.h"

namespace loom {
namespace {

using testing::at;
using testing::iota;
using testing::read_file;
using testing::TempDir;

TEST(WeightLoader, RegexRenamingThenFuseAndSaveBack) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const int64_t H = 4, I = 3;
  NamedTensors tensors{{"transformer.h.0.mlp.gate_proj.weight", iota(DType::kBF16, {I, H}, 0)},
                       {"transformer.h.0.mlp.up_proj.weight", iota(DType::kBF16, {I, H}, 100)},
                       {"transformer.h.0.ln.gamma", iota(DType::kBF16, {H}, 200)},
                       {"transformer.h.0.mlp.gate_proj.bias", iota(DType::kBF16, {I}, 300)},
                       {"transformer.h.0.mlp.up_proj.bias", iota(DType::kBF16, {I}, 400)},
                       {"unrelated.buffer", iota(DType::kBF16, {2}, 500)}};
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}, SafetensorsOrder::kLikePython).ok());
  WeightRules rules{
      WeightRenaming{"^transformer.h.*", "model.layers.*"},
      WeightRenaming{"ln.gamma", "input_layernorm.weight"},
      // No `.weight` in the patterns: one rule covers weight and bias.
      WeightConverter{{"mlp.gate_proj", "mlp.up_proj"}, {"mlp.gate_up_proj"}, {Concatenate(0)}, false, "fuse gate_up"},
  };
  ExpectedParams exp{{"model.layers.0.mlp.gate_up_proj.weight", {{2 * I, H}}},
                     {"model.layers.0.mlp.gate_up_proj.bias", {{2 * I}}},
                     {"model.layers.0.input_layernorm.weight", {{H}}}};
  auto loaded = load_weights(path, rules, exp, "TestModel");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const Tensor& gu = loaded->params.at("model.layers.0.mlp.gate_up_proj.weight");
  for (int64_t i = 0; i < 2 * I * H; ++i) ASSERT_EQ(at(gu, i), i < I * H ? i : 100 + i - I * H);
  const Tensor& b = loaded->params.at("model.layers.0.mlp.gate_up_proj.bias");
  for (int64_t i = 0; i < 2 * I; ++i) ASSERT_EQ(at(b, i), i < I ? 300 + i : 400 + i - I);
  EXPECT_EQ(at(loaded->params.at("model.layers.0.input_layernorm.weight"), 0), 200);
  EXPECT_EQ(loaded->plan.unused_sources(), std::vector<std::string>{"unrelated.buffer"});
  EXPECT_EQ(loaded->stats.groups, 3u);

  // Saving without the unused tensor drops it; carrying it reproduces the file.
  const std::string out = dir.file("saved.safetensors");
  ASSERT_TRUE(loaded->plan.save(params_from(loaded->params), out, &loaded->checkpoint).ok());
  EXPECT_TRUE(read_file(out) == read_file(path));
  auto reversed = loaded->plan.reverse(params_from(loaded->params));
  ASSERT_TRUE(reversed.ok());
  EXPECT_EQ(reversed->size(), tensors.size() - 1);
}

TEST(WeightLoader, ErrorsNameTheModelAndTheRule) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"a.gate_proj.weight", iota(DType::kF32, {2, 2})}}).ok());
  WeightConverter fuse{{"gate_proj.weight", "up_proj.weight"}, {"gate_up_proj.weight"}, {Concatenate(0)}, false, "fuse"};
  auto loaded = load_weights(path, {fuse}, {{"a.gate_up_proj.weight", {{4, 2}}}}, "TestModel");
  ASSERT_FALSE(loaded.ok());
  const std::string msg = loaded.status().message();
  EXPECT_NE(msg.find("TestModel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'fuse'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a.up_proj.weight'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace loom
