// The bundled model (models/loom-kjv-tiny) against things loom did not write:
// the PyTorch reference's logits and greedy tokens, and the validation loss its
// model card reports (recomputed here with `loom perplexity`).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "loom/batching/generate.h"
#include "loom/models/model.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(LOOM_SOURCE_DIR) / "models" / "loom-kjv-tiny";

std::string run(const std::string& cmd, int* exit_code) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while (p && (n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *exit_code = p ? pclose(p) : -1;
  return out;
}

TEST(DefaultModel, LogitsAndGreedyTokensMatchPyTorch) {
  auto tok = Tokenizer::from_dir(kModel.string()).value();
  const std::vector<int32_t> prompt = tok->encode("And God said, Let there be light: and there was").value().ids;
  ASSERT_GT(prompt.size(), 5u);
  std::string ids;
  for (size_t i = 0; i < prompt.size(); ++i) ids += (i ? "," : "") + std::to_string(prompt[i]);
  const fs::path out = fs::path(LOOM_BINARY_DIR) / "default_model_reference.json";
  int rc = 0;
  const std::string log = run("/usr/bin/python3 " + std::string(LOOM_SOURCE_DIR) + "/tests/reference/reference_model.py --model " +
                                  kModel.string() + " --prompt-ids " + ids + " --greedy 32 --out " + out.string(),
                              &rc);
  ASSERT_EQ(rc, 0) << log;
  std::ifstream in(out);
  const nlohmann::json ref = nlohmann::json::parse(in);

  auto model = models::Model::load(kModel.string()).value();
  auto runner = batching::ModelRunner::create(model, "cpu").value();
  runtime::ContiguousKvCache cache(runner->kv_layout(), 1, static_cast<int64_t>(prompt.size()));
  Tensor logits = runner->step({{prompt.data(), static_cast<int64_t>(prompt.size()), 0}}, cache,
                               batching::LogitsRows::kAllTokens).value();
  const auto expected = ref["logits"].get<std::vector<double>>();
  ASSERT_EQ(static_cast<size_t>(logits.numel()), expected.size());
  double max_abs = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    max_abs = std::max(max_abs, std::fabs(logits.data_as<float>()[i] - expected[i]));
  EXPECT_LE(max_abs, 1e-4);

  batching::GenerateOptions o;
  o.max_new_tokens = 32;
  EXPECT_EQ(batching::generate(*runner, prompt, o).value().generated_ids, ref["greedy_ids"].get<std::vector<int32_t>>());
}

TEST(DefaultModel, PerplexityMatchesModelCard) {
  std::ifstream card_in(kModel / "README.md");
  std::stringstream card;
  card << card_in.rdbuf();
  std::smatch m;
  const std::string text = card.str();
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\*\*validation\*\*[^|]*\|\s*\*\*([0-9.]+)\*\*)")))
      << "the model card should report the validation loss";
  const double card_loss = std::stod(m[1]);

  // The held-out text is rebuilt from Debian's bible-kjv exactly as training split it.
  const fs::path work = fs::path(LOOM_BINARY_DIR) / "kjv-corpus";
  int rc = 0;
  if (!fs::exists(work / "valid.txt")) {
    const std::string log = run("/usr/bin/python3 " + std::string(LOOM_SOURCE_DIR) +
                                    "/models/train/prepare_corpus.py --out " + work.string(), &rc);
    ASSERT_EQ(rc, 0) << log;
  }
  const std::string out = run(std::string(LOOM_BINARY_DIR) + "/loom perplexity --quiet --json --file " +
                                  (work / "valid.txt").string(), &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  const double loss = j["loss"].get<double>();
  EXPECT_NEAR(loss, card_loss, card_loss * 0.01) << "loom perplexity vs the model card";
  EXPECT_EQ(j["tokens"].get<int64_t>(), 51128);
}

}  // namespace
}  // namespace loom
