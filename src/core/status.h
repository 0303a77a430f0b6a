// Errors in h3.cpp: one exception type inside the engine, one value type at the API edge.
//
// Internally every failure throws h3::Error with a message that names the file, tensor or flag
// and says what was expected; layers add context on the way up (Error::with_context). The public
// API (include/h3) and the CLI catch at their boundary and turn the exception into a Status, so a
// host program never sees an exception and the CLI never crashes on bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace h3 {

enum class ErrorCode {
  kInvalidArgument,  // bad flag, bad request, impossible size
  kInvalidFile,      // corrupt or unexpected file content
  kNotFound,         // missing file, component or tensor
  kIo,               // read/write failure from the OS
  kOutOfMemory,      // host or device allocation failed, or the memory plan does not fit
  kUnsupported,      // valid input the engine does not handle (GPU too old, dtype not implemented)
  kInternal,         // a broken invariant: a bug in h3.cpp
  kCancelled,        // the caller asked the generation to stop (a hook said so at a boundary)
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message)
      : std::runtime_error(message), code_(code), message_(std::move(message)) {}
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const char* what() const noexcept override { return message_.c_str(); }

  // Returns a copy whose message is "context: original message".
  Error with_context(const std::string& context) const {
    return Error(code_, context + ": " + message_);
  }

 private:
  ErrorCode code_;
  std::string message_;
};

// Value type for the public API and the CLI boundary.
class Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : ok_(false), code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }
  static Status from(const Error& e) { return Status(e.code(), e.message()); }
  bool is_ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  bool ok_ = true;
  ErrorCode code_ = ErrorCode::kInternal;
  std::string message_;
};

// Runs fn and converts any exception into a Status. std::bad_alloc becomes kOutOfMemory.
template <typename Fn>
Status capture_status(Fn&& fn) {
  try {
    fn();
    return Status::ok();
  } catch (const Error& e) {
    return Status::from(e);
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "out of host memory");
  } catch (const std::exception& e) {
    return Status(ErrorCode::kInternal, e.what());
  }
}

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append_all(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<<: str_cat("tensor ", name, " has ", n, " dims").
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append_all(os, args...);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, const Args&... args) {
  throw Error(code, str_cat(args...));
}

}  // namespace h3

// Checks an invariant on input; the message should say what was expected.
#define H3_CHECK(cond, code, ...)                 \
  do {                                            \
    if (!(cond)) ::h3::fail((code), __VA_ARGS__); \
  } while (0)

// Checks an internal invariant; failing means a bug in h3.cpp, not bad input.
#define H3_ASSERT(cond)                                                                              \
  do {                                                                                               \
    if (!(cond))                                                                                     \
      ::h3::fail(::h3::ErrorCode::kInternal, "internal error: ", #cond, " (", __FILE__, ":", __LINE__, \
                 ")");                                                                               \
  } while (0)
