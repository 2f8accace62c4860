// export_program: the captured, fixed program runs in loom exactly like the
// model's own step graph (dynamic: at several token/sequence counts; static: at
// its fixed sizes only), its stages report what they did, and bad options fail
// naming the dimension.
#include "loom/export/program_exporter.h"
#include "export/export_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "loom/export/program_io.h"
#include "loom/export/registries.h"
#include "loom/runtime/executor.h"
#include "loom/runtime/kv_cache_contiguous.h"

namespace loom::exporting {
namespace {

namespace fs = std::filesystem;
using export_test::load;

// Logits of `seqs` sequences of `len` tokens (prefill, by `g`), then one
// decode step each (by `decode_g`, or `g` when null).
Result<std::vector<float>> run(std::shared_ptr<const graph::Graph> g, const models::Model& m, int seqs, int len,
                               std::shared_ptr<const graph::Graph> decode_g = nullptr) {
  LOOM_ASSIGN_OR_RETURN(auto prefill_exec, runtime::Executor::create(g, runtime::cpu_backend()));
  std::unique_ptr<runtime::Executor> decode_exec;
  if (decode_g) {
    LOOM_ASSIGN_OR_RETURN(decode_exec, runtime::Executor::create(std::move(decode_g), runtime::cpu_backend()));
  }
  runtime::KvLayout l;
  l.num_layers = m.num_layers();
  l.num_kv_heads = m.num_kv_heads();
  l.head_dim = m.head_dim();
  runtime::ContiguousKvCache cache(l, seqs, len + 2);
  std::mt19937 rng(static_cast<uint32_t>(seqs * 100 + len));
  std::vector<float> all;
  for (int step = 0; step < 2; ++step) {
    const int q = step == 0 ? len : 1, past = step == 0 ? 0 : len;
    graph::StepContext ctx;
    std::vector<int32_t> ids, rows;
    for (int s = 0; s < seqs; ++s) {
      ctx.sequences.push_back({static_cast<int64_t>(ids.size()), q, past});
      for (int i = 0; i < q; ++i) {
        ids.push_back(static_cast<int32_t>(3 + rng() % static_cast<uint32_t>(m.vocab_size() - 3)));
        ctx.positions.push_back(past + i);
      }
      rows.push_back(static_cast<int32_t>(ids.size() - 1));
    }
    ctx.kv = &cache;
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<Tensor> out;
    runtime::Executor* exec = step == 1 && decode_exec ? decode_exec.get() : prefill_exec.get();
    LOOM_RETURN_IF_ERROR(exec->run({{"input_ids", Tensor::wrap(ids.data(), DType::kI32, {n})},
                                    {"positions", Tensor::wrap(ctx.positions.data(), DType::kI32, {n})},
                                    {"logits_indices", Tensor::wrap(rows.data(), DType::kI32, {seqs})}},
                                   &ctx, &out));
    const float* f = out.at(0).data_as<float>();
    all.insert(all.end(), f, f + out.at(0).numel());
  }
  return all;
}

// Every fixture variant (each architecture, f32 and bf16).
std::vector<std::string> variants() {
  std::vector<std::string> names = export_test::variant_names();
  if (names.empty()) ADD_FAILURE() << "no fixtures in " << export_test::fixtures_dir() << ": run scripts/make-fixtures";
  return names;
}

TEST(ProgramExporter, DynamicProgramMatchesTheModelAtSeveralSizesForEveryVariant) {
  for (const std::string& name : variants()) {
    SCOPED_TRACE(name);
    auto model = load(name);
    ExportSummary summary;
    ProgramExportOptions o;
    const ExportedProgram p = export_program(*model, o, &summary).value();
    EXPECT_EQ(p.input_names, (std::vector<std::string>{"input_ids", "positions", "logits_indices"}));
    EXPECT_EQ(p.output_names, std::vector<std::string>{"logits"});
    EXPECT_EQ(p.dims.at("tokens").max, model->config().max_position_embeddings);
    EXPECT_EQ(p.metadata.at("cache.layer.0").rfind("kv_heads=" + std::to_string(model->num_kv_heads()), 0), 0u);
    // Through disk and back, then run next to the model's own graph.
    const fs::path dir = fs::temp_directory_path() / ("loom_export_program_" + std::to_string(::getpid()));
    ASSERT_TRUE(save_program(p, dir.string()).ok());
    const auto loaded = std::make_shared<graph::Graph>(load_program(dir.string()).value().graph);
    fs::remove_all(dir);
    for (auto [seqs, len] : {std::pair{1, 7}, std::pair{3, 20}, std::pair{2, 1}}) {
      const std::vector<float> want = run(model->step_graph(), *model, seqs, len).value();
      EXPECT_EQ(run(loaded, *model, seqs, len).value(), want) << seqs << " × " << len;
    }
  }
}

// Static programs have no symbolic dims: one for the prefill (2 sequences × 5
// tokens) and one for the decode step (2 × 1), run in turn over one cache.
TEST(ProgramExporter, StaticProgramsMatchTheModelOnPrefillAndDecodeForEveryVariant) {
  for (const std::string& name : variants()) {
    SCOPED_TRACE(name);
    auto model = load(name);
    ProgramExportOptions prefill, decode;
    prefill.dynamic = decode.dynamic = false;
    prefill.static_sizes = {{"tokens", 10}, {"sequences", 2}};
    decode.static_sizes = {{"tokens", 2}, {"sequences", 2}};
    auto pp = export_program(*model, prefill);
    auto dp = export_program(*model, decode);
    ASSERT_TRUE(pp.ok()) << pp.status().message();
    ASSERT_TRUE(dp.ok()) << dp.status().message();
    const std::vector<float> want = run(model->step_graph(), *model, 2, 5).value();
    auto got = run(std::make_shared<graph::Graph>(pp.value().graph), *model, 2, 5,
                   std::make_shared<graph::Graph>(dp.value().graph));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got.value(), want);
  }
}

TEST(ProgramExporter, AModelLoadedWithKernelsExportsTheKernelsItRecords) {
  auto model = load("llama-f32", export_test::fused_kernels());
  const ExportedProgram p = export_program(*model, {}).value();
  int fused = 0;
  for (const graph::Node& n : p.graph.nodes()) fused += n.op == "silu_and_mul" || n.op == "split_columns";
  EXPECT_EQ(fused, 2 * model->num_layers());
  EXPECT_EQ(run(std::make_shared<graph::Graph>(p.graph), *model, 2, 6).value(),
            run(model->step_graph(), *model, 2, 6).value());
}

TEST(ProgramExporter, StaticProgramRunsAtItsSizesAndRejectsOthers) {
  auto model = load("llama-f32");
  ProgramExportOptions o;
  o.dynamic = false;
  o.static_sizes = {{"tokens", 6}, {"sequences", 2}};
  const ExportedProgram p = export_program(*model, o).value();
  EXPECT_TRUE(p.dims.empty());
  for (const graph::Value& v : p.graph.values())
    for (const graph::Dim& d : v.shape) EXPECT_TRUE(d.is_static()) << v.name;
  auto g = std::make_shared<graph::Graph>(p.graph);
  // 2 sequences × 3 tokens = 6 rows fit; the decode step (2 rows) does not.
  Result<std::vector<float>> r = run(g, *model, 2, 3);
  ASSERT_FALSE(r.ok());
  o.static_sizes["tokens"] = 2;
  EXPECT_FALSE(export_program(*model, {false, {}, {{"tokens", 2}}}).ok());  // sequences has no size
  Result<ExportedProgram> bad = export_program(*model, {true, {{"batch", {1, 4}}}, {}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'batch'"), std::string::npos) << bad.status().to_string();
}

TEST(ProgramExporter, RegisteredFixesRunAndAreReported) {
  const std::string backend = "test_program_exporter";
  // A rewrite that keeps the arithmetic: mul(a, b) → mul(b, a).
  register_node_fix(backend, "mul", "swap_mul_operands", [](graph::Graph& g, graph::NodeId id) {
    const graph::Node n = g.node(id);
    if (n.attrs.count("swapped")) return false;
    auto attrs = n.attrs;
    attrs["swapped"] = int64_t{1};
    const graph::ValueId out = g.add_node("mul", {n.inputs[1], n.inputs[0]}, attrs, n.scope)[0];
    g.replace_uses(n.outputs[0], out);
    return true;
  });
  register_program_fix(backend, "tag", [](ExportedProgram& p) {
    p.metadata["tagged"] = "yes";
    return Status::Ok();
  });
  register_patch<int(int)>(backend, "missing", {"models.llama.NoSuchModule.forward"}, [](std::function<int(int)> f) { return f; });
  auto model = load("llama-f32");
  ProgramExportOptions o;
  o.backend = backend;
  ExportSummary s;
  const ExportedProgram p = export_program(*model, o, &s).value();
  EXPECT_EQ(s.node_fix_rewrites.at("swap_mul_operands"), model->num_layers());  // one gated MLP per layer
  EXPECT_EQ(s.dead_nodes_removed, model->num_layers());
  EXPECT_EQ(s.program_fixes, std::vector<std::string>{"tag"});
  EXPECT_EQ(s.patches_skipped, std::vector<std::string>{"models.llama.NoSuchModule.forward"});
  EXPECT_EQ(p.metadata.at("tagged"), "yes");
  EXPECT_EQ(run(std::make_shared<graph::Graph>(p.graph), *model, 2, 5).value(),
            run(model->step_graph(), *model, 2, 5).value());
  o.strict = true;
  EXPECT_EQ(export_program(*model, o).status().code(), ErrorCode::kNotFound);
  unregister_backend(backend);
}

}  // namespace
}  // namespace loom::exporting
