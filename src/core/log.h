#pragma once
// Process-wide logger (one of the two allowed globals). Writes to stderr; level from
// MLXCEL_LOG=debug|info|warn|error or set_log_level().
#include <cstdint>
#include <sstream>
#include <string>

namespace mlxcel {

enum class LogLevel : std::uint8_t { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

#define MLXCEL_LOG(level, expr)                                       \
  do {                                                                \
    if ((level) >= ::mlxcel::log_level()) {                           \
      std::ostringstream mlxcel_log_os_;                              \
      mlxcel_log_os_ << expr;                                         \
      ::mlxcel::log_message((level), mlxcel_log_os_.str());           \
    }                                                                 \
  } while (0)
#define LOG_DEBUG(expr) MLXCEL_LOG(::mlxcel::LogLevel::kDebug, expr)
#define LOG_INFO(expr) MLXCEL_LOG(::mlxcel::LogLevel::kInfo, expr)
#define LOG_WARN(expr) MLXCEL_LOG(::mlxcel::LogLevel::kWarn, expr)
#define LOG_ERROR(expr) MLXCEL_LOG(::mlxcel::LogLevel::kError, expr)

}  // namespace mlxcel
