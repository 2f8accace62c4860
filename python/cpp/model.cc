// _Model: a loaded checkpoint (AutoModelForCausalLM's engine). forward() gives
// every position's logits; generate() runs one request on a contiguous KV cache
// exactly as `loom generate` does. Both release the GIL while they compute; the
// per-token callback takes it back only to call Python and to notice Ctrl-C.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "bindings.h"
#include "buffers.h"
#include "generation_config_json.h"
#include "loom/io/checkpoint.h"
#include "loom/weights/quantization_recipe.h"
#include "model_handle.h"
#include "loom/batching/generate.h"
#include "loom/core/thread_pool.h"
#include "loom/export/program_io.h"
#include "loom/models/save_pretrained.h"
#include "loom/runtime/cpu/matmul.h"
#include "loom/runtime/collectives.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "loom/tokenizer/incremental_detokenizer.h"

namespace loom::python {

namespace {

namespace fs = std::filesystem;

class DetokenizerStream : public batching::TextStream {
 public:
  DetokenizerStream(std::shared_ptr<const Tokenizer> tok, const std::vector<int32_t>& prompt)
      : detok_(std::move(tok), /*skip_special_tokens=*/true, prompt) {}
  Result<std::string> push(int32_t id) override { return detok_.push(id); }
  Result<std::string> flush() override { return detok_.flush(); }

