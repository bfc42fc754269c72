#include "core/error.h"

namespace mlxcel {

std::string_view category_name(ErrorCategory c) {
  switch (c) {
    case ErrorCategory::kBadInput: return "bad_input";
    case ErrorCategory::kUnsupported: return "unsupported";
    case ErrorCategory::kOutOfMemory: return "out_of_memory";
    case ErrorCategory::kDeviceFault: return "device_fault";
    case ErrorCategory::kInternal: return "internal";
  }
  return "internal";
}

Error::Error(ErrorCategory category, const std::string& message)
    : std::runtime_error(message), category_(category) {}

void throw_error(ErrorCategory category, const std::string& message) {
  throw Error(category, message);
}

}  // namespace mlxcel
