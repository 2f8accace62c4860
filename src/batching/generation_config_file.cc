#include "loom/batching/generation_config_file.h"

#include <filesystem>

#include "loom/io/json_fields.h"
#include "loom/io/json_file.h"

namespace loom::batching {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

template <class T>
void set_if(std::optional<T> v, T& out) {
  if (v) out = std::move(*v);
}

}  // namespace

Result<GenerationConfig> generation_config_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) return parse_error(source + ": must be a JSON object, got " + io::describe_json(j));
  GenerationConfig c;
  c.source = source;
  const io::JsonFields f(j, source);
  LOOM_ASSIGN_OR_RETURN(c.max_new_tokens, f.int_field("max_new_tokens"));
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> max_length, f.int_field("max_length"));
  set_if(max_length, c.max_length);
  LOOM_ASSIGN_OR_RETURN(std::optional<bool> do_sample, f.bool_field("do_sample"));
  set_if(do_sample, c.do_sample);
  LOOM_ASSIGN_OR_RETURN(std::optional<double> temperature, f.number_field("temperature"));
  set_if(temperature, c.temperature);
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, f.int_field("top_k"));
  set_if(top_k, c.top_k);
  LOOM_ASSIGN_OR_RETURN(std::optional<double> top_p, f.number_field("top_p"));
  set_if(top_p, c.top_p);
  LOOM_ASSIGN_OR_RETURN(c.min_p, f.number_field("min_p"));
  LOOM_ASSIGN_OR_RETURN(std::optional<double> repetition_penalty, f.number_field("repetition_penalty"));
  set_if(repetition_penalty, c.repetition_penalty);
  LOOM_ASSIGN_OR_RETURN(std::optional<int64_t> sequences, f.int_field("num_return_sequences"));
  set_if(sequences, c.num_return_sequences);
  LOOM_ASSIGN_OR_RETURN(c.eos_token_ids, f.int_or_int_list("eos_token_id"));
  LOOM_ASSIGN_OR_RETURN(c.bos_token_id, f.int_field("bos_token_id"));
  LOOM_ASSIGN_OR_RETURN(c.pad_token_id, f.int_field("pad_token_id"));
  LOOM_ASSIGN_OR_RETURN(c.stop_strings, f.string_or_string_list("stop_strings"));
  LOOM_ASSIGN_OR_RETURN(c.seed, f.uint64_field("seed"));
  LOOM_ASSIGN_OR_RETURN(c.prompt_lookup_num_tokens, f.int_field("prompt_lookup_num_tokens"));
  if (Status s = c.validate(); !s.ok()) return Status(s.code(), source + ": " + s.message());
  return c;
}

Result<GenerationConfig> generation_config_from_file(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(json j, io::read_json_file(path));
  return generation_config_from_json(j, path);
}

Result<GenerationConfig> generation_config_from_dir_or_default(const std::string& dir) {
  std::error_code ec;
  // A single-file model (GGUF) has no generation_config.json: defaults, with the
  // special tokens the model's config inherits (inherit_special_tokens).
  if (fs::is_regular_file(dir, ec)) return GenerationConfig{};
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": no such directory");
  const fs::path file = fs::path(dir) / "generation_config.json";
  if (!fs::exists(file, ec)) return GenerationConfig{};
  return generation_config_from_file(file.string());
}

}  // namespace loom::batching