 private:
  IncrementalDetokenizer detok_;
};

struct LoadArgs {
  std::string dir;
  std::string kernel_config_json;  // empty: no kernels
  std::vector<std::string> plugin_dirs;
  bool trust_remote_code = false;
  std::string backend = "cpu";
  int num_threads = 0;  // 0: the global pool
  std::string quantize;  // a weights/quantization_recipe.h name; empty: weights as stored
  int tensor_parallel = 0;  // ranks of the mpirun job sharing the model; 0: not split
};

// Joins the mpirun job from_pretrained(tensor_parallel=N) names.
models::TensorParallel join_tensor_parallel(int n) {
  const std::string arg = "tensor_parallel=" + std::to_string(n);
  if (n < 1) throw Error(invalid_argument(arg + ": must be ≥ 1"));
  if (!runtime::launched_by_mpi())
    throw Error(invalid_argument(arg + " needs " + std::to_string(n) + " processes started by mpirun: mpirun -np " +
                                 std::to_string(n) + " python3 script.py"));
  if (!runtime::process_collectives()) runtime::set_process_collectives(unwrap(runtime::open_mpi_world(300.0)));
  runtime::Collectives* g = runtime::process_collectives();
  if (g->size() != n)
    throw Error(invalid_argument(arg + ", but mpirun started " + std::to_string(g->size()) + " processes (-np " +
                                 std::to_string(g->size()) + "): give both the same number"));
  return {g->rank(), g->size()};
}

std::shared_ptr<ModelHandle> load(const LoadArgs& a) {
  if (!fs::exists(a.dir)) throw Error(not_found("model '" + a.dir + "' does not exist"));
  if (!fs::is_directory(a.dir) && !Checkpoint::is_gguf_file(a.dir))
    throw Error(invalid_argument("model '" + a.dir + "' is neither a checkpoint directory nor a .gguf file"));
  if (a.num_threads < 0) throw Error(invalid_argument("num_threads must be ≥ 1, got " + std::to_string(a.num_threads)));
  auto h = std::make_shared<ModelHandle>();
  h->backend = a.backend;
  if (a.num_threads > 0) h->pool = std::make_shared<ThreadPool>(a.num_threads);
  models::LoadOptions lo;
  if (exporting::is_program_dir(a.dir)) {
    // An exported program: its graph and weights are fixed at export.
    for (const auto& [arg, given] : {std::pair<const char*, bool>{"kernel_config", !a.kernel_config_json.empty()},
                                     {"quantize", !a.quantize.empty()},
                                     {"tensor_parallel", a.tensor_parallel > 0},
                                     {"plugin_dirs", !a.plugin_dirs.empty()}})
      if (given)
        throw Error(invalid_argument(std::string(arg) + ": '" + a.dir +
                                     "' is an exported program, whose graph and weights are fixed at export; pass it "
                                     "when exporting instead"));
    h->model = unwrap(exporting::load_program_model(a.dir));
  } else if (a.kernel_config_json.empty()) {
    if (a.tensor_parallel > 0) lo.tensor_parallel = join_tensor_parallel(a.tensor_parallel);
    if (!a.quantize.empty()) lo.quantize = unwrap(quantization_recipe(a.quantize));
    if (!a.plugin_dirs.empty())
      throw Error(invalid_argument("plugin_dirs need a kernel_config naming the kernels to use"));
    h->model = unwrap(models::Model::load(a.dir, lo));
  } else {
    if (a.tensor_parallel > 0) lo.tensor_parallel = join_tensor_parallel(a.tensor_parallel);
    if (!a.quantize.empty()) lo.quantize = unwrap(quantization_recipe(a.quantize));
    lo.kernel_config = unwrap(kernels::KernelConfig::parse(a.kernel_config_json));
    (a.trust_remote_code ? lo.trusted_plugin_dirs : lo.plugin_dirs) = a.plugin_dirs;
    h->model = unwrap(models::Model::load(a.dir, lo));
  }
  if (Tokenizer::exists_at(a.dir)) h->tokenizer = unwrap(Tokenizer::from_dir(a.dir));
  h->runner = unwrap(batching::ModelRunner::create(h->model, a.backend, h->pool.get()));
  return h;
}

// Logits of every token of each row, rows packed one after another: [sum(len), vocab].
std::shared_ptr<FloatBuffer> forward(ModelHandle& h, const std::vector<std::vector<int32_t>>& rows) {
  if (rows.empty()) throw Error(invalid_argument("input_ids is empty"));
  int64_t total = 0, longest = 0;
  std::vector<batching::SequenceChunk> chunks;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].empty()) throw Error(invalid_argument("input_ids row " + std::to_string(i) + " has no tokens"));
    chunks.push_back({rows[i].data(), static_cast<int64_t>(rows[i].size()), 0});
    total += static_cast<int64_t>(rows[i].size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(rows[i].size()));
  }
  std::lock_guard<std::mutex> lock(h.run_mutex);
  runtime::ContiguousKvCache cache(h.runner->kv_layout(), static_cast<int>(rows.size()), longest);
  const Tensor logits = unwrap(h.runner->step(chunks, cache, batching::LogitsRows::kAllTokens));
  auto out = std::make_shared<FloatBuffer>();
  const int64_t vocab = h.model->vocab_size();
  out->data.resize(static_cast<size_t>(total * vocab));
  std::memcpy(out->data.data(), logits.data_as<float>(), out->data.size() * sizeof(float));
  out->shape = {static_cast<py::ssize_t>(total), static_cast<py::ssize_t>(vocab)};
  return out;
}

