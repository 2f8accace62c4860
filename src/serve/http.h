// The server's own view of HTTP, so that only http_server.cc knows the HTTP
// library: a request with its body read, and a response that is either a body
// or a stream of server-sent events written after the headers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/api_error.h"

namespace loom::serve {

struct HttpRequest {
  std::string method, path, body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string request_id;                      // X-Request-Id, or one made up
  double received_time = 0;                    // wall seconds
  // False once the client has closed its connection.
  std::function<bool()> client_connected = [] { return true; };
};

// What a route reports for the request's log line.
struct RequestLog {
  int64_t prompt_tokens = -1, completion_tokens = -1;
  double ttft_seconds = -1;
  std::string outcome;  // finish reasons, "client disconnected", an error type
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // False once the client is gone (nothing more can be sent).
  virtual bool write(const std::string& data) = 0;
  virtual bool connected() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set: the body is this stream (text/event-stream), written after the headers.
  std::function<void(EventSink&)> stream;
  std::shared_ptr<RequestLog> log = std::make_shared<RequestLog>();
};

HttpResponse json_response(const nlohmann::ordered_json& body, int status = 200);
HttpResponse error_response(const ApiError& e);
// One server-sent event: "data: <json>\n\n".
std::string sse_event(const nlohmann::ordered_json& data);

}  // namespace loom::serve
