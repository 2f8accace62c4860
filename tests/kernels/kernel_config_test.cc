#include "loom/kernels/kernel_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace loom::kernels {
namespace {

KernelConfig parse_ok(const std::string& text) {
  auto c = KernelConfig::parse(text);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : KernelConfig{};
}

std::string parse_error(const std::string& text) {
  auto c = KernelConfig::parse(text);
  EXPECT_FALSE(c.ok()) << "accepted: " << text;
  return c.ok() ? "" : c.status().message();
}

TEST(KernelConfig, PlainStringMeansVersionOneUntrusted) {
  KernelConfig c = parse_ok(R"({"RMSNorm": "acme/norms:CustomRMSNorm"})");
  ASSERT_EQ(c.layers().count("RMSNorm"), 1u);
  const KernelRef* r = c.layers().at("RMSNorm").for_device("cpu");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->repo, "acme/norms");
  EXPECT_EQ(r->name, "CustomRMSNorm");
  EXPECT_FALSE(r->version.has_value());
  EXPECT_EQ(r->major_version(), 1);
  EXPECT_FALSE(r->trust_remote_code);
  EXPECT_TRUE(c.use_fallback());
}

TEST(KernelConfig, TupleFormCarriesMetadata) {
  KernelConfig c = parse_ok(R"({
    "RMSNorm": ["acme/norms:CustomRMSNorm", {"version": 2, "trust_remote_code": true}],
    "Attention": ["loom:FusedQKV", {"revision": "v1.0.0"}],
    "use_fallback": false})");
  const KernelRef* n = c.layers().at("RMSNorm").for_device("cpu");
  EXPECT_EQ(n->major_version(), 2);
  EXPECT_TRUE(n->trust_remote_code);
  const KernelRef* a = c.layers().at("Attention").for_device("cpu");
  ASSERT_TRUE(a->revision.has_value());
  EXPECT_EQ(*a->revision, "v1.0.0");
  EXPECT_FALSE(a->version.has_value());
  EXPECT_FALSE(c.use_fallback());
}

TEST(KernelConfig, PerDeviceMap) {
  KernelConfig c = parse_ok(R"({"RMSNorm": {"cpu": "loom:FusedRMSNorm", "cuda": ["acme/cu:Norm", {"version": 3}]}})");
  const KernelChoice& ch = c.layers().at("RMSNorm");
  EXPECT_EQ(ch.for_device("cpu")->id(), "loom:FusedRMSNorm");
  EXPECT_EQ(ch.for_device("cuda")->major_version(), 3);
  EXPECT_EQ(ch.for_device("mps"), nullptr);  // no "" entry: nothing asked on mps
}

TEST(KernelConfig, FusionListEncoding) {
  KernelConfig c = parse_ok(R"({"fusions": [
      [[["RMSNorm", "model.layers.*.post_attention_layernorm"], ["MLP", "model.layers.*.mlp"]],
       ["loom:RMSNormMLP", {"version": 1}]]]})");
  ASSERT_EQ(c.fusions().size(), 1u);
  const FusionEntry& f = c.fusions()[0];
  ASSERT_EQ(f.children.size(), 2u);
  EXPECT_EQ(f.children[0].layer, "RMSNorm");
  EXPECT_EQ(f.children[1].pattern, "model.layers.*.mlp");
  EXPECT_EQ(f.layer_key(), "RMSNorm+MLP");
  EXPECT_EQ(f.choice.for_device("cpu")->name, "RMSNormMLP");
}

