// ConversionPlan: running a compiled plan forwards (load) and backwards (save).
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "loom/core/logging.h"
#include "loom/weights/conversion_plan.h"

namespace loom {
namespace {

std::string quote(const std::string& s) { return "'" + s + "'"; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  s = quote(sources[0][0].name) + (n > 1 ? " (+" + std::to_string(n - 1) + ")" : "") + " → ";
  n = 0;
  for (const auto& slot : targets) n += slot.size();
  s += quote(targets[0][0].name) + (n > 1 ? " (+" + std::to_string(n - 1) + ")" : "");
  s += ": " + describe_chain(ops) + " [" + rule_description + "]";
  return s;
}

ParamSource params_from(const std::map<std::string, Tensor>& params) {
  return [&params](const std::string& name) -> Result<Tensor> {
    auto it = params.find(name);
    if (it == params.end()) return not_found("no parameter " + quote(name));
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
  return s;
}

Result<LoadStats> ConversionPlan::load(const Checkpoint& checkpoint, const ParamSink& sink) const {
  // The plan was validated against headers; make sure these are the same ones.
  for (const SourceTensor& st : source_.tensors) {
    const TensorInfo* info = checkpoint.find(st.name);
    if (!info || info->dtype != st.dtype || info->shape != st.shape)
      return failed_precondition("checkpoint " + checkpoint.dir() + ": tensor " + quote(st.name) +
                                 (info ? " is " + std::string(dtype_name(info->dtype)) + shape_to_string(info->shape)
                                       : std::string(" is missing")) +
                                 ", not what the conversion plan was compiled for");
  }
  LoadStats stats;
  for (const ConversionGroup& g : groups_) {
    TensorBundle bundle;
    for (const auto& slot : g.sources) {
      std::vector<Tensor> items;
      for (const PlanTensor& t : slot) {
        LOOM_ASSIGN_OR_RETURN(Tensor v, checkpoint.get(t.name));
        items.push_back(std::move(v));
      }
      bundle.push_back(std::move(items));
    }
    uint64_t bytes = 0;
    try {
      for (const ConversionOp& op : g.ops) bundle = apply_op(op, bundle, &bytes);
    } catch (const Error& e) {
      return e.status().with_context(g.describe());
    }
    for (size_t j = 0; j < g.targets.size(); ++j) {
      for (size_t k = 0; k < g.targets[j].size(); ++k) {
        Tensor t = std::move(bundle[j][k]);
        if (t.dtype() != g.target_model_dtypes[j][k]) {
          t = t.to(g.target_model_dtypes[j][k]);
          bytes += t.nbytes();
        }
        if (bytes == 0)
          ++stats.zero_copy_params;
        else
          ++stats.materialized_params;
        LOOM_RETURN_IF_ERROR(sink(g.targets[j][k].name, std::move(t)));
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

Result<NamedTensors> ConversionPlan::reverse(const ParamSource& params, const Checkpoint* carry_unused) const {
  std::map<std::string, Tensor> out;
  for (const ConversionGroup& g : groups_) {
    TensorBundle bundle;
    for (size_t j = 0; j < g.targets.size(); ++j) {
      std::vector<Tensor> items;
      for (const PlanTensor& t : g.targets[j]) {
        LOOM_ASSIGN_OR_RETURN(Tensor v, params(t.name));
        if (!v.defined() || v.shape() != t.shape)
          return invalid_argument("saving " + g.describe() + ": parameter " + quote(t.name) + " is " +
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
          return internal_error("saving " + g.describe() + ": " + quote(s.name) + " came back as " +
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
  if (ends_with(out_path, ".safetensors")) {
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
