#include "loom/kernels/kernel_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "kernels/kernels_test_util.h"
#include "loom/io/checkpoint.h"
#include "loom/io/safetensors_writer.h"

namespace loom::kernels {
namespace {

using testing::Recorded;
using testing::TinyDecoder;

const CpuFeatures& avx2_cpu() {
  static const CpuFeatures c = CpuFeatures::from_names({"avx2", "fma", "f16c"}).value();
  return c;
}

Result<KernelPlan> resolve(const std::string& json, const ModuleView& view, KernelRegistry* reg = nullptr) {
  LOOM_ASSIGN_OR_RETURN(KernelConfig cfg, KernelConfig::parse(json));
  KernelRegistry local;
  return resolve_kernels(cfg, view, reg ? *reg : local, ResolveOptions{&avx2_cpu()});
}

KernelPlan resolve_ok(const std::string& json, const ModuleView& view, KernelRegistry* reg = nullptr) {
  auto p = resolve(json, view, reg);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : KernelPlan{};
}

std::string resolve_error(const std::string& json, const ModuleView& view) {
  auto p = resolve(json, view);
  EXPECT_FALSE(p.ok()) << "resolved: " << json;
  return p.ok() ? "" : p.status().message();
}

ModuleKernelKind kind(const KernelPlan& p, const std::string& path) {
  const ModuleKernel* m = p.find(path);
  EXPECT_NE(m, nullptr) << path;
  return m ? m->kind : ModuleKernelKind::kOwnForward;
}

constexpr const char* kFuseLayer1 = R"({
  "RMSNorm": "loom:FusedRMSNorm",
  "fusions": [[[["RMSNorm", "model.layers.1.post_attention_layernorm"], ["MLP", "model.layers.1.mlp"]], "loom:RMSNormMLP"]]})";

TEST(KernelPlan, LayerEntryCoversEveryModuleOfThatLayer) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelPlan p = resolve_ok(R"({"RMSNorm": "loom:FusedRMSNorm"})", r.view);
  int norms = 0;
  for (const auto& m : p.modules()) {
    if (m.layer_name == "RMSNorm") {
      ++norms;
      EXPECT_EQ(m.kind, ModuleKernelKind::kKernel) << m.path;
      EXPECT_EQ(m.kernel->name, "FusedRMSNorm");
      EXPECT_FALSE(m.layout.has_value());
    } else {
      EXPECT_EQ(m.kind, ModuleKernelKind::kOwnForward) << m.path;
    }
  }
  EXPECT_EQ(norms, 5);  // 2 layers × 2 + final norm
  EXPECT_TRUE(p.uses_kernels());
  EXPECT_TRUE(p.weight_rules().empty());
  // Containers (Model, DecoderLayer) are not kernel layers: not in the plan.
  EXPECT_EQ(p.find("model.layers.0"), nullptr);
}

TEST(KernelPlan, PatternSelectingOneLayerFusesOnlyThatLayer) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelPlan p = resolve_ok(kFuseLayer1, r.view);
  EXPECT_EQ(kind(p, "model.layers.1.post_attention_layernorm"), ModuleKernelKind::kFused);
  EXPECT_EQ(kind(p, "model.layers.1.mlp"), ModuleKernelKind::kFusedAway);
  EXPECT_EQ(kind(p, "model.layers.1.mlp.gate_proj"), ModuleKernelKind::kInsideReplaced);
  // Layer 0: the fusion does not reach it; its norm gets the layer entry, its MLP stays.
  EXPECT_EQ(kind(p, "model.layers.0.post_attention_layernorm"), ModuleKernelKind::kKernel);
  EXPECT_EQ(kind(p, "model.layers.0.mlp"), ModuleKernelKind::kOwnForward);
  EXPECT_EQ(kind(p, "model.layers.0.mlp.gate_proj"), ModuleKernelKind::kOwnForward);

  const ModuleKernel* head = p.find("model.layers.1.post_attention_layernorm");
  EXPECT_EQ(head->kernel->name, "RMSNormMLP");
  ASSERT_EQ(head->fused_modules.size(), 2u);
  EXPECT_EQ(head->fused_modules[1], "model.layers.1.mlp");
  ASSERT_TRUE(head->chain.has_value());
  EXPECT_FALSE(head->chain->links[0].residual);
  // The fused layout lives in the first child's slot; the others hold nothing.
  ASSERT_TRUE(head->layout.has_value());
  EXPECT_EQ(head->layout->slot, "model.layers.1.post_attention_layernorm");
  for (const auto& prm : head->layout->parameters)
    EXPECT_EQ(prm.name.rfind("model.layers.1.post_attention_layernorm.", 0), 0u) << prm.name;
  EXPECT_FALSE(p.find("model.layers.1.mlp")->layout.has_value());
  EXPECT_EQ(p.find("model.layers.1.mlp")->fused_modules[0], "model.layers.1.post_attention_layernorm");
}

