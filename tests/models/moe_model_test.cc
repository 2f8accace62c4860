// Mixtral, Qwen2-MoE, Qwen3-MoE (and gpt-oss's batching; gpt_oss_test.cc for the rest) beyond the parity fixtures: the module tree the configs
// imply, continuous batching giving each request its single-request tokens
// (the grouped MoE kernel mixes the requests' tokens per expert), and config
// and checkpoint errors naming their cause.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "loom/batching/generate.h"
#include "loom/batching/generate_batch.h"
#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using models_test::fixture;

int count_ops(const graph::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node.op == op;
  return n;
}

TEST(MoeModels, ModuleTreeFollowsTheConfig) {
  auto mix = models::Model::load(fixture("mixtral-f32").string()).value();
  EXPECT_EQ(mix->module().class_name(), "MixtralForCausalLM");
  EXPECT_EQ(mix->config().num_experts, 4);
  EXPECT_EQ(mix->config().num_experts_per_tok, 2);
  EXPECT_EQ(count_ops(*mix->step_graph(), "moe"), mix->num_layers());
  const auto& p = mix->parameters();
  ASSERT_TRUE(p.count("model.layers.0.mlp.experts.gate_up_proj"));
  EXPECT_EQ(p.at("model.layers.0.mlp.experts.gate_up_proj").shape(), (Shape{4, 2 * 96, 64}));
  EXPECT_EQ(p.at("model.layers.1.mlp.experts.down_proj").shape(), (Shape{4, 64, 96}));
  EXPECT_EQ(p.at("model.layers.1.mlp.gate.weight").shape(), (Shape{4, 64}));

  // Qwen2-MoE: layer 1 is in mlp_only_layers (a dense Qwen2MoeMLP of
  // intermediate_size); the others are sparse with a shared expert.
  auto qwen = models::Model::load(fixture("qwen2_moe-bf16").string()).value();
  EXPECT_EQ(count_ops(*qwen->step_graph(), "moe"), 2);
  const auto& q = qwen->parameters();
  EXPECT_TRUE(q.count("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_FALSE(q.count("model.layers.1.mlp.experts.gate_up_proj"));
  EXPECT_EQ(q.at("model.layers.2.mlp.experts.gate_up_proj").shape(), (Shape{4, 2 * 48, 64}));
  EXPECT_EQ(q.at("model.layers.0.mlp.shared_expert.gate_proj.weight").shape(), (Shape{80, 64}));
  EXPECT_EQ(q.at("model.layers.0.mlp.shared_expert_gate.weight").shape(), (Shape{1, 64}));
  EXPECT_TRUE(q.count("model.layers.0.self_attn.q_proj.bias"));
  // The stacked experts hold the checkpoint's per-expert tensors: expert 3's
  // up_proj is rows [48, 96) of gate_up_proj[3].
  const Checkpoint& ck = qwen->checkpoint();
  const Tensor up3 = ck.get("model.layers.2.mlp.experts.3.up_proj.weight").value();
  const Tensor gu = q.at("model.layers.2.mlp.experts.gate_up_proj");
  const std::vector<float> a = up3.to_f32_vector();
  const std::vector<float> b = gu.slice_rows(3, 4).reshape({96, 64}).slice_rows(48, 96).to_f32_vector();
  EXPECT_EQ(a, b);
}

TEST(MoeModels, Qwen3MoeLayersFollowSparseStepAndMlpOnlyLayers) {
  // decoder_sparse_step 2 (layers 1, 3, 5) minus mlp_only_layers [3]: two sparse
  // layers; the others are dense Qwen3MoeMLPs of intermediate_size.
  auto m = models::Model::load(fixture("qwen3_moe_dense_layers-f32").string()).value();
  EXPECT_EQ(m->module().class_name(), "Qwen3MoeForCausalLM");
  EXPECT_EQ(count_ops(*m->step_graph(), "moe"), 2);
  const auto& p = m->parameters();
  for (int layer : {0, 2, 3, 4}) {
    const std::string pre = "model.layers." + std::to_string(layer) + ".mlp.";
    ASSERT_TRUE(p.count(pre + "gate_proj.weight")) << layer;
    EXPECT_EQ(p.at(pre + "gate_proj.weight").shape(), (Shape{128, 64})) << layer;
    EXPECT_FALSE(p.count(pre + "experts.gate_up_proj")) << layer;
  }
  for (int layer : {1, 5}) {
    const std::string pre = "model.layers." + std::to_string(layer) + ".mlp.";
    EXPECT_EQ(p.at(pre + "experts.gate_up_proj").shape(), (Shape{4, 2 * 48, 64})) << layer;
    EXPECT_FALSE(p.count(pre + "shared_expert.gate_proj.weight")) << layer;
  }
  // Qwen3's attention: per-head q/k RMSNorm, and attention_bias puts biases on q/k/v/o.
  EXPECT_EQ(p.at("model.layers.0.self_attn.q_norm.weight").shape(), (Shape{32}));
  EXPECT_TRUE(p.count("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_EQ(m->config().num_experts, 4);

  // The all-sparse fixture: every layer routes, nothing dense is left.
  auto all = models::Model::load(fixture("qwen3_moe-bf16").string()).value();
  EXPECT_EQ(count_ops(*all->step_graph(), "moe"), all->num_layers());
  EXPECT_FALSE(all->parameters().count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_EQ(all->config().num_experts_per_tok, 3);
}

// Greedy tokens of each request through continuous batching (requests of
// different lengths share steps, so an expert's token group mixes requests)
// equal the same request run alone.
void check_batched_equals_alone(const std::string& name) {
  SCOPED_TRACE(name);
  auto model = models::Model::load(fixture(name).string()).value();
  auto runner = std::shared_ptr<batching::ModelRunner>(batching::ModelRunner::create(model, "cpu").value());
  std::mt19937 rng(7);
  std::vector<batching::BatchInput> inputs;
  for (int i = 0; i < 10; ++i) {
    batching::BatchInput in;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int t = 0; t < len; ++t) in.input_ids.push_back(3 + static_cast<int32_t>(rng() % (model->vocab_size() - 3)));
    in.options.request_id = "r" + std::to_string(i);
    inputs.push_back(std::move(in));
  }
  GenerationConfig gc;
  gc.max_new_tokens = 12;
  batching::ContinuousBatchingConfig cfg;
  cfg.page_size = 16;
  cfg.num_blocks = 200;
  cfg.max_batch_tokens = 48;  // prefills are chunked and mixed with decodes
  batching::GenerateBatchOptions opts;
  opts.warmup = false;
  const batching::BatchResult r = batching::generate_batch(runner, inputs, gc, cfg, opts).value();
  ASSERT_EQ(r.outputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    batching::GenerateOptions o;
    o.max_new_tokens = 12;
    const auto alone = batching::generate(*runner, inputs[i].input_ids, o).value();
    // The manager stops at the fixture's EOS (2); running alone does not.
    const std::vector<int32_t>& got = r.outputs[i].generated_tokens;
    ASSERT_LE(got.size(), alone.generated_ids.size());
    EXPECT_EQ(got, std::vector<int32_t>(alone.generated_ids.begin(), alone.generated_ids.begin() + got.size()))
        << "request " << i;
    if (got.size() < alone.generated_ids.size()) EXPECT_EQ(got.back(), 2) << "request " << i << " stopped early";
  }
}

TEST(MoeModels, BatchedGenerationEqualsEachRequestAlone) {
  check_batched_equals_alone("mixtral-f32");
  check_batched_equals_alone("qwen2_moe-bf16");
  check_batched_equals_alone("qwen3_moe-f32");
  check_batched_equals_alone("qwen3_moe_dense_layers-bf16");
  // gpt-oss: sinks, alternating windows (16) crossed by the longer requests, biased experts.
  check_batched_equals_alone("gpt_oss-f32");
  check_batched_equals_alone("gpt_oss_mxfp4-bf16");
}

// A copy of a fixture with config.json edited by `edit`, for error checks.
fs::path edited_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = fs::temp_directory_path() / ("loom_moe_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(fixture(name))) fs::copy_file(e.path(), dir / e.path().filename());
  nlohmann::json cfg;
  std::ifstream(dir / "config.json") >> cfg;
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return dir;
}

TEST(MoeModels, ConfigAndCheckpointErrorsNameTheCause) {
  {
    const fs::path d = edited_copy("mixtral-f32", [](nlohmann::json& c) { c["num_experts_per_tok"] = 5; });
    auto r = models::Model::load(d.string());
    fs::remove_all(d);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("num_experts_per_tok"), std::string::npos) << r.status().to_string();
  }
  {
    // Six experts in the config, four in the file: the missing expert tensors are named.
    const fs::path d = edited_copy("mixtral-f32", [](nlohmann::json& c) { c["num_local_experts"] = 6; });
    auto r = models::Model::load(d.string());
    fs::remove_all(d);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("experts"), std::string::npos) << r.status().to_string();
  }
  {
    const fs::path d = edited_copy("qwen2_moe-f32", [](nlohmann::json& c) { c["mlp_only_layers"] = "1"; });
    auto r = models::Model::load(d.string());
    fs::remove_all(d);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("mlp_only_layers"), std::string::npos) << r.status().to_string();
  }
  {
    const fs::path d = edited_copy("qwen3_moe-f32", [](nlohmann::json& c) { c["decoder_sparse_step"] = 0; });
    auto r = models::Model::load(d.string());
    fs::remove_all(d);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("decoder_sparse_step"), std::string::npos) << r.status().to_string();
  }
  {
    // Layer 1 made dense by the config, but the file holds its experts, not a dense MLP.
    const fs::path d = edited_copy("qwen3_moe-f32", [](nlohmann::json& c) { c["mlp_only_layers"] = {1}; });
    auto r = models::Model::load(d.string());
    fs::remove_all(d);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("model.layers.1.mlp"), std::string::npos) << r.status().to_string();
  }
}

}  // namespace
}  // namespace loom
