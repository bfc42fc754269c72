#pragma once
// The local model store and its Hugging Face hub download.
// - MODEL on the command line is a folder path, OWNER/NAME, or a bare NAME (mlx-community/NAME).
//   A repo id resolves to ${MLXCEL_CACHE_DIR:-~/.cache/mlxcel}/models/OWNER/NAME, else to a
//   snapshot in the Hugging Face cache ($HF_HOME/hub/models--OWNER--NAME/snapshots/REV, HF_HOME
//   defaulting to ~/.cache/huggingface), so models fetched by huggingface-cli or mlx-lm are used
//   in place.
// - `mlxcel pull` lists the files with GET {HF_ENDPOINT}/api/models/{repo}/revision/{rev}
//   ?blobs=true (siblings with size and lfs.sha256) and fetches each from
//   {HF_ENDPOINT}/{repo}/resolve/{rev}/{path} into FILE.part, resuming with an HTTP Range
//   request, checking size and sha256, and renaming it into place when complete.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlxcel::platform {

// MLXCEL_CACHE_DIR, else ${XDG_CACHE_HOME:-~/.cache}/mlxcel (scripts/smollm2.sh caches there too)
std::string cache_dir();
std::string store_dir(const std::string& repo);  // cache_dir()/models/OWNER/NAME
std::string hub_endpoint();                      // HF_ENDPOINT or https://huggingface.co
bool offline_from_env();                         // HF_HUB_OFFLINE=1 (or true/yes)

// "OWNER/NAME" stays, "NAME" becomes "mlx-community/NAME"; throws bad_input for anything that
// cannot be a hub repo id (empty parts, "..", more than one '/').
std::string normalize_repo(const std::string& id);

// The snapshot folder of `repo` in the HF cache for `revision` (refs/REVISION, or REVISION as a
// commit), when one holds a config.json.
std::optional<std::string> hf_cache_snapshot(const std::string& repo,
                                             const std::string& revision = "main");

// A path that exists is returned as is. Otherwise MODEL is a repo id, found in the store or the
// HF cache; when it is in neither, a bad_input error says to run `mlxcel pull REPO`.
std::string resolve_model(const std::string& model);

struct StoredModel {
  std::string repo, path, source;  // source: "mlxcel" or "hf cache"
  std::uint64_t bytes = 0;
  std::string revision;
  bool complete = true;  // false: a pull was interrupted (.part files remain)
};
std::vector<StoredModel> list_models();
// Deletes the store's copy of `repo` (never the HF cache's, which other tools own). Returns the
// bytes freed; throws bad_input when the store has no such model.
std::uint64_t remove_model(const std::string& repo);

struct PullOptions {
  std::string repo;  // normalized
  std::string revision = "main";
  bool offline = false;
  int jobs = 4;           // files downloaded at once
  bool progress = false;  // a progress bar on stderr (a tty)
  bool quiet = false;
};
// Downloads (or finds) the model; returns its folder. Errors (bad_input for 401/404 and what the
// user can fix, internal for the rest) name the repo, the URL and what to do.
std::string pull_model(const PullOptions& o);

}  // namespace mlxcel::platform
