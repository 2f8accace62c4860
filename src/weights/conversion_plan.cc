// ConversionPlan: running a compiled plan forwards (load) and backwards (save).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "loom/core/logging.h"
#include "loom/io/quoted.h"
#include "loom/weights/conversion_plan.h"

namespace loom {
namespace {

using io::squote;


// The group's chain and casts on `bundle` (its sources); adds what it allocates to *bytes.
Result<TensorBundle> run_group(const ConversionGroup& g, TensorBundle bundle, uint64_t* bytes) {
  try {
    for (const ConversionOp& op : g.ops) bundle = apply_op(op, bundle, bytes);
  } catch (const Error& e) {
    return e.status().with_context(g.describe());
  }
  if (bundle.size() != g.targets.size()) return internal_error(g.describe() + ": the chain yields the wrong number of slots");
  for (size_t j = 0; j < g.targets.size(); ++j) {
    if (bundle[j].size() != g.targets[j].size())
      return internal_error(g.describe() + ": the chain yields the wrong number of tensors");
    for (size_t k = 0; k < g.targets[j].size(); ++k) {
      if (bundle[j][k].dtype() != g.target_model_dtypes[j][k]) {
        bundle[j][k] = bundle[j][k].to(g.target_model_dtypes[j][k]);
        *bytes += bundle[j][k].nbytes();
      }
    }
  }
  return bundle;
}

// Whether every parameter `g` writes is one the caller has.
bool writes_only(const ConversionGroup& g, const std::set<std::string>& have) {
  if (have.empty()) return false;
  for (const auto& slot : g.targets)
    for (const PlanTensor& t : slot)
      if (!have.count(t.name)) return false;
  return true;
}

Result<TensorBundle> read_sources(const ConversionGroup& g, const Checkpoint& checkpoint) {
  TensorBundle bundle;
  for (const auto& slot : g.sources) {
    std::vector<Tensor> items;
    for (const PlanTensor& t : slot) {
      LOOM_ASSIGN_OR_RETURN(Tensor v, checkpoint.get(t.name));
      items.push_back(std::move(v));
    }
    bundle.push_back(std::move(items));
  }
  return bundle;
}

}  // namespace

bool ConversionGroup::identity() const {
  if (!ops.empty()) return false;
  for (size_t j = 0; j < targets.size(); ++j)
    for (size_t k = 0; k < targets[j].size(); ++k)
      if (targets[j][k].dtype != target_model_dtypes[j][k]) return false;
  return true;
}

std::string ConversionGroup::describe() const {
  std::string s;
  size_t n = 0;
  for (const auto& slot : sources) n += slot.size();
  s = squote(sources[0][0].name) + (n > 1 ? " (+" + std::to_string(n - 1) + ")" : "") + " → ";
  n = 0;
  for (const auto& slot : targets) n += slot.size();
  s += squote(targets[0][0].name) + (n > 1 ? " (+" + std::to_string(n - 1) + ")" : "");
  s += ": " + describe_chain(ops) + " [" + rule_description + "]";
  return s;
}

ParamSource params_from(const std::map<std::string, Tensor>& params) {
  return [&params](const std::string& name) -> Result<Tensor> {
    auto it = params.find(name);
    if (it == params.end()) return not_found("no parameter " + squote(name));
    return it->second;
  };
}

void ConversionPlan::warn_unused(const std::string& what) const {
  if (unused_.empty()) return;
  std::string list;
  for (size_t i = 0; i < unused_.size() && i < 5; ++i) list += (i ? ", " : "") + unused_[i];
  log_warn(what + ": " + std::to_string(unused_.size()) + " checkpoint tensor(s) not used: " + list +
           (unused_.size() > 5 ? ", …" : ""));
}

std::string ConversionPlan::describe() const {
  std::string s;
  for (const auto& g : groups_) s += g.describe() + "\n";
  for (const auto& u : unused_) s += "unused: " + u + "\n";
  for (const auto& m : missing_) s += "missing: " + m + "\n";
  if (second_) s += "then:\n" + second_->describe();
  return s;
}

Result<LoadStats> ConversionPlan::load(const Checkpoint& checkpoint, const ParamSink& sink,
                                       const std::set<std::string>& have) const {
  // The plan was validated against headers; make sure these are the same ones.
  for (const SourceTensor& st : source_.tensors) {
    const TensorInfo* info = checkpoint.find(st.name);
    if (!info || info->dtype != st.dtype || info->shape != st.shape)
      return failed_precondition("checkpoint " + checkpoint.dir() + ": tensor " + squote(st.name) +
                                 (info ? " is " + std::string(dtype_name(info->dtype)) + shape_to_string(info->shape)
                                       : std::string(" is missing")) +
                                 ", not what the conversion plan was compiled for");
  }
  if (second_) return load_composed(checkpoint, sink, have);
  LoadStats stats;
  for (const ConversionGroup& g : groups_) {
    if (writes_only(g, have)) {
      for (const auto& slot : g.targets) stats.skipped_params += slot.size();
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(TensorBundle bundle, read_sources(g, checkpoint));
    uint64_t bytes = 0;
    LOOM_ASSIGN_OR_RETURN(bundle, run_group(g, std::move(bundle), &bytes));
    for (size_t j = 0; j < g.targets.size(); ++j) {
      for (size_t k = 0; k < g.targets[j].size(); ++k) {
        if (bytes == 0)
          ++stats.zero_copy_params;
        else
          ++stats.materialized_params;
        LOOM_RETURN_IF_ERROR(sink(g.targets[j][k].name, std::move(bundle[j][k])));
      }
    }
    ++stats.groups;
    stats.materialized_bytes += bytes;
    if (bytes > stats.peak_group_bytes) {
      stats.peak_group_bytes = bytes;
      stats.peak_group = g.describe();
    }
  }
  return stats;
}

Result<LoadStats> ConversionPlan::load_composed(const Checkpoint& checkpoint, const ParamSink& sink,
                                                const std::set<std::string>& have) const {
  const ConversionPlan& two = *second_;
  struct Route {
    size_t group, slot, item;
  };
  std::map<std::string, Route> route;  // first-stage output → where stage 2 reads it
  for (size_t gi = 0; gi < two.groups_.size(); ++gi)
    for (size_t j = 0; j < two.groups_[gi].sources.size(); ++j)
      for (size_t k = 0; k < two.groups_[gi].sources[j].size(); ++k) route[two.groups_[gi].sources[j][k].name] = {gi, j, k};
  // A stage-2 group collecting its inputs; `held` counts those stage 1 materialized.
  struct Waiting {
    TensorBundle bundle;
    size_t missing = 0;
    uint64_t held = 0;
  };
  std::map<size_t, Waiting> waiting;
  LoadStats stats;
  uint64_t buffered = 0;
  // A stage-1 Chunk whose pieces one stage-2 Concatenate joins again, in the
  // same order along the same dimension with the same sizes (Phi3's qkv_proj
  // under FusedQKV): the pair is the identity, so the checkpoint's tensor is
  // handed on as a view instead of being split and copied back together.
  const auto round_trip_of = [&](const ConversionGroup& g) -> const ConversionGroup* {
    if (g.ops.size() != 1 || g.ops[0].kind != ConversionOpKind::kChunk || g.sources.size() != 1 ||
        g.sources[0].size() != 1)
      return nullptr;
    const ConversionGroup* g2 = nullptr;
    for (size_t j = 0; j < g.targets.size(); ++j) {
      if (g.targets[j].size() != 1 || g.targets[j][0].dtype != g.target_model_dtypes[j][0]) return nullptr;
      auto r = route.find(g.targets[j][0].name);
      if (r == route.end() || r->second.slot != j || r->second.item != 0) return nullptr;
      const ConversionGroup* here = &two.groups_[r->second.group];
      if (g2 && here != g2) return nullptr;
      g2 = here;
    }
    if (!g2 || g2->sources.size() != g.targets.size() || g2->ops.size() != 1 ||
        g2->ops[0].kind != ConversionOpKind::kConcatenate || g2->ops[0].sizes != g.ops[0].sizes ||
        g2->targets.size() != 1 || g2->targets[0].size() != 1)
      return nullptr;
    const int rank = static_cast<int>(g.sources[0][0].shape.size());
    const auto norm = [rank](int d) { return d < 0 ? d + rank : d; };
    return norm(g.ops[0].dim) == norm(g2->ops[0].dim) ? g2 : nullptr;
  };
  const auto note = [&stats](uint64_t bytes, const ConversionGroup& g) {
    if (bytes > stats.peak_group_bytes) {
      stats.peak_group_bytes = bytes;
      stats.peak_group = g.describe();
    }
  };
  // Stage-2 groups writing only parameters the caller has; a stage-1 group whose
  // outputs all go to such groups is not run either.
  std::vector<bool> had(two.groups_.size());
  for (size_t gi = 0; gi < two.groups_.size(); ++gi) {
    had[gi] = writes_only(two.groups_[gi], have);
    if (had[gi])
      for (const auto& slot : two.groups_[gi].targets) stats.skipped_params += slot.size();
  }
  const auto feeds_only_had = [&](const ConversionGroup& g) {
    if (have.empty()) return false;
    for (const auto& slot : g.targets)
      for (const PlanTensor& t : slot)
        if (auto r = route.find(t.name); r == route.end() || !had[r->second.group]) return false;
    return true;
  };
  for (const ConversionGroup& g : groups_) {
    if (feeds_only_had(g)) continue;
    LOOM_ASSIGN_OR_RETURN(TensorBundle in, read_sources(g, checkpoint));
    if (const ConversionGroup* g2 = round_trip_of(g)) {
      Tensor t = std::move(in[0][0]);
      uint64_t bytes = 0;
      if (t.dtype() != g2->target_model_dtypes[0][0]) {
        t = t.to(g2->target_model_dtypes[0][0]);
        bytes = t.nbytes();
      }
      stats.groups += 2;
      stats.materialized_bytes += bytes;
      note(buffered + bytes, *g2);
      ++(bytes == 0 ? stats.zero_copy_params : stats.materialized_params);
      LOOM_RETURN_IF_ERROR(sink(g2->targets[0][0].name, std::move(t)));
      continue;
    }
    uint64_t bytes = 0;
    LOOM_ASSIGN_OR_RETURN(TensorBundle out, run_group(g, std::move(in), &bytes));
    ++stats.groups;
    stats.materialized_bytes += bytes;
    note(buffered + bytes, g);
    for (size_t j = 0; j < g.targets.size(); ++j) {
      for (size_t k = 0; k < g.targets[j].size(); ++k) {
        const std::string& name = g.targets[j][k].name;
        auto r = route.find(name);
        if (r == route.end()) return internal_error(g.describe() + ": no second-stage group reads " + name);
        if (had[r->second.group]) continue;  // its group's parameters are the caller's already
        const ConversionGroup& g2 = two.groups_[r->second.group];
        Waiting& w = waiting[r->second.group];
        if (w.bundle.empty()) {
          for (const auto& slot : g2.sources) {
            w.bundle.emplace_back(slot.size());
            w.missing += slot.size();
          }
        }
        Tensor& place = w.bundle[r->second.slot][r->second.item];
        if (place.defined()) return internal_error(g2.describe() + ": input " + name + " arrived twice");
        place = std::move(out[j][k]);
        --w.missing;
        if (bytes > 0) {
          w.held += place.nbytes();
          buffered += place.nbytes();
          stats.peak_buffered_bytes = std::max(stats.peak_buffered_bytes, buffered);
        }
        if (w.missing > 0) continue;
        // Its last input is here: run it now and let its inputs go.
        uint64_t bytes2 = 0;
        auto done = run_group(g2, std::move(w.bundle), &bytes2);
        if (!done.ok()) return done.status();
        ++stats.groups;
        stats.materialized_bytes += bytes2;
        note(buffered + bytes2, g2);
        for (size_t j2 = 0; j2 < g2.targets.size(); ++j2) {
          for (size_t k2 = 0; k2 < g2.targets[j2].size(); ++k2) {
            if (bytes2 == 0 && w.held == 0)
              ++stats.zero_copy_params;
            else
              ++stats.materialized_params;
            LOOM_RETURN_IF_ERROR(sink(g2.targets[j2][k2].name, std::move(done.value()[j2][k2])));
          }
        }
        buffered -= w.held;
        waiting.erase(r->second.group);
      }
    }
  }
  if (!waiting.empty())
    return internal_error(two.groups_[waiting.begin()->first].describe() + ": inputs never arrived from the first stage");
  return stats;
}

Result<NamedTensors> ConversionPlan::reverse(const ParamSource& params, const Checkpoint* carry_unused) const {
  if (!second_) return reverse_stage(params, carry_unused);
  // Final parameters → first-stage parameters → checkpoint tensors.
  LOOM_ASSIGN_OR_RETURN(NamedTensors mid, second_->reverse_stage(params, nullptr));
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : mid) by_name.emplace(name, std::move(t));
  return reverse_stage(params_from(by_name), carry_unused);
}

Result<NamedTensors> ConversionPlan::reverse_stage(const ParamSource& params, const Checkpoint* carry_unused) const {
  std::map<std::string, Tensor> out;
  for (const ConversionGroup& g : groups_) {
    TensorBundle bundle;
    for (size_t j = 0; j < g.targets.size(); ++j) {
      std::vector<Tensor> items;
      for (const PlanTensor& t : g.targets[j]) {
        LOOM_ASSIGN_OR_RETURN(Tensor v, params(t.name));
        if (!v.defined() || v.shape() != t.shape)
          return invalid_argument("saving " + g.describe() + ": parameter " + squote(t.name) + " is " +
                                  (v.defined() ? v.describe() : std::string("undefined")) + ", expected shape " +
                                  shape_to_string(t.shape));
        if (v.dtype() != t.dtype) v = v.to(t.dtype);  // back to the checkpoint's dtype
        items.push_back(std::move(v));
      }
      bundle.push_back(std::move(items));
    }
    try {
      for (const ConversionOp& op : reverse_chain(g.ops)) bundle = apply_op(op, bundle, nullptr);
    } catch (const Error& e) {
      return e.status().with_context("saving " + g.describe());
    }
    if (bundle.size() != g.sources.size())
      return internal_error("saving " + g.describe() + ": reversed chain yields the wrong number of slots");
    for (size_t i = 0; i < g.sources.size(); ++i) {
      if (bundle[i].size() != g.sources[i].size())
        return internal_error("saving " + g.describe() + ": reversed chain yields the wrong number of tensors");
      for (size_t k = 0; k < g.sources[i].size(); ++k) {
        const PlanTensor& s = g.sources[i][k];
        if (bundle[i][k].shape() != s.shape || bundle[i][k].dtype() != s.dtype)
          return internal_error("saving " + g.describe() + ": " + squote(s.name) + " came back as " +
                                bundle[i][k].describe());
        out[s.name] = std::move(bundle[i][k]);
      }
    }
  }
  if (carry_unused) {
    for (const std::string& name : unused_) {
      LOOM_ASSIGN_OR_RETURN(Tensor v, carry_unused->get(name));
      out[name] = std::move(v);
    }
  }
  NamedTensors ordered;
  for (const SourceTensor& st : source_.tensors) {
    auto it = out.find(st.name);
    if (it != out.end()) ordered.emplace_back(st.name, std::move(it->second));
  }
  return ordered;
}

Status ConversionPlan::save(const ParamSource& params, const std::string& out_path, const Checkpoint* carry_unused) const {
  LOOM_ASSIGN_OR_RETURN(NamedTensors tensors, reverse(params, carry_unused));
  if (out_path.ends_with(".safetensors")) {
    std::map<std::string, std::string> metadata;
    if (!source_.files.empty()) {
      auto it = source_.metadata.find(source_.files[0]);
      if (it != source_.metadata.end()) metadata = it->second;
    }
    return write_safetensors(out_path, tensors, metadata, SafetensorsOrder::kAsGiven);
  }
  std::error_code ec;
  std::filesystem::create_directories(out_path, ec);
  if (ec) return io_error("cannot create directory " + out_path + ": " + ec.message());
  std::map<std::string, std::string> file_of;
  for (const SourceTensor& st : source_.tensors) file_of[st.name] = st.file;
  std::map<std::string, NamedTensors> per_file;
  uint64_t total_size = 0;
  for (auto& [name, t] : tensors) {
    total_size += t.nbytes();
    per_file[file_of[name]].emplace_back(name, std::move(t));
  }
  for (const std::string& file : source_.files) {
    auto md = source_.metadata.find(file);
    const std::string path = (std::filesystem::path(out_path) / file).string();
    LOOM_RETURN_IF_ERROR(write_safetensors(path, per_file[file], md == source_.metadata.end() ? std::map<std::string, std::string>{} : md->second,
                                           SafetensorsOrder::kAsGiven));
  }
  if (source_.sharded) {
    // The shape Transformers writes: {"metadata": {"total_size": N}, "weight_map": {name: file}}, sorted keys.
    nlohmann::json index;
    index["metadata"]["total_size"] = total_size;
    index["weight_map"] = nlohmann::json::object();
    for (const auto& [file, ts] : per_file)
      for (const auto& [name, _] : ts) index["weight_map"][name] = file;
    const std::string path =
        (std::filesystem::path(out_path) / (source_.index_file.empty() ? "model.safetensors.index.json" : source_.index_file))
            .string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << index.dump(2) << "\n";
    if (!f) return io_error("cannot write " + path);
  }
  return Status::Ok();
}

}  // namespace loom