TEST(KernelConfig, CppBuilderMatchesJson) {
  KernelConfig c;
  ASSERT_TRUE(c.add_layer("RMSNorm", KernelChoice::any(KernelRef::parse("loom:FusedRMSNorm").value())).ok());
  ASSERT_TRUE(c.add_fusion({{"RMSNorm", "model.layers.*.post_attention_layernorm"}, {"MLP", "model.layers.*.mlp"}},
                           KernelChoice::any(KernelRef::parse("loom:RMSNormMLP").value()))
                  .ok());
  EXPECT_EQ(c.layers().size(), 1u);
  EXPECT_EQ(c.fusions().size(), 1u);
  Status dup = c.add_layer("RMSNorm", KernelChoice::any(KernelRef::parse("loom:FusedRMSNorm").value()));
  EXPECT_NE(dup.message().find("\"RMSNorm\""), std::string::npos) << dup.message();
  EXPECT_NE(dup.message().find("conflicting"), std::string::npos) << dup.message();
}

TEST(KernelConfig, UnknownLayerNameIsNamed) {
  std::string m = parse_error(R"({"RMSNrom": "loom:FusedRMSNorm"})");
  EXPECT_NE(m.find("\"RMSNrom\""), std::string::npos) << m;
  EXPECT_NE(m.find("unknown kernel layer name"), std::string::npos) << m;
  m = parse_error(R"({"fusions": [[[["RMSNorm", "a.*.b"], ["MPL", "a.*.c"]], "loom:RMSNormMLP"]]})");
  EXPECT_NE(m.find("\"MPL\""), std::string::npos) << m;
}

TEST(KernelConfig, MalformedRepoStrings) {
  for (const char* bad : {"FusedRMSNorm", "loom:", ":Name", "a/b/c:Name", "../evil:Name", "acme/..:Name", "loom:Fused-Norm",
                          "loom:A:B", "acme/no rm:X"}) {
    std::string m = parse_error(std::string(R"({"RMSNorm": ")") + bad + "\"}");
    EXPECT_NE(m.find("\"RMSNorm\""), std::string::npos) << bad << ": " << m;
    EXPECT_NE(m.find("malformed kernel repo string"), std::string::npos) << bad << ": " << m;
  }
}

TEST(KernelConfig, MetadataErrors) {
  std::string m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"version": 1, "revision": "main"}]})");
  EXPECT_NE(m.find("not both"), std::string::npos) << m;
  EXPECT_NE(m.find("\"RMSNorm\""), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"trust_remote_code": true}]})");
  EXPECT_NE(m.find("needs \"version\" or \"revision\""), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"version": "2"}]})");
  EXPECT_NE(m.find("\"version\" must be an integer"), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"version": true}]})");
  EXPECT_NE(m.find("\"version\" must be an integer"), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"revision": 3}]})");
  EXPECT_NE(m.find("\"revision\" must be a string"), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"version": 0}]})");
  EXPECT_NE(m.find("version must be"), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"trust_remote_code": "yes"}]})");
  EXPECT_NE(m.find("trust_remote_code"), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": ["loom:FusedRMSNorm", {"versoin": 1}]})");
  EXPECT_NE(m.find("unknown metadata key \"versoin\""), std::string::npos) << m;
  m = parse_error(R"({"RMSNorm": {"tpu": "loom:FusedRMSNorm"}})");
  EXPECT_NE(m.find("unknown device \"tpu\""), std::string::npos) << m;
  m = parse_error(R"({"use_fallback": "no"})");
  EXPECT_NE(m.find("\"use_fallback\""), std::string::npos) << m;
}