py::dict generate(ModelHandle& h, const std::vector<int32_t>& prompt, const std::string& gc_json,
                  std::optional<uint64_t> seed, py::object on_token, std::shared_ptr<Tokenizer> tokenizer,
                  const std::string& kv_cache_dtype, std::shared_ptr<structured::Constraint> constraint,
                  const std::optional<std::string>& cache_type_k, const std::optional<std::string>& cache_type_v,
                  const std::string& kv_cache_rotation) {
  const GenerationConfig gc = call_generation_config(h, gc_json);
  batching::GenerateOptions o;
  o.max_new_tokens = gc.new_token_budget(static_cast<int64_t>(prompt.size()));
  o.sampling = gc.sampling();
  o.seed = seed.value_or(gc.seed.value_or(0));
  for (int64_t id : gc.eos_token_ids) o.eos_token_ids.push_back(static_cast<int32_t>(id));
  o.stop_strings = gc.stop_strings;
  o.prompt_lookup_num_tokens = gc.prompt_lookup_num_tokens.value_or(0);
  o.kv_cache_dtype = unwrap(batching::kv_cache_dtype_from_name(kv_cache_dtype));
  o.kv_format = unwrap(graph::kv_format_from_names(cache_type_k.value_or(kv_cache_dtype),
                                                   cache_type_v.value_or(kv_cache_dtype), kv_cache_rotation));
  o.constraint = std::move(constraint);

  std::unique_ptr<batching::TextStream> text;
  if (tokenizer) text = std::make_unique<DetokenizerStream>(tokenizer, prompt);
  // Every token comes back to Python briefly: to call the streamer and to
  // let Ctrl-C (a pending signal) stop the generation with KeyboardInterrupt.
  const bool has_callback = !on_token.is_none();
  auto per_token = [&](const batching::TokenEvent& ev) {
    py::gil_scoped_acquire gil;
    raise_pending_signals();
    if (has_callback && ev.id >= 0) on_token(ev.id);
  };
  batching::GenerateResult r;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(h.run_mutex);
    r = unwrap(batching::generate(*h.runner, prompt, o, text.get(), per_token));
  }
  py::dict d;
  std::vector<int32_t> sequence = r.prompt_ids;
  sequence.insert(sequence.end(), r.generated_ids.begin(), r.generated_ids.end());
  d["sequence"] = sequence;
  d["generated_ids"] = r.generated_ids;
  d["logprobs"] = r.logprobs;
  d["text"] = r.text;
  d["finish_reason"] = generation::finish_reason_name(r.finish_reason);
  d["prefill_seconds"] = r.timings.prefill_seconds;
  d["decode_seconds"] = r.timings.decode_seconds;
  d["drafted_tokens"] = r.timings.drafted_tokens;
  d["accepted_draft_tokens"] = r.timings.accepted_draft_tokens;
  return d;
}

std::vector<std::string> explain_kernels(const ModelHandle& h) {
  const kernels::KernelPlan* plan = h.model->kernel_plan();
  if (!plan) throw Error(failed_precondition("explain_kernels: the model was loaded without a kernel_config"));
  return plan->explain();
}

}  // namespace

std::unique_ptr<batching::TextStream> make_text_stream(std::shared_ptr<const Tokenizer> tokenizer,
                                                       const std::vector<int32_t>& prompt) {
  return std::make_unique<DetokenizerStream>(std::move(tokenizer), prompt);
}

batching::ManagerOptions ModelHandle::manager_options() const {
  batching::ManagerOptions o;
  if (tokenizer) {
    std::shared_ptr<const Tokenizer> tok = tokenizer;
    o.text_stream = [tok](const std::vector<int32_t>& prompt) { return make_text_stream(tok, prompt); };
  }
  return o;
}

std::shared_ptr<batching::ModelRunner> ModelHandle::take_runner() {
  {
    std::lock_guard<std::mutex> lock(idle_mutex);
    if (!idle_runners.empty()) {
      auto r = std::move(idle_runners.back());
      idle_runners.pop_back();
      return r;
    }
  }
  return new_runner();
}

std::shared_ptr<batching::ModelRunner> ModelHandle::new_runner() const {
  return unwrap(batching::ModelRunner::create(model, backend, pool.get()));
}

void ModelHandle::give_back_runner(std::shared_ptr<batching::ModelRunner> runner) {
  if (!runner || runner.use_count() != 1) return;  // still shared (a kept manager): not idle
  std::lock_guard<std::mutex> lock(idle_mutex);
  idle_runners.push_back(std::move(runner));
}

GenerationConfig call_generation_config(const ModelHandle& h, const std::string& json_text) {
  GenerationConfig gc = parse_generation_config(json_text);
  const ModelConfig& c = h.model->config();
  gc.inherit_special_tokens(c.eos_token_ids, c.bos_token_id, c.pad_token_id);
  return gc;
}