TEST(KernelPlan, StarFusesEveryLayerAndExplainSaysWhy) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelPlan p = resolve_ok(R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"],
                                                 ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})",
                            r.view);
  for (int i = 0; i < 2; ++i) {
    const std::string L = "model.layers." + std::to_string(i);
    EXPECT_EQ(kind(p, L + ".post_attention_layernorm"), ModuleKernelKind::kFused);
    EXPECT_EQ(kind(p, L + ".mlp"), ModuleKernelKind::kFusedAway);
  }
  EXPECT_EQ(kind(p, "model.layers.0.input_layernorm"), ModuleKernelKind::kOwnForward);
  const auto lines = p.explain();
  ASSERT_EQ(lines.size(), 1 + p.modules().size() + 2 /*chain*/ + 2 /*layout*/);
  EXPECT_NE(lines[0].find("2 fused"), std::string::npos) << lines[0];
  bool found = false;
  for (const auto& l : lines)
    found |= l.rfind("model.layers.1.mlp [LlamaMLP, MLP] -> identity (fused into model.layers.1.post_attention_layernorm)", 0) == 0;
  EXPECT_TRUE(found);
  for (const auto& l : lines)
    if (l.rfind("model.layers.0.input_layernorm ", 0) == 0)
      EXPECT_NE(l.find("no kernel config entry for RMSNorm"), std::string::npos) << l;
}

TEST(KernelPlan, FusionErrorsNameTheEntry) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  std::string m = resolve_error(R"({"fusions": [[[["RMSNorm", "model.layers.*.pre_feedforward_layernorm"],
                                                  ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})",
                                r.view);
  EXPECT_NE(m.find("'model.layers.*.pre_feedforward_layernorm' (RMSNorm) matches no module"), std::string::npos) << m;
  EXPECT_NE(m.find("fusion ((RMSNorm, model.layers.*.pre_feedforward_layernorm)"), std::string::npos) << m;

  // Every child must exist: a layer without an MLP (here: removed from the view).
  Recorded no_mlp;
  testing::record(TinyDecoder{}, &no_mlp);
  std::erase_if(no_mlp.view.modules, [](const ModuleInfo& mi) { return scope_within(mi.path, "model.layers.1.mlp"); });
  m = resolve_error(R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"],
                                      ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})",
                    no_mlp.view);
  EXPECT_NE(m.find("under model.layers.1 there is no module matching (MLP, model.layers.*.mlp)"), std::string::npos) << m;

  m = resolve_error(R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"],
                                      ["MLP", "model.layers.*.self_attn"]], "loom:RMSNormMLP"]]})",
                    r.view);
  EXPECT_NE(m.find("model.layers.0.self_attn matches 'model.layers.*.self_attn' but is a Attention"), std::string::npos) << m;

  // Order reversed: not a chain.
  m = resolve_error(R"({"fusions": [[[["MLP", "model.layers.*.mlp"],
                                      ["RMSNorm", "model.layers.*.post_attention_layernorm"]], "loom:RMSNormMLP"]]})",
                    r.view);
  EXPECT_NE(m.find("do not form a chain"), std::string::npos) << m;

  // Two fusions claiming one module.
  m = resolve_error(R"({"fusions": [
      [[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"],
      [[["Attention", "model.layers.*.self_attn"], ["RMSNorm", "model.layers.*.post_attention_layernorm"]], "loom:RMSNormMLP"]]})",
                    r.view);
  EXPECT_NE(m.find("conflicting rules: model.layers.0.post_attention_layernorm is claimed by"), std::string::npos) << m;

  // The chain is fine but the kernel does not provide the fused layers.
  m = resolve_error(R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"],
                                      ["MLP", "model.layers.*.mlp"]], "loom:FusedRMSNorm"]]})",
                    r.view);
  EXPECT_NE(m.find("provides [RMSNorm], not RMSNorm+MLP"), std::string::npos) << m;
}

constexpr const char* kAddNorm =
    R"([[["Attention", "model.layers.*.self_attn"], ["RMSNorm", "model.layers.*.post_attention_layernorm"]], "loom:AddRMSNorm"])";

