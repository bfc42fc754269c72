#pragma once
// OpenAI-style API errors: an HTTP status plus the JSON body clients parse,
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}.
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mlxcel::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // empty -> null
  std::string code;   // empty -> null

  nlohmann::json body() const;
  static ApiError bad_request(std::string message, std::string param = {});
  static ApiError unauthorized(std::string message);
  static ApiError not_found(std::string message, std::string param = {});
  static ApiError too_many_requests(std::string message);
  static ApiError unavailable(std::string message);
  static ApiError internal(std::string message);
  // Maps an engine Error to the status a client should see.
  static ApiError from_error(const Error& e);
};

// Thrown by request parsing; carries the ApiError to send.
struct ApiException {
  ApiError error;
};

}  // namespace mlxcel::server