TEST(KernelConfig, FusionKeyErrors) {
  std::string m = parse_error(R"({"fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"]], "loom:RMSNormMLP"]]})");
  EXPECT_NE(m.find("at least two"), std::string::npos) << m;
  m = parse_error(R"({"fusions": [[[["RMSNorm", "model.layers.*.norm"], ["MLP", "model.*.mlp"]], "loom:RMSNormMLP"]]})");
  EXPECT_NE(m.find("share one parent"), std::string::npos) << m;
  m = parse_error(R"({"fusions": [[[["RMSNorm", "^model.layers.*.norm"], ["MLP", "^model.layers.*.mlp"]], "loom:X"]]})");
  EXPECT_NE(m.find("no anchors"), std::string::npos) << m;
  m = parse_error(R"({"fusions": [[[["RMSNorm", "a..norm"], ["MLP", "a..mlp"]], "loom:X"]]})");
  EXPECT_NE(m.find("empty segment"), std::string::npos) << m;
  m = parse_error(R"({"fusions": [[[["RMSNorm", "a.n"], ["MLP", "a.m"]], "loom:X"],
                                  [[["RMSNorm", "a.n"], ["MLP", "a.m"]], "loom:Y"]]})");
  EXPECT_NE(m.find("conflicting rules"), std::string::npos) << m;
  EXPECT_NE(m.find("\"fusions\"[1]"), std::string::npos) << m;
  m = parse_error(R"({"fusions": {"RMSNorm": "loom:X"}})");
  EXPECT_NE(m.find("\"fusions\""), std::string::npos) << m;
  m = parse_error(R"({"fusions": [[[["RMSNorm", "a.n"], ["MLP", "a.m"]], "loomX"]]})");
  EXPECT_NE(m.find("\"fusions\"[0]"), std::string::npos) << m;
  EXPECT_NE(m.find("malformed"), std::string::npos) << m;
}

TEST(KernelConfig, NotJsonIsAParseError) {
  auto c = KernelConfig::parse("{\"RMSNorm\": ");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kParseError);
}

TEST(KernelConfig, FromFileNamesTheFileInErrors) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("loom_kernel_config_" + std::to_string(getpid()) + ".json")).string();
  {
    std::ofstream(path) << R"({"RMSNorm": "loom:FusedRMSNorm", "use_fallback": false})";
  }
  auto ok = KernelConfig::from_file(path);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_FALSE(ok->use_fallback());
  EXPECT_EQ(ok->layers().at("RMSNorm").for_device("cpu")->id(), "loom:FusedRMSNorm");
  {
    std::ofstream(path) << R"({"Attention": "loom"})";
  }
  auto bad = KernelConfig::from_file(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("\"Attention\""), std::string::npos) << bad.status().message();
  std::filesystem::remove(path);
  auto missing = KernelConfig::from_file(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kIoError);
}

TEST(ModulePattern, StarIsExactlyOneSegment) {
  EXPECT_TRUE(module_pattern_matches("model.layers.*.mlp", "model.layers.3.mlp"));
  EXPECT_TRUE(module_pattern_matches("model.layers.*.mlp", "model.layers.12.mlp"));
  EXPECT_FALSE(module_pattern_matches("model.*.mlp", "model.layers.3.mlp"));
  EXPECT_FALSE(module_pattern_matches("model.layers.*.mlp", "model.layers.3.mlp.gate_proj"));
  EXPECT_FALSE(module_pattern_matches("model.layers.*.mlp", "xmodel.layers.3.mlp"));
  EXPECT_TRUE(module_pattern_matches("model.layers.1.mlp", "model.layers.1.mlp"));
  EXPECT_FALSE(module_pattern_matches("model.layers.1.mlp", "model.layers.11.mlp"));
}

// Module paths use weights' one pattern syntax: a star inside a segment is one or
// more characters of it; anchors mean nothing for a whole path and are refused.
TEST(ModulePattern, SameSyntaxAsWeightRules) {
  EXPECT_TRUE(module_pattern_matches("model.layers.1*.mlp", "model.layers.12.mlp"));
  EXPECT_FALSE(module_pattern_matches("model.layers.1*.mlp", "model.layers.1.mlp"));
  EXPECT_TRUE(module_pattern_matches("model.layers.*.*_proj", "model.layers.0.q_proj"));
  EXPECT_TRUE(validate_module_pattern("model.layers.*.mlp").ok());
  EXPECT_FALSE(validate_module_pattern("model..mlp").ok());
  EXPECT_FALSE(validate_module_pattern("model.layers.**.mlp").ok());
  EXPECT_FALSE(validate_module_pattern("^model.layers.*.mlp").ok());
}

}  // namespace
}  // namespace loom::kernels