TEST(KernelPlan, AddRMSNormFusesTheResidualAddIntoTheNormAndLeavesTheAttentionToItsEntry) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelPlan p = resolve_ok(std::string(R"({"Attention": "loom:FusedQKV", "fusions": [)") + kAddNorm + "]}", r.view);
  for (int i = 0; i < 2; ++i) {
    const std::string L = "model.layers." + std::to_string(i);
    const ModuleKernel* norm = p.find(L + ".post_attention_layernorm");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->kind, ModuleKernelKind::kFused);
    EXPECT_EQ(norm->kernel->name, "AddRMSNorm");
    EXPECT_TRUE(norm->kernel->residual_tail);
    ASSERT_TRUE(norm->chain.has_value());
    ASSERT_EQ(norm->chain->links.size(), 1u);
    EXPECT_TRUE(norm->chain->links[0].residual);
    EXPECT_EQ(norm->fused_modules, (std::vector<std::string>{L + ".self_attn", L + ".post_attention_layernorm"}));
    EXPECT_FALSE(norm->layout.has_value());  // it reads the norm's own weight
    // The attention before the add is not replaced: its layer entry still applies.
    EXPECT_EQ(kind(p, L + ".self_attn"), ModuleKernelKind::kKernel);
    EXPECT_EQ(p.find(L + ".self_attn")->kernel->name, "FusedQKV");
    EXPECT_EQ(kind(p, L + ".mlp"), ModuleKernelKind::kOwnForward);
  }
  bool explained = false;
  for (const auto& l : p.explain())
    explained |= l.find("model.layers.1.post_attention_layernorm [LlamaRMSNorm, RMSNorm] -> fused loom:AddRMSNorm 1.0.0 "
                        "with the residual add of model.layers.1.self_attn") == 0;
  EXPECT_TRUE(explained);

  // Without a layer entry the attention keeps its own forward.
  KernelPlan own = resolve_ok(std::string(R"({"fusions": [)") + kAddNorm + "]}", r.view);
  EXPECT_EQ(kind(own, "model.layers.0.self_attn"), ModuleKernelKind::kOwnForward);
  EXPECT_EQ(kind(own, "model.layers.0.post_attention_layernorm"), ModuleKernelKind::kFused);
}

TEST(KernelPlan, AddRMSNormErrors) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  // The norm cannot take the residual add and feed RMSNormMLP at once.
  std::string m = resolve_error(std::string(R"({"fusions": [)") + kAddNorm +
                                    R"(, [[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})",
                                r.view);
  EXPECT_NE(m.find("conflicting rules: model.layers.0.post_attention_layernorm is claimed by"), std::string::npos) << m;

  // A residual-tail kernel on a chain linked directly (norm → MLP) is refused by name.
  KernelSpec tail;
  tail.repo = "loom";
  tail.name = "TailNormMLP";
  tail.devices = {"cpu"};
  tail.layers = {"RMSNorm+MLP"};
  tail.residual_tail = true;
  KernelRegistry reg;
  ASSERT_TRUE(reg.add_builtin(tail).ok());
  auto p = resolve(R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]],
                       "loom:TailNormMLP"]]})",
                   r.view, &reg);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("fuses a residual add, but model.layers.0.mlp reads "
                                      "model.layers.0.post_attention_layernorm's output directly"),
            std::string::npos)
      << p.status().message();
}

TEST(KernelPlan, RejectingChainThroughResolve) {
  TinyDecoder d;
  d.norm_output_also_in_residual = true;
  Recorded r;
  testing::record(d, &r);
  std::string m = resolve_error(kFuseLayer1, r.view);
  EXPECT_NE(m.find("do not form a chain"), std::string::npos) << m;
  EXPECT_NE(m.find("fusion ((RMSNorm, model.layers.1.post_attention_layernorm), (MLP, model.layers.1.mlp))"),
            std::string::npos)
      << m;
}

TEST(KernelPlan, FusionWithoutGraphIsAnError) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  r.view.graph = nullptr;
  std::string m = resolve_error(kFuseLayer1, r.view);
  EXPECT_NE(m.find("needs the model's recorded graph"), std::string::npos) << m;
}

