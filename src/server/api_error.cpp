#include "server/api_error.h"

namespace mlxcel::server {

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", e}};
}

ApiError ApiError::bad_request(std::string message, std::string param) {
  return {400, "invalid_request_error", std::move(message), std::move(param), {}};
}
ApiError ApiError::unauthorized(std::string message) {
  return {401, "authentication_error", std::move(message), {}, "invalid_api_key"};
}
ApiError ApiError::not_found(std::string message, std::string param) {
  return {404, "invalid_request_error", std::move(message), std::move(param), "model_not_found"};
}
ApiError ApiError::too_many_requests(std::string message) {
  return {429, "rate_limit_error", std::move(message), {}, "queue_full"};
}
ApiError ApiError::unavailable(std::string message) {
  return {503, "server_error", std::move(message), {}, "unavailable"};
}
ApiError ApiError::internal(std::string message) {
  return {500, "server_error", std::move(message), {}, {}};
}

ApiError ApiError::from_error(const Error& e) {
  switch (e.category()) {
    case ErrorCategory::kBadInput: return bad_request(e.what());
    case ErrorCategory::kUnsupported: return bad_request(e.what());
    case ErrorCategory::kOutOfMemory: return unavailable(e.what());
    case ErrorCategory::kDeviceFault: return internal(std::string("device fault: ") + e.what());
    case ErrorCategory::kInternal: return internal(e.what());
  }
  return internal(e.what());
}

}  // namespace mlxcel::server
