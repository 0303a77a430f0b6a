#include "core/status.h"

namespace h3 {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kInvalidFile: return "invalid file";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kOutOfMemory: return "out of memory";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kCancelled: return "cancelled";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (ok_) return "ok";
  return std::string(error_code_name(code_)) + ": " + message_;
}

}  // namespace h3
