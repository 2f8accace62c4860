// OpenAI's error object, {"error": {"message", "type", "param", "code"}}, and the
// HTTP status it goes out with. Every failure a route reports is one of these.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"

namespace loom::serve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty → null
  std::string code;   // empty → null

  nlohmann::ordered_json to_json() const;
};

// 400: a field of the request is missing, of the wrong type or out of range.
ApiError bad_field(const std::string& param, const std::string& message);
// A loom Status from the engine, mapped to the HTTP status that fits its code.
ApiError from_status(const Status& s, const std::string& param = "");

}  // namespace loom::serve
