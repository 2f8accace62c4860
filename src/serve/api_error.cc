#include "serve/api_error.h"

namespace loom::serve {

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json e = {{"message", message},
                      {"type", type},
                      {"param", param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param)},
                      {"code", code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code)}};
  return {{"error", e}};
}

ApiError bad_field(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

ApiError from_status(const Status& s, const std::string& param) {
  ApiError e;
  e.message = s.message();
  e.param = param;
  switch (s.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kParseError:
    case ErrorCode::kUnsupported:
      e.status = 400;
      break;
    case ErrorCode::kNotFound:
      e.status = 404;
      e.code = "not_found";
      break;
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kTimeout:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      break;
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kCancelled:
      e.status = 503;
      e.type = "service_unavailable";
      break;
    default:
      e.status = 500;
      e.type = "internal_error";
      break;
  }
  return e;
}

}  // namespace loom::serve
