// Tensor parallelism checked against the single process it must equal. Run
// plainly (as ctest does), this program tests the pieces in-process, then runs
// itself under mpirun with 2 and 4 ranks: there every rank runs each test
// together, rank 0 also loads the unsplit model and compares, the others follow
// rank 0's steps. mpirun is Debian's OpenMPI (scripts/install-deps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <unistd.h>
#include <string>

#include "loom/batching/generate_batch.h"
#include "loom/batching/model_runner.h"
#include "loom/batching/step_broadcast.h"
#include "loom/core/thread_pool.h"
#include "loom/models/decoder.h"
#include "loom/models/model.h"
#include "loom/models/save_gguf.h"
#include "loom/runtime/collectives.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "loom/weights/quantization_recipe.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using batching::ModelRunner;

fs::path fixtures_dir() {
  if (const char* env = std::getenv("LOOM_FIXTURES_DIR")) return env;
  return fs::path(LOOM_BINARY_DIR) / "fixtures";
}

ThreadPool& one_thread() {
  static ThreadPool pool(1);
  return pool;
}

runtime::Collectives* group() { return runtime::process_collectives(); }
int world() { return group() ? group()->size() : 1; }
bool leader() { return !group() || group()->rank() == 0; }

Result<std::shared_ptr<models::Model>> load(const std::string& fixture, int ranks, const char* quantize = nullptr) {
  models::LoadOptions o;
  if (ranks > 1) o.tensor_parallel = {group()->rank(), ranks};
  if (quantize) o.quantize = quantization_recipe(quantize).value();
  return models::Model::load((fixtures_dir() / fixture).string(), o);
}

std::shared_ptr<ModelRunner> runner_for(std::shared_ptr<models::Model> m) {
  return std::shared_ptr<ModelRunner>(ModelRunner::create(std::move(m), "cpu", &one_thread()).value().release());
}

// Rank 0 ends the others' follow_steps() however its test body ends.
struct EndSteps {
  ModelRunner& r;
  ~EndSteps() { EXPECT_TRUE(r.end_steps().ok()); }
};

// Why a fixture cannot be split over `n` ranks ("" when it can).
std::string why_not_splittable(const std::string& fixture, int n) {
  std::ifstream in(fixtures_dir() / fixture / "config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  const int64_t heads = c.value("num_attention_heads", c.value("n_head", int64_t{0}));
  const int64_t kv = c.value("num_key_value_heads", heads);
  if (c.value("model_type", "") == "olmo2") return "normalizes q and k over all heads at once";
  if (heads % n) return "num_attention_heads";
  if (kv % n && n % kv) return "num_key_value_heads";  // more ranks than KV heads replicate them
  for (const char* key : {"intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"})
    if (c.contains(key) && c.at(key).get<int64_t>() % n) return "intermediate features";
  // gpt-oss's MXFP4 experts split by 32-value blocks only.
  const nlohmann::json q = c.value("quantization_config", nlohmann::json::object());
  if (q.value("quant_method", "") == "mxfp4" && c.value("intermediate_size", int64_t{0}) / n % 32)
    return "cuts its MXFP4 blocks of 32";
  return "";
}

std::vector<std::string> f32_fixtures() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fixtures_dir())) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.size() > 4 && name.ends_with("-f32")) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int argmax(const float* row, int64_t n) { return static_cast<int>(std::max_element(row, row + n) - row); }

// A prompt, then greedy decode steps: the split model's logits within `tol` of
// the whole model's at every step (relative to the largest logit: the partial
// sums of a row-parallel linear add in another order), and the same greedy tokens.
void expect_same_logits(const std::string& fixture, ModelRunner& split, ModelRunner* whole, double tol) {
  runtime::ContiguousKvCache split_kv(split.kv_layout(), 1, 64);
  runtime::ContiguousKvCache whole_kv(whole->kv_layout(), 1, 64);
  const int64_t vocab = whole->model().vocab_size();
  std::vector<int32_t> pending = {1, 7, 19, 3, 42, 11, 5};
  int64_t past = 0;
  for (int step = 0; step < 8; ++step) {
    batching::SequenceChunk c{pending.data(), static_cast<int64_t>(pending.size()), past};
    Tensor a = split.step({c}, split_kv).value();
    std::vector<float> got(a.data_as<float>(), a.data_as<float>() + vocab);
    Tensor b = whole->step({c}, whole_kv).value();
    const float* want = b.data_as<float>();
    double worst = 0, scale = 1;
    for (int64_t i = 0; i < vocab; ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    }
    EXPECT_LE(worst, tol * scale) << fixture << " step " << step << " (largest logit " << scale << ")";
    const int next = argmax(want, vocab);
    EXPECT_EQ(argmax(got.data(), vocab), next) << fixture << " step " << step;
    past += c.num_tokens;
    pending.assign(1, next);
  }
}

