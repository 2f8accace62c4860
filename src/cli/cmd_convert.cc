// `loom convert --model DIR --out DIR2`: load a checkpoint through its
// architecture's conversion plan and write it back with save_pretrained. The
// output has the original tensor names, shapes and bytes; the command proves a
// checkpoint loads, and is the base for layout changes (kernel layouts, dtypes).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "loom/models/model.h"
#include "loom/models/save_pretrained.h"

namespace loom::cli {

namespace {

struct ConvertArgs {
  std::string model_dir;
  std::string out_dir;
  bool force = false;
};

void run_convert(const ConvertArgs& a) {
  namespace fs = std::filesystem;
  ModelOptions o;
  o.model_dir = a.model_dir;
  const std::string src = resolve_model_dir(o).value();
  std::error_code ec;
  if (fs::exists(a.out_dir, ec)) {
    if (!fs::is_directory(a.out_dir, ec)) throw Error(invalid_argument("--out " + a.out_dir + " exists and is not a directory"));
    if (fs::equivalent(a.out_dir, src, ec))
      throw Error(invalid_argument("--out " + a.out_dir + " is the model directory itself; choose another directory"));
    if (!fs::is_empty(a.out_dir, ec) && !a.force)
      throw Error(failed_precondition("--out " + a.out_dir + " is not empty; pass --force to overwrite files in it"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "convert: loading %s\n", src.c_str());
  auto model = models::Model::load(src).value();
  const auto& groups = model->weight_plan().groups();
  size_t converted = 0;
  for (const auto& g : groups) converted += g.identity() ? 0 : 1;
  std::fprintf(stderr, "convert: %s, %zu parameters, %zu tensor groups (%zu converted)\n",
               model->module().class_name().c_str(), model->parameters().size(), groups.size(), converted);
  models::SaveOptions so;
  so.on_file = [&a](const std::string& f) { std::fprintf(stderr, "convert: wrote %s/%s\n", a.out_dir.c_str(), f.c_str()); };
  Status s = models::save_pretrained(*model, a.out_dir, so);
  if (!s.ok()) throw Error(s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "convert: done in %.2f s\n", secs);
}

}  // namespace

void add_convert_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "Load a checkpoint through its conversion plan and write it back (same names, shapes and bytes)");
  auto a = std::make_shared<ConvertArgs>();
  cmd->add_option("--model,-m", a->model_dir, "Checkpoint folder (default: the bundled model)");
  cmd->add_option("--out,-o", a->out_dir, "Output folder (created if missing)")->required();
  cmd->add_flag("--force", a->force, "Write into a non-empty output folder, overwriting files of the same name");
  cmd->callback([a] { run_convert(*a); });
}

}  // namespace loom::cli