TEST(KernelPlan, FallbackWarnsAndNoFallbackFails) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  KernelSpec big;
  big.repo = "loom";
  big.name = "Bf16Norm";
  big.devices = {"cpu"};
  big.layers = {"RMSNorm"};
  big.cpu_features = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"};
  ASSERT_TRUE(reg.add_builtin(big).ok());
  KernelPlan p = resolve_ok(R"({"RMSNorm": "loom:Bf16Norm"})", r.view, &reg);  // on the avx2 CPU
  EXPECT_EQ(kind(p, "model.norm"), ModuleKernelKind::kFallback);
  EXPECT_FALSE(p.uses_kernels());
  ASSERT_EQ(p.warnings().size(), 1u);  // once per entry and device, not per module
  EXPECT_NE(p.warnings()[0].find("needs CPU feature avx512"), std::string::npos) << p.warnings()[0];

  auto e = resolve(R"({"RMSNorm": "loom:Bf16Norm", "use_fallback": false})", r.view, &reg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("kernel config \"RMSNorm\""), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("use_fallback is off"), std::string::npos) << e.status().message();
}

TEST(KernelPlan, PerDeviceEntryOnlyAppliesOnItsDevice) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  for (auto& m : r.view.modules)
    if (m.path == "model.norm") m.device = "cuda";
  KernelRegistry reg;
  KernelSpec cu;
  cu.repo = "loom";
  cu.name = "CudaNorm";
  cu.devices = {"cuda"};
  cu.layers = {"RMSNorm"};
  ASSERT_TRUE(reg.add_builtin(cu).ok());
  KernelPlan p = resolve_ok(R"({"RMSNorm": {"cpu": "loom:FusedRMSNorm", "cuda": "loom:CudaNorm"}})", r.view, &reg);
  EXPECT_EQ(p.find("model.norm")->kernel->name, "CudaNorm");
  EXPECT_EQ(p.find("model.layers.0.input_layernorm")->kernel->name, "FusedRMSNorm");
  p = resolve_ok(R"({"RMSNorm": {"cuda": "loom:CudaNorm"}})", r.view, &reg);
  EXPECT_EQ(kind(p, "model.layers.0.input_layernorm"), ModuleKernelKind::kOwnForward);
  EXPECT_NE(p.find("model.layers.0.input_layernorm")->reason.find("names no kernel for cpu"), std::string::npos);
}

// ---- Layouts: the rules go through weights/ exactly as a model load would. ----

SourceIndex source_of(const ModuleView& view) {
  SourceIndex s;
  for (const auto& m : view.modules)
    if (m.path == "model")
      for (const auto& p : m.parameters) s.add(p.name, DType::kF32, p.shape);
  return s;
}

ExpectedParams expected_of(const ModuleView& view) {
  ExpectedParams e;
  for (const auto& m : view.modules)
    if (m.path == "model")
      for (const auto& p : m.parameters) e[p.name] = ExpectedParam{p.shape, std::nullopt};
  return e;
}

// Every checkpoint tensor filled with distinct values, written to a file.
struct TempCheckpoint {
  std::string path;
  std::map<std::string, Tensor> tensors;
  explicit TempCheckpoint(const ModuleView& view) {
    path = (std::filesystem::temp_directory_path() / ("loom_kernels_" + std::to_string(getpid()) + ".safetensors")).string();
    NamedTensors named;
    float base = 0;
    for (const auto& t : source_of(view).tensors) {
      Tensor x = Tensor::empty(DType::kF32, t.shape);
      for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = base + static_cast<float>(i);
      base += 1000;
      tensors[t.name] = x;
      named.push_back({t.name, x});
    }
    throw_if_error(write_safetensors(path, named));
  }
  ~TempCheckpoint() { std::filesystem::remove(path); }
};

