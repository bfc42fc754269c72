#pragma once
// Helpers shared by the model store (model_store.cpp) and the hub download (hub_download.cpp).
#include <filesystem>
#include <string>

#include "core/error.h"

namespace mlxcel::platform {

[[noreturn]] inline void fail(const std::string& msg) {
  throw_error(ErrorCategory::kBadInput, msg);
}

// A folder is a model once its config.json is there (a pull writes it with the other files).
inline bool is_model_folder(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p / "config.json", ec);
}

// Written by a completed pull: repo, revision, commit, endpoint.
inline constexpr const char* kManifest = ".mlxcel-pull.json";

}  // namespace mlxcel::platform
