// Compares loom's Jinja engine and ChatTemplate with Python jinja2 configured as
// Transformers configures it: tests/reference/chat_templates/render_reference.py
// renders every (template, conversation, add_generation_prompt) triple and every
// engine feature case; loom must produce the same bytes, or fail where jinja2
// raised.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "loom/tokenizer/chat_template.h"
#include "loom/tokenizer/jinja/template.h"

namespace loom {
namespace {

using nlohmann::ordered_json;

const std::string kSourceDir = LOOM_SOURCE_DIR;
const std::string kRefDir = kSourceDir + "/tests/reference/chat_templates";
const std::string kExpectedPath = std::string(LOOM_BINARY_DIR) + "/tests/reference/chat_templates/expected.json";
const std::string kScript = kRefDir + "/render_reference.py";

ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return ordered_json::parse(in);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ChatTemplateReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Regenerate every run so the expectations always follow the inputs.
    std::filesystem::remove(kExpectedPath);
    std::filesystem::create_directories(std::filesystem::path(kExpectedPath).parent_path());
    const std::string cmd = "/usr/bin/python3 '" + kScript + "' --out '" + kExpectedPath + "' > '" + kExpectedPath +
                            ".log' 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc != 0 || !std::filesystem::exists(kExpectedPath)) {
      setup_error_ = new std::string(
          "expected outputs are missing: `" + cmd + "` failed (exit " + std::to_string(rc) +
          "). Run /usr/bin/python3 tests/reference/chat_templates/render_reference.py --out " + kExpectedPath +
          " (needs python3-jinja2: scripts/install-deps --test). Log:\n" + read_file(kExpectedPath + ".log"));
      return;
    }
    expected_ = new ordered_json(read_json(kExpectedPath));
  }
  static void TearDownTestSuite() {
    delete expected_;
    delete setup_error_;
    expected_ = nullptr;
    setup_error_ = nullptr;
  }
  void SetUp() override {
    if (setup_error_) FAIL() << *setup_error_;
  }

  static ordered_json* expected_;
  static std::string* setup_error_;
};

ordered_json* ChatTemplateReference::expected_ = nullptr;
std::string* ChatTemplateReference::setup_error_ = nullptr;

constexpr int64_t kFixedNow = 1762345678;  // render_reference.py FIXED_NOW

TEST_F(ChatTemplateReference, ReferenceUsesTheSameClock) {
  EXPECT_EQ((*expected_)["fixed_now"].get<int64_t>(), kFixedNow);
}

TEST_F(ChatTemplateReference, RealChatTemplatesMatchJinja2ByteForByte) {
  const ordered_json templates = read_json(kRefDir + "/templates.json");
  const ordered_json conversations = read_json(kRefDir + "/conversations.json");
  std::map<std::string, tok::ChatTemplate> compiled;
  for (const auto& t : templates) {
    auto ct = tok::ChatTemplate::create(read_file(kRefDir + "/templates/" + t["file"].get<std::string>()),
                                        t["bos_token"].get<std::string>(), t["eos_token"].get<std::string>());
    ASSERT_TRUE(ct.ok()) << t["name"] << ": " << ct.status().to_string();
    ct->set_clock([] { return kFixedNow; });
    compiled.emplace(t["name"].get<std::string>(), std::move(ct).value());
  }
  std::map<std::string, ordered_json> conversation_by_name;
  for (const auto& c : conversations) conversation_by_name[c["name"].get<std::string>()] = c;

  std::map<std::string, int> rendered_ok;
  size_t compared = 0;
  for (const auto& e : (*expected_)["chat"]) {
    const std::string name = e["template"];
    const std::string conv = e["conversation"];
    const bool agp = e["add_generation_prompt"];
    SCOPED_TRACE(name + " / " + conv + " / add_generation_prompt=" + (agp ? "true" : "false"));
    const ordered_json& c = conversation_by_name.at(conv);
    const ordered_json extra = c.contains("extra") ? c["extra"] : ordered_json::object();
    auto got = compiled.at(name).apply(c["messages"], agp, extra);
    if (e["error"].is_null()) {
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(*got, e["output"].get<std::string>());
      ++rendered_ok[name];
    } else {
      EXPECT_FALSE(got.ok()) << "jinja2 raised " << e["error"] << " but loom rendered:\n" << *got;
    }
    ++compared;
  }
  EXPECT_EQ(compared, templates.size() * conversations.size() * 2);
  // Each real template must render most conversations, so the comparison is not
  // just "both failed".
  for (const auto& t : templates) {
    EXPECT_GE(rendered_ok[t["name"].get<std::string>()], 10) << t["name"];
  }
}

TEST_F(ChatTemplateReference, EngineFeatureCasesMatchJinja2) {
  const ordered_json cases = read_json(kRefDir + "/engine_cases.json");
  ASSERT_EQ(cases.size(), (*expected_)["engine"].size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto& e = (*expected_)["engine"][i];
    ASSERT_EQ(c["name"], e["name"]);
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    auto t = jinja::Template::parse(c["template"].get<std::string>());
    if (!t.ok()) {
      EXPECT_FALSE(e["error"].is_null()) << "loom failed to parse: " << t.status().to_string();
      continue;
    }
    auto got = t->render(jinja::Value::from_json(c["context"]));
    if (e["error"].is_null()) {
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(*got, e["output"].get<std::string>());
    } else {
      EXPECT_FALSE(got.ok()) << "jinja2 raised " << e["error"] << " but loom rendered: " << *got;
    }
  }
}

}  // namespace
}  // namespace loom