// ── in one process ──

TEST(TensorParallelPieces, ShardsAreTheCheckpointsRowsAndColumns) {
  Tensor w = Tensor::from_f32({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  Tensor rows = models::shard_parameter("w", w, {0, 1, 2, false}).value();
  EXPECT_EQ(rows.to_f32_vector(), (std::vector<float>{4, 5, 6, 7}));
  Tensor cols = models::shard_parameter("w", w, {1, 1, 2, false}).value();
  EXPECT_EQ(cols.to_f32_vector(), (std::vector<float>{2, 3, 6, 7}));
  Tensor bias = Tensor::from_f32({1, 2}, {2});
  EXPECT_EQ(models::shard_parameter("b", bias, {-1, 1, 2, true}).value().to_f32_vector(), (std::vector<float>{0, 0}));
  EXPECT_EQ(models::shard_parameter("b", bias, {-1, 0, 2, true}).value().to_f32_vector(), (std::vector<float>{1, 2}));
  auto uneven = models::shard_parameter("w", w, {1, 0, 3, false});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("not divisible"), std::string::npos);
  // Q8_0 blocks hold 32 columns: 64 split in two is whole blocks, in four is not.
  Tensor q = Tensor::zeros(DType::kF32, {2, 64}).to(DType::kQ8_0);
  EXPECT_TRUE(models::shard_parameter("q", q, {1, 1, 2, false}).ok());
  auto cut = models::shard_parameter("q", q, {1, 1, 4, false});
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("Q8_0 blocks"), std::string::npos);
}

