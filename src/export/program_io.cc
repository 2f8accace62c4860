#include "loom/export/program_io.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "loom/graph/graph_json.h"
#include "loom/io/safetensors.h"
#include "loom/io/safetensors_writer.h"

namespace loom::exporting {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string tensor_key(const std::string& name, graph::ValueKind kind) {
  return (kind == graph::ValueKind::kParameter ? "param:" : "const:") + name;
}

}  // namespace

Status save_program(const ExportedProgram& p, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("save_program: cannot create '" + dir + "': " + ec.message());
  NamedTensors tensors;
  std::set<std::string> keys;
  for (const graph::Value& v : p.graph.values()) {
    if (v.kind != graph::ValueKind::kParameter && v.kind != graph::ValueKind::kConstant) continue;
    const std::string key = tensor_key(v.name, v.kind);
    if (!keys.insert(key).second)
      return invalid_argument("save_program: two " + std::string(v.kind == graph::ValueKind::kParameter ? "parameters" : "constants") +
                              " are named '" + v.name + "'");
    if (dtype_is_quantized(v.tensor.dtype()))
      return unsupported("save_program: parameter '" + v.name + "' is " + std::string(dtype_name(v.tensor.dtype())) +
                         "; a program's weights are safetensors, which have no quantized block types (export ONNX or "
                         "portable, which dequantize, or load the model without --quantize)");
    tensors.emplace_back(key, v.tensor);
  }
  json j;
  j["format"] = kProgramFormat;
  j["format_version"] = kProgramFormatVersion;
  j["loom_version"] = LOOM_VERSION;
  j["graph"] = graph::graph_to_json(p.graph);
  j["signature"] = {{"inputs", p.input_names}, {"outputs", p.output_names}};
  json dims = json::object();
  for (const auto& [name, r] : p.dims) dims[name] = {{"min", r.min}, {"max", r.max}};
  j["dims"] = dims;
  j["metadata"] = p.metadata;
  LOOM_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / "weights.safetensors").string(), tensors,
                                         {{"format", kProgramFormat}}));
  for (const auto& [name, text] : p.files) {
    if (name.empty() || name.find('/') != std::string::npos || name == "program.json" || name == "weights.safetensors")
      return invalid_argument("save_program: side file name '" + name + "' is not a plain file name of its own");
    std::ofstream out(fs::path(dir) / name, std::ios::binary);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out) return io_error("save_program: cannot write '" + (fs::path(dir) / name).string() + "'");
  }
  const fs::path tmp = fs::path(dir) / "program.json.tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) return io_error("save_program: cannot write '" + tmp.string() + "'");
  }
  fs::rename(tmp, fs::path(dir) / "program.json", ec);
  if (ec) return io_error("save_program: cannot write '" + (fs::path(dir) / "program.json").string() + "': " + ec.message());
  return Status::Ok();
}

Result<ExportedProgram> load_program(const std::string& dir) {
  const fs::path json_path = fs::path(dir) / "program.json";
  std::ifstream in(json_path);
  if (!in) return not_found("load_program: no program.json in '" + dir + "'");
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return parse_error(json_path.string() + ": not a JSON object");
  if (j.value("format", "") != kProgramFormat)
    return parse_error(json_path.string() + ": not a loom program (format " + j.value("format", json("?")).dump() + ")");
  if (j.value("format_version", 0) != kProgramFormatVersion)
    return failed_precondition(json_path.string() + ": format version " + j.value("format_version", json(0)).dump() +
                               " is not the supported " + std::to_string(kProgramFormatVersion));
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsFile> weights,
                        SafetensorsFile::open((fs::path(dir) / "weights.safetensors").string()));
  ExportedProgram p;
  try {
    Result<graph::Graph> g = graph::graph_from_json(
        j.at("graph"), [&](const std::string& name, graph::ValueKind kind) { return weights->get(tensor_key(name, kind)); });
    if (!g.ok()) return Status(g.status().code(), json_path.string() + ": " + g.status().message());
    p.graph = std::move(*g);
    p.input_names = j.at("signature").at("inputs").get<std::vector<std::string>>();
    p.output_names = j.at("signature").at("outputs").get<std::vector<std::string>>();
    for (const auto& [name, r] : j.at("dims").items()) p.dims[name] = DimRange{r.at("min").get<int64_t>(), r.at("max").get<int64_t>()};
    p.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
  } catch (const json::exception& e) {
    return parse_error(json_path.string() + ": " + e.what());
  }
  for (const std::string& name : program_side_files()) {
    std::ifstream side(fs::path(dir) / name, std::ios::binary);
    if (side) p.files[name] = std::string(std::istreambuf_iterator<char>(side), {});
  }
  for (const std::string& name : p.input_names)
    if (p.graph.input(name) == graph::kNoValue)
      return parse_error(json_path.string() + ": signature input '" + name + "' is not a graph input");
  for (const std::string& name : p.output_names)
    if (p.graph.output(name) == graph::kNoValue)
      return parse_error(json_path.string() + ": signature output '" + name + "' is not a graph output");
  return p;
}

const std::vector<std::string>& program_side_files() {
  static const std::vector<std::string> names = {"config.json",           "generation_config.json",
                                                 "tokenizer.json",        "tokenizer_config.json",
                                                 "special_tokens_map.json", "chat_template.jinja"};
  return names;
}

bool is_program_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "program.json", ec);
}

Result<std::shared_ptr<models::Model>> load_program_model(const std::string& dir) {
  LOOM_ASSIGN_OR_RETURN(ExportedProgram p, load_program(dir));
  const std::string where = "program '" + dir + "'";
  if (p.metadata["dynamic"] != "true")
    return unsupported(where + " was exported with static sizes, so it runs only steps of exactly those sizes; "
                       "export it with dynamic shapes (the default) to generate from it");
  if (!p.files.count("config.json"))
    return not_found(where + " has no config.json next to program.json (export it again with this loom)");
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<models::Model> m, models::Model::from_step_graph(dir, std::move(p.graph)));
  const auto disagrees = [&](const char* key, int64_t have) {
    auto it = p.metadata.find(key);
    return it != p.metadata.end() && it->second != std::to_string(have);
  };
  if (disagrees("vocab_size", m->vocab_size()) || disagrees("num_layers", m->num_layers()))
    return invalid_argument(where + ": config.json (vocab_size " + std::to_string(m->vocab_size()) + ", " +
                            std::to_string(m->num_layers()) + " layers) is not the config the program was exported "
                            "from (vocab_size " + p.metadata["vocab_size"] + ", " + p.metadata["num_layers"] + " layers)");
  return m;
}

}  // namespace loom::exporting
