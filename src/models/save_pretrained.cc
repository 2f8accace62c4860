#include "loom/models/save_pretrained.h"

#include <filesystem>

namespace loom::models {

namespace fs = std::filesystem;

const std::vector<std::string>& checkpoint_side_files() {
  static const std::vector<std::string> files = {
      "config.json",          "generation_config.json", "tokenizer.json",        "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json",   "tokenizer.model",       "vocab.json",
      "merges.txt",           "chat_template.jinja",    "chat_template.json",
  };
  return files;
}

Status save_pretrained(const Model& model, const std::string& out_dir, const SaveOptions& options) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && fs::equivalent(out_dir, model.dir(), ec))
    return invalid_argument("save_pretrained: output directory " + out_dir + " is the model's own directory " +
                            model.dir());
  fs::create_directories(out_dir, ec);
  if (ec) return io_error("save_pretrained: cannot create directory " + out_dir + ": " + ec.message());

  const ConversionPlan& plan = model.weight_plan();
  Status s = plan.save(params_from(model.parameters()), out_dir, &model.checkpoint());
  if (!s.ok()) return s.with_context("save_pretrained to " + out_dir);
  if (options.on_file) {
    for (const auto& f : plan.source().files) options.on_file(f);
    if (plan.source().sharded) options.on_file(plan.source().index_file);
  }

  for (const auto& name : checkpoint_side_files()) {
    const fs::path from = fs::path(model.dir()) / name;
    if (!fs::is_regular_file(from)) continue;
    fs::copy_file(from, fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return io_error("save_pretrained: cannot copy " + from.string() + " to " + out_dir + ": " + ec.message());
    if (options.on_file) options.on_file(name);
  }
  return Status::Ok();
}

}  // namespace loom::models