// A MoE's stacked experts: gate_up [E, 2I, H] gives each rank its rows of gate and
// of up for every expert, down [E, H, I] its columns.
TEST(TensorParallelPieces, StackedExpertsGiveEveryRankItsSliceOfEachExpert) {
  std::vector<float> v(2 * 4 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor gate_up = Tensor::from_f32(v, {2, 4, 2});  // E 2, I 2 (gate rows 0-1, up rows 2-3), H 2
  EXPECT_EQ(models::shard_parameter("gu", gate_up, {1, 1, 2, false, 2}).value().to_f32_vector(),
            (std::vector<float>{2, 3, 6, 7, 10, 11, 14, 15}));
  Tensor down = Tensor::from_f32(v, {2, 2, 4});  // E 2, H 2, I 4
  Tensor d = models::shard_parameter("dn", down, {2, 0, 2, false}).value();
  EXPECT_EQ(d.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(d.to_f32_vector(), (std::vector<float>{0, 1, 4, 5, 8, 9, 12, 13}));
  auto uneven = models::shard_parameter("gu", gate_up, {1, 0, 4, false, 2});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("not divisible"), std::string::npos) << uneven.status().to_string();
}

TEST(TensorParallelPieces, StepBroadcastsRoundTripAndTruncationIsAnError) {
  batching::StepBroadcast p;
  p.kv_id = 77;
  p.kv_bytes = 4096;
  p.page_size = 16;
  p.sequences.push_back({{5, 6, 7}, 3, true, {{0, -1}, {128}}, {{64, -1}, {192}}});
  const std::vector<uint8_t> bytes = batching::encode_step_broadcast(p);
  batching::StepBroadcast q = batching::decode_step_broadcast(bytes).value();
  EXPECT_EQ(q.sequences.at(0).tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(q.sequences[0].v_pages[1], (std::vector<int64_t>{192}));
  EXPECT_TRUE(q.sequences[0].all_rows);
  batching::MirroredKvStore kv;
  ASSERT_TRUE(kv.bind(q).ok());
  EXPECT_EQ(kv.pages(0, 0).k_pages[1], nullptr);
  EXPECT_EQ(static_cast<const char*>(kv.pages(1, 0).v_pages[0]) - static_cast<const char*>(kv.memory().base), 192);
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 3);
  EXPECT_FALSE(batching::decode_step_broadcast(cut).ok());
}

TEST(TensorParallelPieces, ASplitGraphRefusesToRunAlone) {
  models::LoadOptions o;
  o.tensor_parallel = {0, 2};
  auto m = models::Model::load((fixtures_dir() / "llama-f32").string(), o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto r = ModelRunner::create(*m, "cpu", &one_thread());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("process group of 1"), std::string::npos);
}

// A tied LM head is vocab-parallel too: each rank's head reads its rows of the
// embedding table in place (no copy), the lookup keeps the whole table, and the
// logits are gathered. (EveryFixtureEqualsOneProcess checks its logits.)
TEST(TensorParallelPieces, ATiedHeadReadsItsRowsOfTheEmbeddingTable) {
  for (int rank = 0; rank < 2; ++rank) {
    models::LoadOptions o;
    o.tensor_parallel = {rank, 2};
    auto m = models::Model::load((fixtures_dir() / "llama-f32").string(), o);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_TRUE((*m)->config().tie_word_embeddings) << "llama-f32 is the tied fixture";
    const models::Linear& head = (*m)->module().lm_head();
    EXPECT_EQ(head.tied_rows_of(), "model.embed_tokens.weight");
    const Tensor& table = (*m)->parameters().at("model.embed_tokens.weight");
    const int64_t vocab = (*m)->vocab_size(), half = vocab / 2;
    EXPECT_EQ(table.dim(0), vocab) << "the lookup keeps the whole table";
    EXPECT_EQ((*m)->parameters().count(head.weight_name()), 0u) << "a view, not another parameter";
    const graph::Graph& g = *(*m)->step_graph();
    bool found = false;
    for (graph::ValueId v : g.parameters()) {
      const graph::Value& val = g.value(v);
      if (val.name != head.weight_name()) continue;
      found = true;
      EXPECT_EQ(val.tensor.dim(0), half);
      EXPECT_EQ(val.tensor.data(), static_cast<const char*>(table.data()) + rank * half * table.dim(1) * 4)
          << "rank " << rank << "'s rows, in place";
    }
    EXPECT_TRUE(found) << head.weight_name();
    int gathers = 0;
    for (const graph::Node& node : g.nodes()) gathers += node.op == "all_gather";
    EXPECT_EQ(gathers, 1);
  }
}

// ── in an mpirun job: every rank runs these together ──

TEST(TensorParallelGroup, EveryFixtureEqualsOneProcess) {
  const int n = world();
  int compared = 0;
  for (const std::string& fixture : f32_fixtures()) {
    SCOPED_TRACE(fixture + " over " + std::to_string(n) + " ranks");
    const std::string refusal = why_not_splittable(fixture, n);
    auto split_model = load(fixture, n);
    if (!refusal.empty()) {
      ASSERT_FALSE(split_model.ok());
      EXPECT_NE(split_model.status().message().find(refusal), std::string::npos)
          << split_model.status().to_string();
      continue;
    }
    ASSERT_TRUE(split_model.ok()) << split_model.status().to_string();
    auto split = runner_for(*split_model);
    if (!leader()) {
      ASSERT_TRUE(split->follow_steps().ok());
      continue;
    }
    EndSteps end{*split};
    auto whole = runner_for(load(fixture, 1).value());
    expect_same_logits(fixture, *split, whole.get(), 1e-5);
    ++compared;
  }
  if (leader()) EXPECT_GE(compared, n == 2 ? 10 : 2) << "too few fixtures split over " << n << " ranks";
}

// Sliding windows and a vocab-parallel LM head over 2 ranks; 4 KV heads over 4.
std::string batch_fixture() { return world() == 4 ? "llama_mha_untied-f32" : "mistral_sliding-f32"; }

TEST(TensorParallelGroup, MixedBatchEqualsOneProcess) {
  auto split = runner_for(load(batch_fixture(), world()).value());
  if (!leader()) {
    ASSERT_TRUE(split->follow_steps().ok());
    return;
  }
  EndSteps end{*split};
  auto whole = runner_for(load(batch_fixture(), 1).value());
  const int32_t vocab = static_cast<int32_t>(whole->model().vocab_size());
  std::mt19937 rng(7);
  std::vector<batching::BatchInput> inputs;
  for (int i = 0; i < 10; ++i) {
    batching::BatchInput in;
    std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
    for (int t = 0; t < 5 + 17 * i % 90; ++t) in.input_ids.push_back(tok(rng));
    in.options.request_id = "r" + std::to_string(i);
    in.options.max_new_tokens = 4 + i % 9;
    if (i % 3 == 1) {  // sampled, with the request's own seed
      in.options.do_sample = true;
      in.options.temperature = 0.8f;
      in.options.seed = 100 + i;
    } else {
      in.options.do_sample = false;
    }
    inputs.push_back(std::move(in));
  }
  batching::ContinuousBatchingConfig cb;
  cb.page_size = 16;
  cb.num_blocks = 64;
  cb.max_batch_tokens = 48;  // prefill in chunks, mixed with other requests' decode steps
  cb.per_request_processors = true;
  GenerationConfig gc;
  auto got = batching::generate_batch(split, inputs, gc, cb).value();
  auto want = batching::generate_batch(whole, inputs, gc, cb).value();
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    EXPECT_EQ(got.outputs[i].generated_tokens, want.outputs[i].generated_tokens) << want.outputs[i].request_id;
    EXPECT_FALSE(want.outputs[i].generated_tokens.empty());
  }
}

