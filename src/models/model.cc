#include "loom/models/model.h"

#include "loom/models/gguf_mapping.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "loom/core/logging.h"
#include "loom/models/architecture.h"
#include "loom/models/builtin_fusions.h"
#include "loom/core/file_pages.h"
#include "loom/weights/weights_cache.h"

namespace loom::models {

ExpectedParams expected_parameters(const Module& root) {
  std::vector<ParameterSpec> specs;
  root.collect_parameters(&specs);
  ExpectedParams out;
  for (auto& p : specs) out[p.name] = ExpectedParam{std::move(p.shape), std::nullopt};
  return out;
}

kernels::ModuleView module_view(const Module& root, const graph::Graph* graph) {
  kernels::ModuleView view;
  std::vector<const Module*> modules;
  root.collect_modules(&modules);
  for (const Module* mod : modules) {
    kernels::ModuleInfo info{mod->path(), mod->class_name(), mod->layer_name(), {}, "cpu"};
    std::vector<ParameterSpec> ps;
    mod->collect_parameters(&ps);
    for (const auto& p : ps) info.parameters.push_back({p.name, p.shape});
    view.modules.push_back(std::move(info));
  }
  view.graph = graph;
  return view;
}

namespace {
// Quantized linears (a GGUF file's blocks, or --quantize) keep the checkpoint's
// modules by default: their merged projections measured slower (docs/performance.md,
// "Built-in fusions": Q4_0 prefill 0.88x on one thread).
bool has_quantized_weights(const Checkpoint& ckpt, const LoadOptions& options) {
  if (options.quantize) return true;
  for (const auto& [dtype, count] : ckpt.parameters_per_dtype())
    if (dtype_is_quantized(dtype) && count > 0) return true;
  return false;
}
}  // namespace

kernels::ModuleView module_view(const Model& model) { return module_view(model.module(), model.step_graph().get()); }

namespace {

// The graph with every module's own forward, for the fusion chain checks: only
// scopes and data flow are read, so parameters are shape-only placeholders.
Result<graph::Graph> record_plain_graph(const CausalLM& root, const ExpectedParams& expected) {
  try {
    return root.build_graph([&expected](const std::string& name) {
      auto it = expected.find(name);
      if (it == expected.end()) throw Error(internal_error("graph asks for parameter '" + name + "' the modules do not declare"));
      return Tensor::wrap(nullptr, DType::kF32, it->second.shape);
    });
  } catch (const Error& e) {
    return e.status();
  }
}

}  // namespace

Result<std::shared_ptr<Model>> Model::load(const std::string& dir) { return load(dir, LoadOptions{}); }

Result<std::shared_ptr<Model>> Model::load(const std::string& dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) return not_found("model '" + dir + "' does not exist");
  if (!fs::is_directory(dir) && !Checkpoint::is_gguf_file(dir))
    return invalid_argument("model '" + dir + "' is neither a checkpoint directory nor a .gguf file (no 'GGUF' magic)");
  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  const bool gguf = Checkpoint::is_gguf_file(dir);
  const std::string config_path = gguf ? dir : (fs::path(dir) / "config.json").string();
  if (!gguf && !fs::exists(config_path))
    return not_found("'" + dir + "' has no config.json (is it a Hugging Face checkpoint folder or a .gguf file?)");
  std::shared_ptr<io::GgufFile> gguf_file;
  if (gguf) {
    LOOM_ASSIGN_OR_RETURN(gguf_file, io::GgufFile::open(dir));
  }
  // Architectures whose config.json uses other field names (GPT-2) rewrite it
  // before ModelConfig parses it; the file itself is left as it is.
  nlohmann::json raw;
  if (gguf_file) {
    LOOM_ASSIGN_OR_RETURN(raw, config_json_from_gguf(*gguf_file));
  } else {
    std::ifstream in(config_path);
    raw = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  const Architecture* adapter = nullptr;
  if (raw.is_object() && raw.contains("model_type") && raw.at("model_type").is_string())
    adapter = find_architecture_by_type(raw.at("model_type").get<std::string>());
  if (adapter && adapter->adapt_config_json) {
    Status s = adapter->adapt_config_json(raw);
    if (!s.ok()) return s.with_context(config_path);
    LOOM_ASSIGN_OR_RETURN(m->config_, ModelConfig::from_json(raw, config_path));
  } else if (gguf_file) {
    LOOM_ASSIGN_OR_RETURN(m->config_, ModelConfig::from_json(raw, config_path + " (GGUF metadata)"));
  } else {
    LOOM_ASSIGN_OR_RETURN(m->config_, ModelConfig::from_file(config_path));
  }
  LOOM_ASSIGN_OR_RETURN(const Architecture* arch, find_architecture(m->config_));
  if (arch->resolve_config) LOOM_RETURN_IF_ERROR(arch->resolve_config(m->config_));
  LOOM_ASSIGN_OR_RETURN(m->module_, arch->build(m->config_));
  const TensorParallel& tp = options.tensor_parallel;
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    return invalid_argument("tensor parallelism: rank " + std::to_string(tp.rank) + " of " + std::to_string(tp.size));
  std::map<std::string, ParameterShard> shards;
  std::map<std::string, Shape> full_shapes;  // of sharded parameters: quantization decides on these
  if (tp.active()) {
    if (!options.kernel_config.empty())
      return unsupported(dir + ": a kernel config with --tensor-parallel (fused kernels are not split over ranks yet)");
    LOOM_RETURN_IF_ERROR(m->module_->apply_tensor_parallel(tp).with_context(dir));
    std::vector<ParameterSpec> specs;
    m->module_->collect_parameters(&specs);
    for (const auto& p : specs)
      if (p.shard.sharded()) {
        shards[p.name] = p.shard;
        full_shapes[p.name] = p.shape;
      }
    m->tp_ = tp;
  }
  if (gguf_file) {
    // llama.cpp's names and row orders, not the Hugging Face checkpoint's.
    LOOM_ASSIGN_OR_RETURN(m->rules_, gguf_weight_rules(m->config_));
    LOOM_ASSIGN_OR_RETURN(Checkpoint ckpt_opened, Checkpoint::from_gguf(gguf_file));
    m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt_opened));
  } else {
    if (arch->weight_rules) m->rules_ = arch->weight_rules(m->config_);
    LOOM_ASSIGN_OR_RETURN(Checkpoint ckpt_opened, Checkpoint::open(dir));
    m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt_opened));
  }
  const Checkpoint& ckpt = *m->checkpoint_;
  const std::string& what = arch->class_name;

  ExpectedParams expected = expected_parameters(*m->module_);
  std::optional<ExpectedParams> with_kernels;  // the parameters once the layouts apply
  kernels::KernelConfig builtin;
  if (options.kernel_config.empty() && options.builtin_fusions && !tp.active() &&
      !has_quantized_weights(ckpt, options))
    builtin = builtin_fusion_config(*m->module_);
  const kernels::KernelConfig& kernel_config = options.kernel_config.empty() ? builtin : options.kernel_config;
  if (!kernel_config.empty()) {
    LOOM_ASSIGN_OR_RETURN(graph::Graph plain, record_plain_graph(*m->module_, expected));
    const kernels::ModuleView view = module_view(*m->module_, &plain);
    kernels::KernelRegistry registry;
    for (const auto& d : options.plugin_dirs) registry.add_plugin_directory(d, /*trusted=*/false);
    for (const auto& d : options.trusted_plugin_dirs) registry.add_plugin_directory(d, /*trusted=*/true);
    for (const auto& k : options.extra_kernels) LOOM_RETURN_IF_ERROR(registry.add_builtin(k));
    kernels::ResolveOptions ro;
    ro.cpu = options.cpu;
    auto kplan = kernels::resolve_kernels(kernel_config, view, registry, ro);
    if (!kplan.ok())
      return kplan.status().with_context(dir + (options.kernel_config.empty() ? ": built-in fusions" : ": kernel config"));
    m->kernel_plan_ = std::make_unique<kernels::KernelPlan>(std::move(kplan).value());
    // The layouts' parameters and rules belong to this instance only.
    auto with_layouts = m->kernel_plan_->apply_layouts(expected);
    if (!with_layouts.ok()) return with_layouts.status().with_context(dir + ": kernel layouts");
    with_kernels = std::move(with_layouts).value();
  }

  // Everything below up to plan.load() looks at headers only. The layouts'
  // rules read the module tree's parameter names, so they are a second stage on
  // the architecture's plan (weights/conversion_plan.h); rules_ lists both.
  CompileOptions arch_options;
  arch_options.rules_name = "architecture rule";
  auto plan = ConversionPlan::compile(m->rules_, SourceIndex::from_checkpoint(ckpt), expected, arch_options);
  if (plan.ok() && with_kernels) {
    CompileOptions layout_options;
    layout_options.rules_name = "layout rule";
    WeightRules layout_rules = m->kernel_plan_->weight_rules();
    plan = ConversionPlan::compose(std::move(plan).value(), layout_rules, *with_kernels, layout_options);
    for (auto& rule : layout_rules) m->rules_.push_back(std::move(rule));
  }
  if (!plan.ok())
    return plan.status().with_context(ckpt.source() + ": " + what + " with this config.json" +
                                      (with_kernels ? " and kernel config" : ""));
  m->plan_ = std::make_unique<ConversionPlan>(std::move(plan).value());
  for (const ConversionGroup& g : m->plan_->groups()) {
    // U8 is a weight only as gpt-oss's MXFP4 blocks and scales, which the group packs.
    const bool packs_mxfp4 = !g.ops.empty() && g.ops.front().kind == ConversionOpKind::kMxfp4FromBlocks;
    for (const auto& slot : g.sources)
      for (const PlanTensor& t : slot)
        if (!dtype_is_float(t.dtype) && !dtype_is_quantized(t.dtype) && !(packs_mxfp4 && t.dtype == DType::kU8))
          return unsupported(ckpt.source() + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                             "; loom loads F32, BF16 and F16 weights, GGUF's quantized types and MXFP4 "
                             "*_blocks / *_scales (gpt-oss)");
  }
  // E.g. a tied checkpoint may still carry lm_head.weight: unused, not worth a warning.
  std::vector<std::string> unused;
  for (const auto& name : m->plan_->unused_sources())
    if (!(arch->expected_unused && arch->expected_unused(name, m->config_)) &&
        !(gguf_file && gguf_tensor_is_not_a_parameter(name)))
      unused.push_back(name);
  if (!unused.empty()) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    log_warn(ckpt.source() + ": " + std::to_string(unused.size()) + " tensor(s) not used by " + what + ": " + list +
             (unused.size() > 8 ? ", …" : ""));
  }

  // Weights an earlier load made (quantized, or converted by a rule) and cached: the
  // groups that make only those are neither read nor run.
  const ExpectedParams& final_params = with_kernels ? *with_kernels : expected;
  WeightsCacheKey key{dir, options.quantize ? options.quantize->name : std::string(),
                      "rank " + std::to_string(tp.rank) + " of " + std::to_string(tp.size), m->plan_->describe()};
  // A kernel config's layouts are in the key: the plan's description names every
  // rule and op of its second stage, so a merged weight is cached like a quantized
  // one and a later load with the same kernels maps it instead of making it again.
  for (const auto& [name, p] : final_params) {
    key.loaded += name + " " + shape_to_string(p.shape) + " " + (p.dtype ? std::string(dtype_name(*p.dtype)) : "stored");
    // The recipe's choice too: weights quantized by an older recipe (one that
    // quantized MoE routers, say) are not this load's.
    if (options.quantize) {
      const auto whole = full_shapes.find(name);
      const std::optional<DType> want =
          options.quantize->type_for(name, whole != full_shapes.end() ? whole->second : p.shape,
                                     m->config_.num_hidden_layers, m->config_.tie_word_embeddings);
      key.loaded += " as " + std::string(want ? dtype_name(*want) : "kept");
    }
    key.loaded += "\n";
  }
  std::map<std::string, Tensor> cached = find_cached_weights(key);
  for (const auto& [name, t] : cached) {
    // A shard's shape is its rank's part of the parameter's.
    const auto p = final_params.find(name);
    if (p == final_params.end() || (shards.count(name) ? t.rank() != static_cast<int64_t>(p->second.shape.size())
                                                        : t.shape() != p->second.shape)) {
      log_warn(ckpt.source() + ": the weights cache holds " + t.describe() + " for '" + name +
               "', which this model does not load as that; making its weights again");
      cached.clear();
      break;
    }
  }
  std::set<std::string> have;
  for (const auto& [name, t] : cached) have.insert(name);
  auto stats = m->plan_->load(
      ckpt,
      [&m, &shards](const std::string& name, Tensor t) {
        if (auto it = shards.find(name); it != shards.end()) {
          LOOM_ASSIGN_OR_RETURN(t, shard_parameter(name, t, it->second));
        }
        m->params_[name] = std::move(t);
        return Status::Ok();
      },
      have);
  if (!stats.ok()) return stats.status().with_context(ckpt.source() + ": loading " + what);
  m->load_stats_ = *stats;
  for (auto& [name, t] : cached) m->params_[name] = t;  // also over those a group writing others made
  // Weights made in memory (quantized now, or by a conversion rule) go through the
  // cache file, so that they are file pages the runtime can hand back.
  std::vector<CachedWeight> made;
  for (auto& [name, t] : m->params_) {
    if (cached.count(name)) continue;
    std::optional<DType> want;
    if (options.quantize) {
      // A shard is quantized as the whole tensor would be: every rank then
      // holds exactly the blocks a single process would.
      const auto full = full_shapes.find(name);
      const Shape& shape = full == full_shapes.end() ? t.shape() : full->second;
      want = options.quantize->type_for(name, shape, m->config_.num_hidden_layers, m->config_.tie_word_embeddings);
      if (want && (*want == t.dtype() || dtype_is_quantized(t.dtype()))) want.reset();
    }
    if (want && t.rank() == 2 && t.dim(1) % dtype_block_elements(*want) != 0)
      return invalid_argument("tensor parallelism: " + name + " is quantized to " + std::string(dtype_name(*want)) +
                              " in blocks of " + std::to_string(dtype_block_elements(*want)) + ", but each rank holds " +
                              std::to_string(t.dim(1)) + " of its columns; use fewer ranks or another --quantize");
    if (want) made.push_back({name, *want});
    else if (made_in_memory(t)) made.push_back({name, t.dtype()});
  }
  // Small parameters read from the checkpoint's mapping (norm weights) sit between
  // large ones the runtime may never read from it (packed copies mapped from the cache).
  constexpr size_t kSmallParameterBytes = size_t{1} << 20;
  for (const auto& [name, t] : m->params_)
    if (t.nbytes() < kSmallParameterBytes) read_file_pages_sparsely(t.data(), t.nbytes());
  if (made.empty() && !cached.empty()) {
    log_info(ckpt.source() + ": " + std::to_string(cached.size()) + " weights made by an earlier load mapped from the cache");
  } else {
    // The cache file lacked some (it is written again, with all of them).
    for (const auto& [name, t] : cached) made.push_back({name, t.dtype()});
    LOOM_RETURN_IF_ERROR(map_weights_through_cache(key, made, &m->params_).with_context(ckpt.source()));
  }

  const auto& params = m->params_;
  // Views the graph reads besides the loaded parameters: a tied vocab-parallel
  // LM head's rows of the embedding table (parameters() lists memory once).
  std::map<std::string, Tensor> views;
  if (const Linear& head = m->module_->lm_head(); !head.tied_rows_of().empty()) {
    auto it = params.find(head.tied_rows_of());
    if (it == params.end()) return internal_error("the tied LM head's '" + head.tied_rows_of() + "' was not loaded");
    LOOM_ASSIGN_OR_RETURN(views[head.weight_name()], shard_parameter(head.tied_rows_of(), it->second, head.tied_rows_shard()));
  }
  auto source = [&params, &views](const std::string& name) {
    if (auto v = views.find(name); v != views.end()) return v->second;
    auto it = params.find(name);
    if (it == params.end()) throw Error(internal_error("graph asks for parameter '" + name + "' the plan did not load"));
    return it->second;
  };
  if (!m->kernel_plan_) {
    m->graph_ = std::make_shared<graph::Graph>(m->module_->build_graph(source));
    return m;
  }
  try {
    m->graph_ = std::make_shared<graph::Graph>(m->module_->build_graph(source, m->kernel_plan_.get()));
  } catch (const Error& e) {
    return e.status().with_context(dir + ": recording the kernel plan");
  }
  return m;
}

