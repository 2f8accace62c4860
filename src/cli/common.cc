#include "cli/common.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "loom/core/thread_pool.h"
#include "loom/export/program_io.h"
#include "loom/io/checkpoint.h"
#include "loom/runtime/collectives.h"
#include "loom/core/cpu_features.h"
#include "loom/runtime/cpu/matmul.h"
#include "loom/weights/quantization_recipe.h"

namespace loom::cli {

namespace fs = std::filesystem;

namespace {
constexpr const char* kDefaultModelName = "loom-kjv-tiny";

std::string executable_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  return fs::path(buf).parent_path().string();
}
}  // namespace

void add_model_options(CLI::App* cmd, ModelOptions* o, bool model_required) {
  auto* opt = cmd->add_option("--model,-m", o->model_dir,
                              model_required ? "Checkpoint folder (config.json, *.safetensors, tokenizer.json) or a .gguf file"
                                             : "Checkpoint folder or .gguf file (default: the bundled model)");
  if (model_required) opt->required();
  cmd->add_option("--threads,-t", o->threads, "Worker threads (default: all cores, or LOOM_NUM_THREADS)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--backend", o->backend, "Kernel backend: cpu (SIMD) or reference (scalar, slow)")
      ->check(CLI::IsMember({"cpu", "reference"}));
  cmd->add_option("--kernel-config", o->kernel_config,
                  "KernelConfig JSON file: kernels replacing modules of this model ({\"RMSNorm\": \"loom:FusedRMSNorm\"})");
  cmd->add_flag("!--no-builtin-fusions", o->builtin_fusions,
                "Without --kernel-config: run the checkpoint's modules unfused instead of loom's built-in fusions "
                "(merged q/k/v, merged gate/up + SiLU, residual add + RMSNorm; `loom kernels --explain` lists them)");
  cmd->add_option("--plugin-dir", o->plugin_dirs, "A directory of plugin kernels (loading them needs trust_remote_code)");
  cmd->add_option("--trusted-plugin-dir", o->trusted_plugin_dirs, "A directory of trusted plugin kernels");
  cmd->add_option("--matmul-precision", o->matmul_precision,
                  "Linear layers with bf16 weights (as torch.set_float32_matmul_precision): auto (default, or "
                  "LOOM_MATMUL_PRECISION: the fastest path within PyTorch's bf16 accuracy, medium where bf16 dot "
                  "products are fast, else highest), highest (f32 activations, exact products), high (the same "
                  "here), medium (activations rounded to bf16 and bf16 dot products, where the CPU runs them fast: "
                  "AVX512_BF16 on AMD Zen 4 and later)")
      ->check(CLI::IsMember({"auto", "highest", "high", "medium"}));
  cmd->add_option("--quantize", o->quantize,
                  "Quantize the weights as they load, with llama.cpp's recipes: q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m, q5_k_m, q6_k, iq4_nl, mxfp4")
      ->check(CLI::IsMember(quantization_recipe_names()));
  cmd->add_option("--tensor-parallel,--tp", o->tensor_parallel,
                  "Split the model over N processes started by mpirun: mpirun -np N loom ... --tensor-parallel N")
      ->check(CLI::PositiveNumber);
}

bool follow_steps_unless_leader(batching::ModelRunner& runner) {
  if (runner.leads_steps()) return false;
  Status st = runner.follow_steps();
  if (!st.ok()) {
    runtime::Collectives* g = runtime::process_collectives();
    std::fprintf(stderr, "loom: error: tensor-parallel rank %d: %s\n", g ? g->rank() : -1, st.to_string().c_str());
    if (g) g->abort(2);
    throw Error(st);
  }
  return true;
}

StepsLeader::~StepsLeader() {
  Status st = runner_.end_steps();
  if (!st.ok()) std::fprintf(stderr, "loom: error: %s\n", st.to_string().c_str());
}

void set_tensor_parallel_timeout(std::optional<double> seconds) {
  if (runtime::Collectives* g = runtime::process_collectives(); g && seconds) g->set_timeout(*seconds);
}