TEST(TensorParallelGroup, Q8_0WeightsEqualOneProcess) {
  // mistral_sliding: hidden 128 and intermediate 320 keep Q8_0's 32-column
  // blocks whole over 2 ranks. Over 4, llama_mha_untied's o_proj would hold 24
  // of its 96 columns per rank: less than a block, which is refused.
  const int n = world();
  auto split_model = load(batch_fixture(), n, "q8_0");
  if (n == 4) {
    ASSERT_FALSE(split_model.ok());
    EXPECT_NE(split_model.status().message().find("Q8_0"), std::string::npos) << split_model.status().to_string();
    return;
  }
  ASSERT_TRUE(split_model.ok()) << split_model.status().to_string();
  auto split = runner_for(*split_model);
  if (!leader()) {
    ASSERT_TRUE(split->follow_steps().ok());
    return;
  }
  EndSteps end{*split};
  auto whole = runner_for(load("mistral_sliding-f32", 1, "q8_0").value());
  EXPECT_TRUE(dtype_is_quantized(whole->model().parameters().at("model.layers.0.mlp.down_proj.weight").dtype()));
  expect_same_logits("mistral_sliding-f32 q8_0", *split, whole.get(), 1e-4);
}

// GGUF's quantized tensors are read in place and cut on block rows / block
// columns, as the file stores them.
TEST(TensorParallelGroup, GgufQ8_0EqualsOneProcess) {
  const int n = world();
  // qwen3: its 64 hidden and 192 intermediate columns split into whole Q8_0
  // blocks over 2 ranks (sliding windows have no GGUF form, so not mistral_sliding).
  const std::string fixture = n == 4 ? "llama_mha_untied-f32" : "qwen3-f32";
  const std::string path = (fs::temp_directory_path() / ("loom-tp-" + std::to_string(getpid()) + ".gguf")).string();
  {
    auto whole = load(fixture, 1).value();
    models::GgufSaveOptions o;
    o.tensor_type = [](const std::string&, const Tensor& t) -> Result<std::optional<DType>> {
      if (t.dim(1) % 32 == 0) return std::optional<DType>(DType::kQ8_0);
      return std::optional<DType>();
    };
    const Status saved = models::save_gguf(*whole, path, o);
    ASSERT_TRUE(saved.ok()) << saved.to_string();
  }
  models::LoadOptions lo;
  lo.tensor_parallel = {group()->rank(), n};
  auto split_model = models::Model::load(path, lo);
  if (n == 4) {  // llama_mha_untied's o_proj: 24 of 96 columns per rank, less than a block
    fs::remove(path);
    ASSERT_FALSE(split_model.ok());
    EXPECT_NE(split_model.status().message().find("Q8_0 blocks"), std::string::npos) << split_model.status().to_string();
    return;
  }
  ASSERT_TRUE(split_model.ok()) << split_model.status().to_string();
  EXPECT_EQ((*split_model)->parameters().at("model.layers.0.mlp.down_proj.weight").dtype(), DType::kQ8_0);
  auto split = runner_for(*split_model);
  if (!leader()) {
    ASSERT_TRUE(split->follow_steps().ok());
    fs::remove(path);
    return;
  }
  EndSteps end{*split};
  auto whole = runner_for(models::Model::load(path).value());
  fs::remove(path);
  expect_same_logits(fixture + " gguf q8_0", *split, whole.get(), 1e-4);
}

}  // namespace
}  // namespace loom

// Plain run: the in-process tests, then this program under mpirun with 2 and 4 ranks.
int main(int argc, char** argv) {
  using loom::runtime::launched_by_mpi;
  if (launched_by_mpi()) {
    auto g = loom::runtime::open_mpi_world(60.0);
    if (!g.ok()) {
      std::fprintf(stderr, "%s\n", g.status().to_string().c_str());
      return 1;
    }
    loom::runtime::set_process_collectives(*g);
    ::testing::GTEST_FLAG(filter) = "TensorParallelGroup.*";
    ::testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    loom::runtime::set_process_collectives(nullptr);  // MPI_Finalize on every rank
    return rc;
  }
  ::testing::GTEST_FLAG(filter) = "TensorParallelPieces.*";
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  for (int n : {2, 4}) {
    // As root (CI), oversubscribed (2 cores here), unbound, one thread per rank.
    const std::string cmd = "timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -x LOOM_NUM_THREADS=1 -np " +
                            std::to_string(n) + " " + self;
    std::printf("── %s\n", cmd.c_str());
    std::fflush(stdout);
    const int status = std::system(cmd.c_str());
    if (status != 0) {
      std::printf("FAILED: %d ranks (status %d)\n", n, status);
      rc = 1;
    }
  }
  return rc;
}
