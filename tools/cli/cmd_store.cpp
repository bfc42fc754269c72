// The model store: `mlxcel pull OWNER/NAME [--revision R]`, `mlxcel list [--json]`,
// `mlxcel rm OWNER/NAME [--yes]` (platform/model_store.h does the work).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "platform/memory_plan.h"
#include "platform/model_store.h"
#include "tools/cli/args.h"
#include "tools/cli/command.h"

namespace mlxcel::cli {
namespace {

int cmd_pull(const std::vector<std::string>& args) {
  auto app =
      make_app("pull",
               "Downloads a model from the Hugging Face hub into the mlxcel store\n"
               "(${MLXCEL_CACHE_DIR:-~/.cache/mlxcel}/models/OWNER/NAME). Resumes an interrupted\n"
               "pull, checks sha256 where the hub lists it, reuses the Hugging Face cache.\n"
               "HF_TOKEN: access token for gated or private repos; HF_ENDPOINT: another hub.");
  std::string repo;
  platform::PullOptions o;
  bool quiet = false;
  app->add_option("repo", repo, "OWNER/NAME, or NAME for mlx-community/NAME")
      ->type_name("REPO")
      ->required();
  app->add_option("--revision", o.revision, "branch, tag or commit (default main)")->type_name("R");
  app->add_option("-j,--jobs", o.jobs, "files downloaded at once (default 4)")
      ->type_name("N")
      ->check(in_range(1, 64));
  app->add_flag("--offline", o.offline,
                "no network: only say where a downloaded copy is (also HF_HUB_OFFLINE=1)");
  app->add_flag("-q,--quiet", quiet, "print only the folder");
  if (!parse_args(*app, args)) return 0;
  o.repo = platform::normalize_repo(repo);
  o.offline = o.offline || platform::offline_from_env();
  o.quiet = quiet;
  o.progress = isatty(STDERR_FILENO) != 0;
  std::printf("%s\n", platform::pull_model(o).c_str());
  return 0;
}

int cmd_list(const std::vector<std::string>& args) {
  auto app =
      make_app("list", "Lists the models in the mlxcel store and in the Hugging Face cache.");
  bool as_json = false;
  app->add_flag("--json", as_json, "print JSON");
  if (!parse_args(*app, args)) return 0;
  const auto models = platform::list_models();
  if (as_json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& m : models)
      j.push_back({{"repo", m.repo},
                   {"path", m.path},
                   {"source", m.source},
                   {"bytes", m.bytes},
                   {"revision", m.revision},
                   {"complete", m.complete}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (models.empty()) {
    std::printf("no models yet (store: %s/models); `mlxcel pull OWNER/NAME` downloads one\n",
                platform::cache_dir().c_str());
    return 0;
  }
  std::printf("%-48s %-9s %11s  %s\n", "model", "source", "size", "path");
  for (const auto& m : models)
    std::printf("%-48s %-9s %11s  %s%s\n", m.repo.c_str(), m.source.c_str(),
                platform::human_bytes(m.bytes).c_str(), m.path.c_str(),
                m.complete ? "" : "  (incomplete: run `mlxcel pull` again)");
  return 0;
}

int cmd_rm(const std::vector<std::string>& args) {
  auto app =
      make_app("rm", "Deletes a model from the mlxcel store (never from the Hugging Face cache).");
  std::string repo;
  bool yes = false;
  app->add_option("repo", repo, "OWNER/NAME, or NAME for mlx-community/NAME")
      ->type_name("REPO")
      ->required();
  app->add_flag("-y,--yes", yes, "do not ask");
  if (!parse_args(*app, args)) return 0;
  const std::string r = platform::normalize_repo(repo);
  if (!yes) {
    if (!isatty(STDIN_FILENO))
      throw_error(ErrorCategory::kBadInput,
                  "rm: not a terminal to confirm on; pass --yes to delete " + r);
    std::printf("delete %s (%s)? [y/N] ", r.c_str(), platform::store_dir(r).c_str());
    std::fflush(stdout);
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      std::printf("kept\n");
      return 0;
    }
  }
  const std::uint64_t freed = platform::remove_model(r);
  std::printf("deleted %s (%s freed)\n", r.c_str(), platform::human_bytes(freed).c_str());
  return 0;
}

}  // namespace

MLXCEL_COMMAND("pull", "download a model from the Hugging Face hub into the model store", cmd_pull);
MLXCEL_COMMAND("list", "list downloaded models (mlxcel store and Hugging Face cache)", cmd_list);
MLXCEL_COMMAND("rm", "delete a model from the model store", cmd_rm);

}  // namespace mlxcel::cli
