// `loom convert --model DIR --out DIR2`: load a checkpoint through its
// architecture's conversion plan and write it back with save_pretrained. The
// output has the original tensor names, shapes and bytes; the command proves a
// checkpoint loads, and is the base for layout changes (kernel layouts, dtypes).
// `--to gguf --out FILE.gguf [--quantize TYPE]` writes the model, its tokenizer
// and chat template as one GGUF file llama.cpp runs.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "loom/models/model.h"
#include "loom/models/save_gguf.h"
#include "loom/models/save_pretrained.h"
#include "loom/tokenizer/gguf_tokenizer.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/weights/quantization_recipe.h"

namespace loom::cli {

namespace {

struct ConvertArgs {
  std::string model_dir;
  std::string out_dir;
  std::string to = "safetensors";
  std::string quantize;
  bool force = false;
};

void run_convert_gguf(const ConvertArgs& a, const std::string& src) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(a.out_dir, ec)) throw Error(invalid_argument("--out " + a.out_dir + " is a directory; --to gguf writes one file"));
  if (fs::exists(a.out_dir, ec) && !a.force)
    throw Error(failed_precondition("--out " + a.out_dir + " exists; pass --force to overwrite it"));
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "convert: loading %s\n", src.c_str());
  auto model = models::Model::load(src).value();
  models::GgufSaveOptions so;
  if (Tokenizer::exists_at(src)) {
    if (Checkpoint::is_gguf_file(src)) throw Error(unsupported("--model is already a GGUF file; convert its source checkpoint instead"));
    so.metadata = gguf_tokenizer_metadata(src).value();
  } else {
    std::fprintf(stderr, "convert: %s has no tokenizer.json; the GGUF file will have no tokenizer\n", src.c_str());
    // llama.cpp's own spelling of "no tokenizer" (it refuses a file without the key).
    so.metadata.emplace_back("tokenizer.ggml.model", io::GgufValue::string("none"));
  }
  so.metadata.emplace(so.metadata.begin(), "general.name", io::GgufValue::string(fs::path(src).filename().string()));
  if (!a.quantize.empty()) {
    const QuantizationRecipe recipe = quantization_recipe(a.quantize).value();
    const ModelConfig& c = model->config();
    so.file_type = recipe.gguf_file_type;
    so.tensor_type = [recipe, &c](const std::string& name, const Tensor& t) -> Result<std::optional<DType>> {
      return recipe.type_for(name, t.shape(), c.num_hidden_layers, c.tie_word_embeddings);
    };
  }
  size_t last_percent = 0;
  so.on_tensor = [&last_percent](const std::string& name, size_t i, size_t n) {
    const size_t percent = 100 * i / n;
    if (percent / 10 != last_percent / 10 || i == n) std::fprintf(stderr, "convert: %3zu%% %s\n", percent, name.c_str());
    last_percent = percent;
  };
  Status s = models::save_gguf(*model, a.out_dir, so);
  if (!s.ok()) throw Error(s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "convert: wrote %s (%.1f MB) in %.2f s\n", a.out_dir.c_str(),
               static_cast<double>(fs::file_size(a.out_dir, ec)) / 1e6, secs);
}

void run_convert(const ConvertArgs& a) {
  namespace fs = std::filesystem;
  ModelOptions o;
  o.model_dir = a.model_dir;
  const std::string src = resolve_model_dir(o).value();
  if (a.to == "gguf") return run_convert_gguf(a, src);
  if (!a.quantize.empty())
    throw Error(invalid_argument("--quantize needs --to gguf: safetensors has no quantized block types"));
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
  cmd->add_option("--out,-o", a->out_dir, "Output folder (created if missing), or the .gguf file with --to gguf")->required();
  cmd->add_option("--to", a->to, "Output format: safetensors (a checkpoint folder, default) or gguf (one file)")
      ->check(CLI::IsMember({"safetensors", "gguf"}));
  cmd->add_option("--quantize", a->quantize, "With --to gguf: quantize with llama.cpp's recipe (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m, q5_k_m, q6_k, iq4_nl, mxfp4)")
      ->check(CLI::IsMember(quantization_recipe_names()));
  cmd->add_flag("--force", a->force, "Write into a non-empty output folder, overwriting files of the same name");
  cmd->callback([a] { run_convert(*a); });
}

}  // namespace loom::cli