std::map<std::string, Tensor> load_with(const KernelPlan& kp, const ModuleView& view, const TempCheckpoint& ckpt_file,
                                        ConversionPlan* plan_out) {
  auto expected = kp.apply_layouts(expected_of(view));
  EXPECT_TRUE(expected.ok()) << expected.status().to_string();
  auto ckpt = Checkpoint::open(ckpt_file.path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  auto plan = ConversionPlan::compile(kp.weight_rules(), SourceIndex::from_checkpoint(*ckpt), *expected);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  std::map<std::string, Tensor> loaded;
  if (!plan.ok()) return loaded;
  auto st = plan->load(*ckpt, [&](const std::string& n, Tensor t) {
    Tensor copy = Tensor::empty(t.dtype(), t.shape());
    std::memcpy(copy.data(), t.data(), t.nbytes());
    loaded[n] = copy;
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  *plan_out = std::move(plan).value();
  return loaded;
}

bool rows_equal(const Tensor& big, int64_t row0, const Tensor& part) {
  const int64_t cols = part.shape().size() == 2 ? part.shape()[1] : 1;
  return std::memcmp(big.data_as<float>() + row0 * cols, part.data(), part.nbytes()) == 0;
}

TEST(KernelLayouts, RMSNormMLPConvertsOnlyTheFusedLayerAndReverses) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelPlan kp = resolve_ok(kFuseLayer1, r.view);
  TempCheckpoint file(r.view);
  ConversionPlan plan;
  auto loaded = load_with(kp, r.view, file, &plan);
  const std::string N = "model.layers.1.post_attention_layernorm";
  ASSERT_TRUE(loaded.count(N + ".gate_up_proj.weight"));
  const Tensor& gu = loaded[N + ".gate_up_proj.weight"];
  EXPECT_EQ(gu.shape(), (Shape{24, 8}));
  EXPECT_TRUE(rows_equal(gu, 0, file.tensors["model.layers.1.mlp.gate_proj.weight"]));
  EXPECT_TRUE(rows_equal(gu, 12, file.tensors["model.layers.1.mlp.up_proj.weight"]));
  ASSERT_TRUE(loaded.count(N + ".down_proj.weight"));
  EXPECT_TRUE(rows_equal(loaded[N + ".down_proj.weight"], 0, file.tensors["model.layers.1.mlp.down_proj.weight"]));
  EXPECT_TRUE(loaded.count(N + ".weight"));
  EXPECT_FALSE(loaded.count("model.layers.1.mlp.gate_proj.weight"));
  // Layer 0 is untouched: its MLP loads under its own names.
  EXPECT_TRUE(loaded.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_FALSE(loaded.count("model.layers.0.post_attention_layernorm.gate_up_proj.weight"));

  // Saving reverses the layout: the original names and bytes come back.
  auto back = plan.reverse(params_from(loaded));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), file.tensors.size());
  for (const auto& [name, t] : *back) {
    ASSERT_TRUE(file.tensors.count(name)) << name;
    EXPECT_EQ(std::memcmp(t.data(), file.tensors[name].data(), t.nbytes()), 0) << name;
  }
}

TEST(KernelLayouts, FusedQKVConcatenatesUnevenGqaProjections) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelPlan kp = resolve_ok(R"({"Attention": "loom:FusedQKV"})", r.view);
  const ModuleKernel* a = kp.find("model.layers.0.self_attn");
  ASSERT_EQ(a->kind, ModuleKernelKind::kKernel);
  ASSERT_TRUE(a->layout.has_value());
  EXPECT_EQ(a->layout->replaced.size(), 3u);
  // The projections inside a replaced Attention are not called.
  EXPECT_EQ(kind(kp, "model.layers.0.self_attn.q_proj"), ModuleKernelKind::kInsideReplaced);

  TempCheckpoint file(r.view);
  ConversionPlan plan;
  auto loaded = load_with(kp, r.view, file, &plan);
  for (int i = 0; i < 2; ++i) {
    const std::string A = "model.layers." + std::to_string(i) + ".self_attn";
    ASSERT_TRUE(loaded.count(A + ".qkv_proj.weight")) << A;
    const Tensor& qkv = loaded[A + ".qkv_proj.weight"];
    EXPECT_EQ(qkv.shape(), (Shape{16, 8}));  // 8 + 4 + 4
    EXPECT_TRUE(rows_equal(qkv, 0, file.tensors[A + ".q_proj.weight"]));
    EXPECT_TRUE(rows_equal(qkv, 8, file.tensors[A + ".k_proj.weight"]));
    EXPECT_TRUE(rows_equal(qkv, 12, file.tensors[A + ".v_proj.weight"]));
    EXPECT_TRUE(loaded.count(A + ".o_proj.weight"));
  }
}

TEST(KernelLayouts, RulesBelongToThePlanNotTheProcess) {
  Recorded r;
  testing::record(TinyDecoder{}, &r);
  KernelRegistry reg;
  KernelPlan fused = resolve_ok(kFuseLayer1, r.view, &reg);
  KernelPlan plain = resolve_ok("{}", r.view, &reg);
  EXPECT_FALSE(fused.weight_rules().empty());
  EXPECT_TRUE(plain.weight_rules().empty());
  auto e = plain.apply_layouts(expected_of(r.view));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), expected_of(r.view).size());
  // A plan against a model lacking a replaced parameter says which one.
  ExpectedParams partial = expected_of(r.view);
  partial.erase("model.layers.1.mlp.up_proj.weight");
  auto bad = fused.apply_layouts(partial);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos);
}

}  // namespace
}  // namespace loom::kernels