namespace {
// Joins the mpirun job --tensor-parallel names; the group bounds its waits by
// cpu_group_timeout's default until a command sets its own.
Result<models::TensorParallel> join_tensor_parallel_group(int n) {
  const std::string flag = "--tensor-parallel " + std::to_string(n);
  if (!runtime::launched_by_mpi())
    return invalid_argument(flag + " needs " + std::to_string(n) + " processes started by mpirun: mpirun -np " +
                            std::to_string(n) + " loom <command> ... " + flag);
  if (!runtime::process_collectives()) {
    LOOM_ASSIGN_OR_RETURN(auto group, runtime::open_mpi_world(300.0));
    runtime::set_process_collectives(std::move(group));
  }
  runtime::Collectives* g = runtime::process_collectives();
  if (g->size() != n)
    return invalid_argument(flag + ", but mpirun started " + std::to_string(g->size()) + " processes (-np " +
                            std::to_string(g->size()) + "): give both the same number");
  return models::TensorParallel{g->rank(), g->size()};
}
}  // namespace

Result<int> join_tensor_parallel(const ModelOptions& o) {
  if (o.tensor_parallel <= 0) return 0;
  LOOM_ASSIGN_OR_RETURN(models::TensorParallel tp, join_tensor_parallel_group(o.tensor_parallel));
  return tp.rank;
}

namespace {
Result<std::shared_ptr<models::Model>> load_checkpoint(const std::string& dir, const ModelOptions& o,
                                                       bool tensor_parallel_ok) {
  models::LoadOptions lo;
  if (o.tensor_parallel > 0 && !tensor_parallel_ok)
    return unsupported("--tensor-parallel: this command does not run split over ranks yet (generate, batch, bench and serve do)");
  if (o.tensor_parallel > 0) {
    LOOM_ASSIGN_OR_RETURN(lo.tensor_parallel, join_tensor_parallel_group(o.tensor_parallel));
  }
  if (!o.quantize.empty()) {
    LOOM_ASSIGN_OR_RETURN(lo.quantize, quantization_recipe(o.quantize));
  }
  if (o.kernel_config.empty()) {
    if (!o.plugin_dirs.empty() || !o.trusted_plugin_dirs.empty())
      return invalid_argument("--plugin-dir/--trusted-plugin-dir need --kernel-config FILE naming the kernels to use");
    lo.builtin_fusions = o.builtin_fusions;
    return models::Model::load(dir, lo);
  }
  LOOM_ASSIGN_OR_RETURN(lo.kernel_config, kernels::KernelConfig::from_file(o.kernel_config));
  lo.plugin_dirs = o.plugin_dirs;
  lo.trusted_plugin_dirs = o.trusted_plugin_dirs;
  return models::Model::load(dir, lo);
}
}  // namespace

Result<std::shared_ptr<models::Model>> load_model(const std::string& dir, const ModelOptions& o, bool tensor_parallel_ok) {
  if (!exporting::is_program_dir(dir)) return load_checkpoint(dir, o, tensor_parallel_ok);
  for (const auto& [flag, given] : {std::pair<const char*, bool>{"--kernel-config", !o.kernel_config.empty()},
                                    {"--quantize", !o.quantize.empty()},
                                    {"--tensor-parallel", o.tensor_parallel > 0},
                                    {"--plugin-dir", !o.plugin_dirs.empty() || !o.trusted_plugin_dirs.empty()}})
    if (given)
      return invalid_argument(std::string(flag) + ": '" + dir +
                              "' is an exported program, whose graph and weights are fixed at export; give the flag "
                              "when exporting instead");
  return exporting::load_program_model(dir);
}

std::string default_model_dir() {
  if (const char* env = std::getenv("LOOM_DEFAULT_MODEL")) return env;
  const std::vector<fs::path> candidates = {
      fs::path(executable_dir()) / ".." / "models" / kDefaultModelName,          // build/loom → models/
      fs::path(executable_dir()) / ".." / "share" / "loom" / "models" / kDefaultModelName,
#ifdef LOOM_SOURCE_DIR
      fs::path(LOOM_SOURCE_DIR) / "models" / kDefaultModelName,
#endif
  };
  for (const auto& c : candidates)
    if (fs::exists(c / "config.json")) return fs::weakly_canonical(c).string();
  return (fs::path("models") / kDefaultModelName).string();
}

Result<std::string> resolve_model_dir(const ModelOptions& o) {
  std::string dir = o.model_dir.empty() ? default_model_dir() : o.model_dir;
  if (!fs::is_directory(dir)) {
    if (o.model_dir.empty())
      return not_found("no --model given and the bundled model was not found at '" + dir +
                       "' (set LOOM_DEFAULT_MODEL or pass --model DIR)");
    if (Checkpoint::is_gguf_file(dir)) return dir;
    if (fs::is_regular_file(dir)) return invalid_argument("--model " + dir + " is a file but not a GGUF file (no 'GGUF' magic)");
    return not_found("model directory '" + dir + "' does not exist");
  }
  return dir;
}

