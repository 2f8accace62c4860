// Errors as values: loading, parsing, scheduling and export return Status or
// Result<T> so callers can act on them; messages name the file/field/tensor.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace loom {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,    // caller gave a bad value (flag, request field, token id)
  kNotFound,           // file, tensor, key or name does not exist
  kIoError,            // open/read/write/mmap failed
  kParseError,         // malformed JSON, safetensors header, tokenizer.json …
  kUnsupported,        // well-formed but not implemented (unknown model_type …)
  kOutOfRange,         // index or range beyond bounds
  kResourceExhausted,  // memory budget, queue full, pool empty
  kFailedPrecondition, // called in the wrong state (manager not running …)
  kCancelled,
  kTimeout,
  kInternal,           // a bug in loom
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "ParseError: model.safetensors: header length 999 beyond file size 12"
  std::string to_string() const;

  // Adds context in front of the message: "loading dir/x: <old message>".
  Status with_context(const std::string& context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {ErrorCode::kIoError, std::move(m)}; }
inline Status parse_error(std::string m) { return {ErrorCode::kParseError, std::move(m)}; }
inline Status unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status out_of_range(std::string m) { return {ErrorCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {ErrorCode::kFailedPrecondition, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

// Thrown where a value-returning API is inconvenient (graph building, CLI); carries
// the Status so a boundary can turn it back into a value.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(ErrorCode::kInternal, "Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { check(); return std::get<T>(v_); }
  const T& value() const& { check(); return std::get<T>(v_); }
  T&& value() && { check(); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  void check() const {
    if (!ok()) throw Error(std::get<Status>(v_));
  }
  std::variant<T, Status> v_;
};

// Throws loom::Error if the status is not OK.
inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace loom

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)

#define LOOM_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::loom::Status loom_status_ = (expr);       \
    if (!loom_status_.ok()) return loom_status_; \
  } while (0)

#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_CONCAT(loom_result_, __LINE__), lhs, expr)
