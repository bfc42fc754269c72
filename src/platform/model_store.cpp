#include "platform/model_store.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "platform/store_util.h"

namespace mlxcel::platform {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string home() {
  const char* h = std::getenv("HOME");
  return h && *h ? h : "/tmp";
}

std::string env_or(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

std::uint64_t folder_bytes(const fs::path& p) {
  std::uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(p, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec)) n += it->file_size(ec);  // follows HF cache symlinks to blobs
  return n;
}

}  // namespace

std::string cache_dir() {
  return env_or("MLXCEL_CACHE_DIR", env_or("XDG_CACHE_HOME", home() + "/.cache") + "/mlxcel");
}
std::string store_dir(const std::string& repo) { return cache_dir() + "/models/" + repo; }
std::string hub_endpoint() {
  std::string e = env_or("HF_ENDPOINT", "https://huggingface.co");
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}
bool offline_from_env() {
  const std::string v = env_or("HF_HUB_OFFLINE", "");
  return v == "1" || v == "true" || v == "TRUE" || v == "yes" || v == "ON" || v == "on";
}

std::string normalize_repo(const std::string& id) {
  const std::string r = id.find('/') == std::string::npos ? "mlx-community/" + id : id;
  const auto slash = r.find('/');
  const std::string owner = r.substr(0, slash), name = r.substr(slash + 1);
  auto ok = [](const std::string& s) {
    if (s.empty() || s == "." || s == ".." || s.size() > 96) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
  };
  if (!ok(owner) || !ok(name))
    fail("'" + id +
         "' is not a model folder or a Hugging Face repo id (OWNER/NAME, or NAME for "
         "mlx-community/NAME; letters, digits, '-', '_' and '.')");
  return r;
}

std::optional<std::string> hf_cache_snapshot(const std::string& repo, const std::string& revision) {
  const std::string hf_home =
      env_or("HF_HOME", env_or("XDG_CACHE_HOME", home() + "/.cache") + "/huggingface");
  const std::string hub = env_or("HF_HUB_CACHE", hf_home + "/hub");
  std::string flat = repo;
  std::replace(flat.begin(), flat.end(), '/', '-');
  const fs::path base = fs::path(hub) / ("models--" + repo.substr(0, repo.find('/')) + "--" +
                                         repo.substr(repo.find('/') + 1));
  std::string commit = revision;
  if (std::ifstream ref(base / "refs" / revision); ref) std::getline(ref, commit);
  const fs::path snap = base / "snapshots" / commit;
  if (is_model_folder(snap)) return snap.string();
  return std::nullopt;
}

std::string resolve_model(const std::string& model) {
  std::error_code ec;
  if (fs::exists(model, ec)) return model;
  // Something that looks like a path (./x, /x, x/y/z, ~/x) but does not exist is a typo, not a
  // repo id.
  const bool pathish = model.empty() || model[0] == '.' || model[0] == '/' || model[0] == '~' ||
                       std::count(model.begin(), model.end(), '/') > 1;
  if (pathish) fail(model + ": the model folder does not exist");
  const std::string repo = normalize_repo(model);
  const std::string local = store_dir(repo);
  if (is_model_folder(local) && !fs::exists(fs::path(local) / ".incomplete", ec)) return local;
  if (auto snap = hf_cache_snapshot(repo)) return *snap;
  fail(model + " is not a folder here and " + repo + " is not downloaded (looked in " + local +
       " and the Hugging Face cache): run `mlxcel pull " + repo + "`");
}

std::vector<StoredModel> list_models() {
  std::vector<StoredModel> out;
  std::error_code ec;
  const fs::path root = fs::path(cache_dir()) / "models";
  for (const auto& owner : fs::directory_iterator(root, ec)) {
    if (!owner.is_directory()) continue;
    for (const auto& m : fs::directory_iterator(owner.path(), ec)) {
      if (!m.is_directory()) continue;
      StoredModel s;
      s.repo = owner.path().filename().string() + "/" + m.path().filename().string();
      s.path = m.path().string();
      s.source = "mlxcel";
      s.bytes = folder_bytes(m.path());
      s.complete = !fs::exists(m.path() / ".incomplete", ec);
      if (std::ifstream mf(m.path() / kManifest); mf) {
        json j = json::parse(mf, nullptr, false);
        if (j.is_object()) s.revision = j.value("commit", j.value("revision", ""));
      }
      out.push_back(s);
    }
  }
  const std::string hf_home =
      env_or("HF_HOME", env_or("XDG_CACHE_HOME", home() + "/.cache") + "/huggingface");
  for (const auto& e : fs::directory_iterator(env_or("HF_HUB_CACHE", hf_home + "/hub"), ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("models--", 0) != 0) continue;
    const std::string rest = n.substr(8);
    const auto sep = rest.find("--");
    if (sep == std::string::npos) continue;
    const std::string repo = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    if (auto snap = hf_cache_snapshot(repo)) {
      StoredModel s;
      s.repo = repo;
      s.path = *snap;
      s.source = "hf cache";
      s.bytes = folder_bytes(*snap);
      s.revision = fs::path(*snap).filename().string();
      out.push_back(s);
    }
  }
  std::sort(out.begin(), out.end(), [](const StoredModel& a, const StoredModel& b) {
    return a.repo != b.repo ? a.repo < b.repo : a.source < b.source;
  });
  return out;
}

std::uint64_t remove_model(const std::string& repo_in) {
  const std::string repo = normalize_repo(repo_in);
  const fs::path dir = store_dir(repo);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::string hint;
    if (auto snap = hf_cache_snapshot(repo))
      hint = "; it is in the Hugging Face cache (" + *snap +
             "), which mlxcel does not delete: use `huggingface-cli delete-cache`";
    fail(repo + " is not in the mlxcel store (" + dir.string() + ")" + hint);
  }
  const std::uint64_t bytes = folder_bytes(dir);
  fs::remove_all(dir, ec);
  if (ec) fail("cannot delete " + dir.string() + ": " + ec.message());
  // Drop the owner folder when it is now empty.
  fs::remove(dir.parent_path(), ec);
  return bytes;
}

}  // namespace mlxcel::platform
