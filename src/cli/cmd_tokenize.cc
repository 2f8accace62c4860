// `loom tokenize` / `loom detokenize`: text ⇄ ids with a checkpoint's tokenizer.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "loom/core/status.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::cli {
namespace {

std::string read_stdin() {
  std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return s;
}

// "1, 2 3" or "[1, 2, 3]".
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(invalid_argument(std::string("detokenize: stdin is not a JSON list of ids: ") + e.what()));
    }
    if (!j.is_array()) throw Error(invalid_argument("detokenize: expected a JSON list of ids"));
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_number_integer() || j[i].get<int64_t>() < INT32_MIN || j[i].get<int64_t>() > INT32_MAX)
        throw Error(invalid_argument("detokenize: element " + std::to_string(i) + " is not an integer id: " + j[i].dump()));
      ids.push_back(static_cast<int32_t>(j[i].get<int64_t>()));
    }
    return ids;
  }
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    if (text[j] == '-') ++j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    std::string word = text.substr(i, j - i);
    if (j == i || word == "-" || (j < text.size() && text[j] != ',' && !std::isspace(static_cast<unsigned char>(text[j])))) {
      size_t end = text.find_first_of(" ,\t\r\n", i);
      throw Error(invalid_argument("detokenize: \"" + text.substr(i, end == std::string::npos ? std::string::npos : end - i) +
                                   "\" is not an id (expected integers separated by spaces or commas, or a JSON list)"));
    }
    long long v = std::stoll(word);
    if (v < INT32_MIN || v > INT32_MAX) throw Error(invalid_argument("detokenize: id " + word + " is out of range"));
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

std::shared_ptr<Tokenizer> load(const std::string& path) {
  auto t = Tokenizer::from_path(path);
  if (!t.ok()) throw Error(t.status());
  return t.value();
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  struct Options {
    std::string tokenizer;
    bool no_special = false, json = false, skip_special = false;
  };
  auto opts = std::make_shared<Options>();

  auto* tok = app.add_subcommand("tokenize", "Encode UTF-8 text from stdin into token ids");
  tok->add_option("--tokenizer", opts->tokenizer, "tokenizer.json, or a checkpoint folder")->required();
  tok->add_flag("--no-special-tokens", opts->no_special, "Do not add BOS/EOS or other template tokens");
  tok->add_flag("--json", opts->json, "Print {ids, tokens, offsets} as JSON");
  tok->callback([opts] {
    auto t = load(opts->tokenizer);
    auto enc = t->encode(read_stdin(), !opts->no_special);
    if (!enc.ok()) throw Error(enc.status());
    if (opts->json) {
      nlohmann::json j;
      j["ids"] = enc->ids;
      j["tokens"] = enc->tokens;
      nlohmann::json offs = nlohmann::json::array();
      for (const auto& [s, e] : enc->offsets) offs.push_back({s, e});
      j["offsets"] = offs;
      std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      std::printf("%s\n", out.c_str());
    } else {
      std::string out;
      for (size_t i = 0; i < enc->ids.size(); ++i) {
        if (i) out.push_back(' ');
        out += std::to_string(enc->ids[i]);
      }
      std::printf("%s\n", out.c_str());
    }
  });

  auto* detok = app.add_subcommand("detokenize", "Decode token ids from stdin (spaces, commas or a JSON list)");
  detok->add_option("--tokenizer", opts->tokenizer, "tokenizer.json, or a checkpoint folder")->required();
  detok->add_flag("--skip-special-tokens", opts->skip_special, "Leave special tokens out of the text");
  detok->callback([opts] {
    auto t = load(opts->tokenizer);
    auto text = t->decode(parse_ids(read_stdin()), opts->skip_special);
    if (!text.ok()) throw Error(text.status());
    std::fwrite(text->data(), 1, text->size(), stdout);
  });
}

}  // namespace loom::cli
