// An ExportedProgram saved and loaded again is the same program: the loaded
// graph runs in loom (runtime::Executor) and gives bitwise the logits of the
// graph it was saved from, on a prefill and on a decode step with a cache; a
// damaged file fails to load with an error naming what is wrong.
#include "loom/export/program_io.h"
#include "export/export_test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/graph/graph_json.h"
#include "loom/models/model.h"
#include "loom/runtime/executor.h"
#include "loom/runtime/kv_cache_contiguous.h"

namespace loom::exporting {
namespace {

namespace fs = std::filesystem;
using export_test::fixture;

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("loom_export_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// Logits of a 5-token prefill then one decode step, through `g`.
std::vector<float> run_two_steps(std::shared_ptr<const graph::Graph> g, const models::Model& m) {
  auto exec = runtime::Executor::create(std::move(g), runtime::cpu_backend()).value();
  runtime::KvLayout l;
  l.num_layers = m.num_layers();
  l.num_kv_heads = m.num_kv_heads();
  l.head_dim = m.head_dim();
  runtime::ContiguousKvCache cache(l, 1, 16);
  std::vector<float> all;
  std::vector<int32_t> ids = {5, 9, 2, 7, 11}, pos = {0, 1, 2, 3, 4}, rows = {4};
  for (int step = 0; step < 2; ++step) {
    graph::StepContext ctx;
    ctx.sequences.push_back({0, static_cast<int64_t>(ids.size()), pos.front()});
    ctx.positions = pos;
    ctx.kv = &cache;
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<Tensor> out;
    EXPECT_TRUE(exec->run({{"input_ids", Tensor::wrap(ids.data(), DType::kI32, {n})},
                           {"positions", Tensor::wrap(pos.data(), DType::kI32, {n})},
                           {"logits_indices", Tensor::wrap(rows.data(), DType::kI32, {1})}},
                          &ctx, &out)
                    .ok());
    const float* f = out.at(0).data_as<float>();
    all.insert(all.end(), f, f + out.at(0).numel());
    ids = {3};
    pos = {5};
    rows = {0};
  }
  return all;
}

ExportedProgram program_of(const models::Model& m) {
  ExportedProgram p;
  p.graph = *m.step_graph();
  p.input_names = {"input_ids", "positions", "logits_indices"};
  p.output_names = {"logits"};
  p.dims["tokens"] = {1, 4096};
  p.metadata["architecture"] = "LlamaForCausalLM";
  return p;
}

TEST(ProgramIo, SavedAndLoadedProgramRunsBitwiseLikeTheOriginal) {
  auto model = models::Model::load(fixture("llama-f32").string()).value();
  const ExportedProgram p = program_of(*model);
  const fs::path dir = temp_dir("roundtrip");
  ASSERT_TRUE(save_program(p, dir.string()).ok());
  const ExportedProgram q = load_program(dir.string()).value();
  EXPECT_EQ(q.input_names, p.input_names);
  EXPECT_EQ(q.output_names, p.output_names);
  EXPECT_EQ(q.dims.at("tokens").max, 4096);
  EXPECT_EQ(q.metadata.at("architecture"), "LlamaForCausalLM");
  EXPECT_EQ(q.graph.nodes().size(), p.graph.nodes().size());
  // Value ids are renumbered on load; ops, scopes and attributes are not.
  for (size_t i = 0; i < p.graph.nodes().size(); ++i) {
    const graph::Node &a = p.graph.nodes()[i], &b = q.graph.nodes()[i];
    EXPECT_EQ(a.op, b.op);
    EXPECT_EQ(a.scope, b.scope);
    EXPECT_EQ(a.attrs, b.attrs) << a.op << " " << a.scope;
  }
  // A loaded program saves to the same file again.
  const fs::path again = temp_dir("roundtrip_again");
  ASSERT_TRUE(save_program(q, again.string()).ok());
  EXPECT_EQ(graph::graph_to_json(load_program(again.string()).value().graph), graph::graph_to_json(q.graph));
  fs::remove_all(again);
  const std::vector<float> want = run_two_steps(model->step_graph(), *model);
  const std::vector<float> got = run_two_steps(std::make_shared<graph::Graph>(q.graph), *model);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got, want);
  fs::remove_all(dir);
}

TEST(ProgramIo, DamagedFilesFailWithAnErrorNamingTheProblem) {
  auto model = models::Model::load(fixture("llama-f32").string()).value();
  const fs::path dir = temp_dir("damaged");
  ASSERT_TRUE(save_program(program_of(*model), dir.string()).ok());
  nlohmann::json j;
  std::ifstream(dir / "program.json") >> j;
  auto expect_error = [&](nlohmann::json bad, const std::string& needle) {
    std::ofstream(dir / "program.json") << bad.dump();
    Result<ExportedProgram> r = load_program(dir.string());
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  };
  nlohmann::json bad = j;
  bad["format"] = "onnx";
  expect_error(bad, "not a loom program");
  bad = j;
  bad["graph"]["nodes"][3]["op"] = "no_such_op";
  expect_error(bad, "no_such_op");
  bad = j;
  bad["graph"]["nodes"][2]["inputs"][0] = 99999;
  expect_error(bad, "value 99999 is used before it is defined");
  bad = j;
  bad["signature"]["inputs"].push_back("attention_mask");
  expect_error(bad, "'attention_mask' is not a graph input");
  EXPECT_EQ(load_program((dir / "nowhere").string()).status().code(), ErrorCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::exporting
