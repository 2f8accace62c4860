// Patches on real model code: register_patch on "models.<Class>.forward"
// changes what an export captures (and only that export), wraps the original,
// and is gone after the export, whether it succeeded or threw.
#include <gtest/gtest.h>

#include "export/export_test_util.h"
#include "loom/export/program_exporter.h"
#include "loom/export/registries.h"
#include "loom/models/patch_points.h"

namespace loom::exporting {
namespace {

struct Backend {
  std::string name;
  explicit Backend(std::string n) : name(std::move(n)) {}
  ~Backend() { unregister_backend(name); }
};

int count_ops(const graph::Graph& g, const std::string& op) {
  int n = 0;
  for (const graph::Node& node : g.nodes()) n += node.op == op;
  return n;
}

// Wraps every MLP: its output scaled by `factor` (a "scale" op the Llama graph has none of).
void register_scaled_mlp(const std::string& backend, const std::string& path, bool throws = false) {
  register_patch<models::UnaryForwardSig>(backend, "scaled_mlp", {path}, [throws](std::function<models::UnaryForwardSig> orig) {
    return std::function<models::UnaryForwardSig>(
        [orig, throws](const models::UnaryModule& m, models::GraphBuilder& b, graph::ValueId x) {
          if (throws) throw Error(internal_error("patched " + m.path() + " refuses"));
          const graph::ValueId y = orig(m, b, x);
          models::GraphBuilder::Scope scope(b, m.path());
          return b.op("scale", {y}, {{"factor", 2.0}});
        });
  });
}

TEST(ModelPatches, LayerClassesHavePatchPointsNamedLikeUpstream) {
  auto model = export_test::load("qwen3-f32");
  for (const char* path : {"models.Qwen3DecoderLayer.forward", "models.Qwen3Attention.forward", "models.Qwen3MLP.forward",
                           "models.Qwen3RMSNorm.forward"})
    EXPECT_NE(graph::PatchRegistry::global().find(path), nullptr) << path;
}

TEST(ModelPatches, APatchOnAModuleMethodChangesOnlyThatExport) {
  auto model = export_test::load("llama-f32");
  ASSERT_EQ(count_ops(*model->step_graph(), "scale"), 0);
  Backend b("test_model_patch");
  register_scaled_mlp(b.name, "models.LlamaMLP.forward");
  ProgramExportOptions o;
  o.backend = b.name;
  o.strict = true;
  ExportSummary summary;
  auto patched = export_program(*model, o, &summary);
  ASSERT_TRUE(patched.ok()) << patched.status().message();
  EXPECT_EQ(count_ops(patched.value().graph, "scale"), model->num_layers());  // one per layer's MLP
  ASSERT_EQ(summary.patches_applied.size(), 1u);
  EXPECT_NE(summary.patches_applied[0].find("models.LlamaMLP.forward"), std::string::npos);

  // Gone afterwards: the default backend's export and a fresh recording see the plain MLP.
  auto plain = export_program(*model, ProgramExportOptions{}, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(count_ops(plain.value().graph, "scale"), 0);
}

TEST(ModelPatches, AnExportThatThrowsInsideAPatchRestoresIt) {
  auto model = export_test::load("llama-f32");
  {
    Backend b("test_model_patch_throws");
    register_scaled_mlp(b.name, "models.LlamaMLP.forward", /*throws=*/true);
    ProgramExportOptions o;
    o.backend = b.name;
    auto failed = export_program(*model, o, nullptr);
    ASSERT_FALSE(failed.ok());
    EXPECT_NE(failed.status().message().find("refuses"), std::string::npos) << failed.status().message();
  }
  auto plain = export_program(*model, ProgramExportOptions{}, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(count_ops(plain.value().graph, "scale"), 0);
}

// Op-level: "ops.silu" wraps every recorded silu (Llama's gated MLP records one
// per layer) with a scale; the wrapper records through `original`, which does
// not re-enter the patch.
TEST(ModelPatches, AnOpBuilderPatchRewritesEveryUseOfTheOpInThatExportOnly) {
  auto model = export_test::load("llama-f32");
  const int silus = count_ops(*model->step_graph(), "silu");
  ASSERT_EQ(silus, model->num_layers());
  Backend b("test_op_patch");
  register_patch<graph::OpBuilderSig>(b.name, "scaled_silu", {graph::op_patch_path("silu")},
                                      [](std::function<graph::OpBuilderSig> orig) {
                                        return std::function<graph::OpBuilderSig>(
                                            [orig](graph::GraphBuilder& gb, std::vector<graph::ValueId> in,
                                                   std::map<std::string, graph::AttrValue> attrs) {
                                              const graph::ValueId y = orig(gb, std::move(in), std::move(attrs));
                                              return gb.op("scale", {y}, {{"factor", 0.5}});
                                            });
                                      });
  ProgramExportOptions o;
  o.backend = b.name;
  o.strict = true;
  auto patched = export_program(*model, o, nullptr);
  ASSERT_TRUE(patched.ok()) << patched.status().message();
  EXPECT_EQ(count_ops(patched.value().graph, "silu"), silus);
  EXPECT_EQ(count_ops(patched.value().graph, "scale"), silus);
  auto plain = export_program(*model, ProgramExportOptions{}, nullptr);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(count_ops(plain.value().graph, "scale"), 0);
}

TEST(ModelPatches, AClassNoLoadedModelHasIsSkippedOrFailsInStrictMode) {
  auto model = export_test::load("llama-f32");
  Backend b("test_model_patch_missing");
  register_scaled_mlp(b.name, "models.NoSuchArchitectureMLP.forward");
  ProgramExportOptions o;
  o.backend = b.name;
  ExportSummary summary;
  ASSERT_TRUE(export_program(*model, o, &summary).ok());
  EXPECT_EQ(summary.patches_skipped.size(), 1u);
  o.strict = true;
  EXPECT_FALSE(export_program(*model, o, nullptr).ok());
}

}  // namespace
}  // namespace loom::exporting
