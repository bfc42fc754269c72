#pragma once
// One exception type for the whole engine. The category tells callers (CLI exit codes, HTTP
// status, /health) what kind of failure it is; the message names the file / tensor / op / device
// and says what the user can do.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mlxcel {

enum class ErrorCategory : std::uint8_t {
  kBadInput = 0,     // malformed file, request or argument: the user must fix the input
  kUnsupported = 1,  // valid input that this build/backend cannot run
  kOutOfMemory = 2,  // host or device allocation failed
  kDeviceFault = 3,  // a GPU runtime call failed or the device stopped answering
  kInternal = 4,     // a bug in mlxcel
};

std::string_view category_name(ErrorCategory c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message);
  ErrorCategory category() const { return category_; }

 private:
  ErrorCategory category_;
};

[[noreturn]] void throw_error(ErrorCategory category, const std::string& message);

// Argument checks at API boundaries: MLXCEL_CHECK(cond, category, message-expression).
#define MLXCEL_CHECK(cond, category, msg)                   \
  do {                                                      \
    if (!(cond)) ::mlxcel::throw_error((category), (msg));  \
  } while (0)

}  // namespace mlxcel
