#include "loom/core/status.h"

namespace loom {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kIoError: return "IoError";
    case ErrorCode::kParseError: return "ParseError";
    case ErrorCode::kUnsupported: return "Unsupported";
    case ErrorCode::kOutOfRange: return "OutOfRange";
    case ErrorCode::kResourceExhausted: return "ResourceExhausted";
    case ErrorCode::kFailedPrecondition: return "FailedPrecondition";
    case ErrorCode::kCancelled: return "Cancelled";
    case ErrorCode::kTimeout: return "Timeout";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(error_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace loom