void register_model(py::module_& m) {
  py::class_<ModelHandle, std::shared_ptr<ModelHandle>>(m, "_Model")
      .def_static(
          "load",
          [](const std::string& dir, const std::string& kernel_config_json, std::vector<std::string> plugin_dirs,
             bool trust_remote_code, const std::string& backend, int num_threads, const std::string& quantize,
             int tensor_parallel) {
            return load({dir, kernel_config_json, std::move(plugin_dirs), trust_remote_code, backend, num_threads,
                         quantize, tensor_parallel});
          },
          py::arg("dir"), py::arg("kernel_config_json") = "", py::arg("plugin_dirs") = std::vector<std::string>{},
          py::arg("trust_remote_code") = false, py::arg("backend") = "cpu", py::arg("num_threads") = 0,
          py::arg("quantize") = "", py::arg("tensor_parallel") = 0, py::call_guard<py::gil_scoped_release>())
      // Tensor parallelism: rank 0 drives every step; the others follow them
      // until rank 0 calls end_steps() (an error there ends the whole job).
      .def_property_readonly("leads_steps", [](const ModelHandle& h) { return h.runner->leads_steps(); })
      .def(
          "follow_steps",
          [](ModelHandle& h) {
            Status st = h.runner->follow_steps();
            if (st.ok()) return;
            runtime::Collectives* g = runtime::process_collectives();
            std::fprintf(stderr, "loom: error: tensor-parallel rank %d: %s\n", g ? g->rank() : -1, st.to_string().c_str());
            if (g) g->abort(2);
            throw Error(st);
          },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "end_steps",
          [](ModelHandle& h) {
            std::lock_guard<std::mutex> lk(h.run_mutex);
            check(h.runner->end_steps());
          },
          py::call_guard<py::gil_scoped_release>())
      // config.json as the model reads it (for a GGUF file: made from its metadata).
      .def_property_readonly("config_json", [](const ModelHandle& h) { return h.model->config().raw.dump(); })
      .def("forward", &forward, py::arg("rows"), py::call_guard<py::gil_scoped_release>())
      .def("generate", &generate, py::arg("prompt"), py::arg("generation_config_json"), py::arg("seed") = py::none(),
           py::arg("on_token") = py::none(), py::arg("tokenizer") = nullptr, py::arg("kv_cache_dtype") = "float32",
           py::arg("constraint") = nullptr, py::arg("cache_type_k") = py::none(), py::arg("cache_type_v") = py::none(),
           py::arg("kv_cache_rotation") = "auto")
      .def(
          "save_pretrained",
          [](const ModelHandle& h, const std::string& dir) {
            if (!h.model->has_checkpoint())
              throw Error(failed_precondition("save_pretrained: '" + h.model->dir() +
                                              "' is an exported program, which keeps no checkpoint to save"));
            check(models::save_pretrained(*h.model, dir));
          },
          py::arg("dir"), py::call_guard<py::gil_scoped_release>())
      .def("explain_kernels", &explain_kernels)
      .def_property_readonly("dir", [](const ModelHandle& h) { return h.model->dir(); })
      .def_property_readonly("vocab_size", [](const ModelHandle& h) { return h.model->vocab_size(); })
      .def_property_readonly("num_layers", [](const ModelHandle& h) { return h.model->num_layers(); })
      .def_property_readonly("tokenizer", [](const ModelHandle& h) { return h.tokenizer; })
      .def_property_readonly("eos_token_ids", [](const ModelHandle& h) { return h.model->config().eos_token_ids; })
      .def_property_readonly("pad_token_id", [](const ModelHandle& h) { return h.model->config().pad_token_id; })
      .def_property_readonly("num_threads", [](const ModelHandle& h) {
        return h.pool ? h.pool->num_threads() : ThreadPool::global().num_threads();
      });

  // Process-wide, as torch.set_float32_matmul_precision.
  m.def("_set_matmul_precision", [](const std::string& name) {
    auto p = cpu::matmul_precision_from_name(name);
    if (!p.ok()) throw Error(invalid_argument("matmul_precision: " + p.status().message()));
    cpu::set_matmul_precision(*p);
  });
}

}  // namespace loom::python