void apply_process_options(const ModelOptions& o) {
  if (o.threads > 0) ThreadPool::set_global_threads(o.threads);
  if (!o.matmul_precision.empty()) {
    cpu::set_matmul_precision(cpu::matmul_precision_from_name(o.matmul_precision).value());  // checked by the flag
  }
  if (cpu::matmul_precision() == cpu::MatmulPrecision::kMedium && !cpu::bf16_dot_products_active()) {
    std::fprintf(stderr,
                 "note: --matmul-precision medium: no fast bf16 dot products on this CPU and code path (%s; they "
                 "need AVX512_BF16 on AMD Zen 4 or later), so linear layers compute as with highest\n",
                 cpu::isa_name().c_str());
  }
}

void add_sampling_options(CLI::App* cmd, SamplingFlags* f) {
  cmd->add_option("--max-new-tokens,-n", f->max_new_tokens, "Tokens to generate (default: generation_config.json)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", f->temperature, "Sampling temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", f->top_k, "Keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", f->top_p, "Nucleus sampling mass in (0, 1]");
  cmd->add_option("--min-p", f->min_p, "Drop tokens below min_p × p(top token)");
  cmd->add_option("--repetition-penalty", f->repetition_penalty, "Penalty > 0 for tokens already seen (1 = off)");
  cmd->add_option("--seed", f->seed, "Random seed for sampling");
  cmd->add_option("--stop", f->stop, "Stop when this string appears (repeatable)");
  cmd->add_flag("--greedy", f->greedy, "Always pick the most likely token");
  cmd->add_option("--prompt-lookup-num-tokens", f->prompt_lookup_num_tokens,
                  "Speculative decoding: draft up to K tokens per step from the text's own n-grams and verify them "
                  "in one forward (same output; 0 = off; Transformers' prompt_lookup_num_tokens)")
      ->check(CLI::Range(int64_t{0}, kMaxPromptLookupTokens));
}

batching::GenerateOptions make_generate_options(const SamplingFlags& f, const GenerationConfig& gc,
                                                const models::Model& model, int64_t prompt_length) {
  batching::GenerateOptions o;
  o.max_new_tokens = f.max_new_tokens.value_or(gc.new_token_budget(prompt_length));
  o.sampling = gc.sampling();
  // An explicit sampling flag turns sampling on, as users of llama.cpp expect.
  if (f.temperature) { o.sampling.temperature = *f.temperature; o.sampling.do_sample = *f.temperature > 0; }
  if (f.top_k) { o.sampling.top_k = *f.top_k; o.sampling.do_sample = true; }
  if (f.top_p) { o.sampling.top_p = *f.top_p; o.sampling.do_sample = true; }
  if (f.min_p) { o.sampling.min_p = *f.min_p; o.sampling.do_sample = true; }
  if (f.repetition_penalty) o.sampling.repetition_penalty = *f.repetition_penalty;
  if (f.greedy) o.sampling.do_sample = false;
  o.seed = f.seed.value_or(gc.seed.value_or(0));
  for (int64_t id : gc.eos_token_ids) o.eos_token_ids.push_back(static_cast<int32_t>(id));
  if (o.eos_token_ids.empty())
    for (int64_t id : model.config().eos_token_ids) o.eos_token_ids.push_back(static_cast<int32_t>(id));
  o.stop_strings = gc.stop_strings;
  o.stop_strings.insert(o.stop_strings.end(), f.stop.begin(), f.stop.end());
  o.prompt_lookup_num_tokens = f.prompt_lookup_num_tokens.value_or(gc.prompt_lookup_num_tokens.value_or(0));
  return o;
}

Result<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::string cur;
  size_t index = 0;
  auto flush = [&]() -> Status {
    if (cur.empty()) return Status::Ok();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(cur.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || v < 0 || v > 0x7fffffff)
      return invalid_argument("token id #" + std::to_string(index) + " '" + cur + "' is not a valid id");
    ids.push_back(static_cast<int32_t>(v));
    ++index;
    cur.clear();
    return Status::Ok();
  };
  for (char ch : text) {
    if (ch == ',' || ch == '[' || ch == ']' || std::isspace(static_cast<unsigned char>(ch))) {
      LOOM_RETURN_IF_ERROR(flush());
    } else {
      cur += ch;
    }
  }
  LOOM_RETURN_IF_ERROR(flush());
  return ids;
}

}  // namespace loom::cli
