#include "loom/batching/generation_output.h"

namespace loom::batching {

const char* request_status_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::kPending: return "PENDING";
    case RequestStatus::kPrefilling: return "PREFILLING";
    case RequestStatus::kDecoding: return "DECODING";
    case RequestStatus::kFinished: return "FINISHED";
    case RequestStatus::kFailed: return "FAILED";
  }
  return "PENDING";
}

}  // namespace loom::batching