Result<std::shared_ptr<Model>> Model::from_step_graph(const std::string& dir, graph::Graph step_graph) {
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(config_path);
  if (!in) return not_found("'" + dir + "' has no config.json");
  nlohmann::json raw = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!raw.is_object()) return parse_error(config_path + ": not a JSON object");
  const Architecture* adapter = raw.contains("model_type") && raw.at("model_type").is_string()
                                    ? find_architecture_by_type(raw.at("model_type").get<std::string>())
                                    : nullptr;
  if (adapter && adapter->adapt_config_json) LOOM_RETURN_IF_ERROR(adapter->adapt_config_json(raw).with_context(config_path));
  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  LOOM_ASSIGN_OR_RETURN(m->config_, ModelConfig::from_json(raw, config_path));
  LOOM_ASSIGN_OR_RETURN(const Architecture* arch, find_architecture(m->config_));
  if (arch->resolve_config) LOOM_RETURN_IF_ERROR(arch->resolve_config(m->config_));
  LOOM_ASSIGN_OR_RETURN(m->module_, arch->build(m->config_));
  for (graph::ValueId v : step_graph.parameters()) m->params_[step_graph.value(v).name] = step_graph.value(v).tensor;
  m->graph_ = std::make_shared<graph::Graph>(std::move(step_graph));
  return m;
}

}  // namespace loom::models
