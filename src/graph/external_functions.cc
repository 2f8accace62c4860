#include "loom/graph/external_functions.h"

#include <map>
#include <mutex>

#include "loom/graph/external_call_abi.h"

namespace loom::graph {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, ExternalFunction> by_key;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: plugin code may run during static teardown
  return *r;
}

}  // namespace

bool is_known_external_signature(const std::string& signature) {
  return signature == LOOM_CALL_RMS_NORM_F32_V1 || signature == LOOM_CALL_SILU_AND_MUL_F32_V1 ||
         signature == LOOM_CALL_LINEAR_T_F32_V1 || signature == LOOM_CALL_ADD_RMS_NORM_F32_V1;
}

Status register_external_function(ExternalFunction fn) {
  if (fn.key.empty()) return invalid_argument("external function: empty key");
  if (!fn.entry) return invalid_argument("external function '" + fn.key + "': null entry point");
  if (!is_known_external_signature(fn.signature))
    return unsupported("external function '" + fn.key + "': calling convention '" + fn.signature +
                       "' is not one loom can call (" LOOM_CALL_RMS_NORM_F32_V1 ", " LOOM_CALL_SILU_AND_MUL_F32_V1
                       ", " LOOM_CALL_LINEAR_T_F32_V1 ", " LOOM_CALL_ADD_RMS_NORM_F32_V1 ")");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_key.find(fn.key);
  if (it != r.by_key.end()) {
    if (it->second.entry != fn.entry || it->second.signature != fn.signature)
      return invalid_argument("external function '" + fn.key + "' is already registered with another entry point");
    return Status::Ok();
  }
  r.by_key.emplace(fn.key, std::move(fn));
  return Status::Ok();
}

Result<ExternalFunction> find_external_function(const std::string& key) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_key.find(key);
  if (it == r.by_key.end())
    return not_found("external function '" + key + "' is not registered in this process (graphs calling plugin "
                     "kernels run only where the model that recorded them was loaded)");
  return it->second;
}

}  // namespace loom::graph
