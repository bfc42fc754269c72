// `mlxcel pull`: the hub's file list, parallel resumable downloads with size and sha256 checks
// (see model_store.h for the URL layout).
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "platform/model_store.h"
#include "platform/sha256.h"
#include "platform/store_util.h"

namespace mlxcel::platform {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~CurlGlobal() { curl_global_cleanup(); }
};
void curl_init_once() { static CurlGlobal g; }

struct Easy {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  ~Easy() {
    if (headers) curl_slist_free_all(headers);
    if (h) curl_easy_cleanup(h);
  }
};

std::string escape_path(CURL* h, const std::string& s, bool keep_slash) {
  std::string out, seg;
  auto flush = [&]() {
    char* e = curl_easy_escape(h, seg.c_str(), static_cast<int>(seg.size()));
    out += e;
    curl_free(e);
    seg.clear();
  };
  for (char c : s) {
    if (c == '/' && keep_slash) {
      flush();
      out += '/';
    } else {
      seg += c;
    }
  }
  flush();
  return out;
}

void setup(Easy& e, const std::string& url) {
  curl_easy_setopt(e.h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e.h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(e.h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(e.h, CURLOPT_USERAGENT, "mlxcel");
  curl_easy_setopt(e.h, CURLOPT_CONNECTTIMEOUT, 30L);
  // A stalled transfer (under 1 KiB/s for 60 s) is an error, then resumed by the retry loop.
  curl_easy_setopt(e.h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(e.h, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(e.h, CURLOPT_NOSIGNAL, 1L);
  if (const char* t = std::getenv("HF_TOKEN"); t && *t)
    e.headers = curl_slist_append(e.headers, (std::string("Authorization: Bearer ") + t).c_str());
  if (e.headers) curl_easy_setopt(e.h, CURLOPT_HTTPHEADER, e.headers);
}

std::string network_error(const std::string& url, CURLcode rc) {
  return "cannot reach " + url + " (" + curl_easy_strerror(rc) +
         "): check the network or HF_ENDPOINT; models already downloaded run with --offline";
}

[[noreturn]] void http_fail(long status, const std::string& repo, const std::string& rev,
                            const std::string& url) {
  if (status == 401 || status == 403)
    fail(
        "the hub refused " + url + " (HTTP " + std::to_string(status) + "): " + repo +
        " is gated or private, or does not exist; if it exists, accept its terms on the model page "
        "and set HF_TOKEN to an access token (https://huggingface.co/settings/tokens)");
  if (status == 404)
    fail("not found: " + url + " (HTTP 404): check the repo id " + repo + " and the revision '" +
         rev + "'");
  fail("the hub answered HTTP " + std::to_string(status) + " for " + url + "; try again later");
}

size_t to_string_cb(char* p, size_t s, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, s * n);
  return s * n;
}

struct FileJob {
  std::string path;  // relative
  std::uint64_t size = 0;
  bool size_known = false;
  std::string sha256;
};

struct Progress {
  std::atomic<std::uint64_t> done{0};
  std::uint64_t total = 0;
};

struct WriteCtx {
  std::FILE* f = nullptr;
  Progress* progress = nullptr;
  int write_errno = 0;
  long status = 0;
  CURL* h = nullptr;
};

size_t write_cb(char* p, size_t s, size_t n, void* user) {
  auto* w = static_cast<WriteCtx*>(user);
  if (w->status == 0) curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->status);
  if (w->status >= 400) return s * n;  // an error body: not file content
  const size_t wrote = std::fwrite(p, 1, s * n, w->f);
  if (wrote != s * n) {
    w->write_errno = errno ? errno : EIO;
    return 0;  // aborts the transfer
  }
  w->progress->done += wrote;
  return wrote;
}

std::uint64_t file_size_or_0(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

// One file into dir/path via path.part; resumes what an earlier attempt left.
void download_file(const PullOptions& o, const fs::path& dir, const FileJob& job,
                   Progress& progress) {
  const fs::path dst = dir / job.path, part = dir / (job.path + ".part");
  std::error_code ec;
  fs::create_directories(dst.parent_path(), ec);
  Easy probe;
  const std::string url = hub_endpoint() + "/" + o.repo + "/resolve/" +
                          escape_path(probe.h, o.revision, false) + "/" +
                          escape_path(probe.h, job.path, true);
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    std::uint64_t have = file_size_or_0(part);
    if (job.size_known && have > job.size) {  // not a prefix of this file: start over
      fs::remove(part, ec);
      progress.done -= std::min<std::uint64_t>(progress.done, have);
      have = 0;
    }
    Easy e;
    setup(e, url);
    std::FILE* f = std::fopen(part.c_str(), have ? "ab" : "wb");
    if (!f) fail("cannot write " + part.string() + ": " + std::strerror(errno));
    WriteCtx w{f, &progress, 0, 0, e.h};
    curl_easy_setopt(e.h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e.h, CURLOPT_WRITEDATA, &w);
    if (have) curl_easy_setopt(e.h, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(have));
    const CURLcode rc = curl_easy_perform(e.h);
    long status = 0;
    curl_easy_getinfo(e.h, CURLINFO_RESPONSE_CODE, &status);
    const int close_rc = std::fclose(f);
    if (w.write_errno == ENOSPC || (close_rc != 0 && errno == ENOSPC))
      fail("disk full while writing " + part.string() + ": free space in " + dir.string() +
           " (or set MLXCEL_CACHE_DIR to a larger disk) and run the pull again; it resumes");
    if (w.write_errno) fail("cannot write " + part.string() + ": " + std::strerror(w.write_errno));
    if (rc == CURLE_OK && status == 416 && job.size_known && have == job.size) {
      // The .part already holds the whole file.
    } else if (rc == CURLE_OK && status >= 400) {
      http_fail(status, o.repo, o.revision, url);
    } else if (rc == CURLE_OK && have && status == 200) {
      // The server ignored the Range: what we appended is the whole file after the old prefix.
      fs::remove(part, ec);
      if (attempt < kAttempts) continue;
      fail(url + ": the server does not honour Range requests and the transfer keeps breaking");
    } else if (rc != CURLE_OK) {
      const bool network = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT ||
                           rc == CURLE_COULDNT_RESOLVE_PROXY;
      if (network && attempt == 1 && have == 0) fail(network_error(url, rc));
      if (attempt < kAttempts) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempt));
        continue;  // resume from what arrived
      }
      fail("download of " + job.path + " from " + url + " failed " + std::to_string(kAttempts) +
           " times (" + curl_easy_strerror(rc) + "); run the pull again to resume");
    }
    const std::uint64_t got = file_size_or_0(part);
    if (job.size_known && got != job.size) {
      if (got < job.size && attempt < kAttempts) continue;
      fs::remove(part, ec);
      fail(job.path + ": received " + std::to_string(got) + " bytes, the hub lists " +
           std::to_string(job.size) + "; run the pull again");
    }
    if (!job.sha256.empty()) {
      const std::string sum = sha256_file(part.string());
      if (sum != job.sha256) {
        fs::remove(part, ec);
        fail("checksum mismatch for " + o.repo + "/" + job.path + ": sha256 " + sum +
             ", the hub lists " + job.sha256 +
             "; the file was removed (corrupted transfer or a "
             "changed revision): run the pull again");
      }
    }
    fs::rename(part, dst, ec);
    if (ec) fail("cannot move " + part.string() + " to " + dst.string() + ": " + ec.message());
    return;
  }
}

std::string human(std::uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  return buf;
}

}  // namespace

std::string pull_model(const PullOptions& o) {
  const fs::path dir = store_dir(o.repo);
  std::error_code ec;
  const bool complete = is_model_folder(dir) && !fs::exists(dir / ".incomplete", ec);
  if (o.offline) {
    if (complete) return dir.string();
    if (auto snap = hf_cache_snapshot(o.repo, o.revision)) return *snap;
    fail(o.repo +
         " is not downloaded and offline mode is on (--offline or HF_HUB_OFFLINE=1): "
         "run `mlxcel pull " +
         o.repo + "` with the network, or copy the folder to " + dir.string());
  }
  if (o.revision == "main" || o.revision.empty()) {
    // A model the Hugging Face tools already fetched is used in place (no second copy).
    if (!complete)
      if (auto snap = hf_cache_snapshot(o.repo, "main")) {
        if (!o.quiet)
          std::fprintf(stderr, "%s: found in the Hugging Face cache, using %s\n", o.repo.c_str(),
                       snap->c_str());
        return *snap;
      }
  }
  curl_init_once();
  Easy e;
  const std::string api = hub_endpoint() + "/api/models/" + o.repo + "/revision/" +
                          escape_path(e.h, o.revision, false) + "?blobs=true";
  setup(e, api);
  std::string body;
  curl_easy_setopt(e.h, CURLOPT_WRITEFUNCTION, to_string_cb);
  curl_easy_setopt(e.h, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(e.h, CURLOPT_TIMEOUT, 120L);
  const CURLcode rc = curl_easy_perform(e.h);
  if (rc != CURLE_OK) fail(network_error(api, rc));
  long status = 0;
  curl_easy_getinfo(e.h, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) http_fail(status, o.repo, o.revision, api);
  const json info = json::parse(body, nullptr, false);
  if (!info.is_object() || !info.contains("siblings") || !info["siblings"].is_array())
    fail(api + " did not answer with a model description (no 'siblings'); is HF_ENDPOINT a hub?");

  std::vector<FileJob> jobs;
  for (const auto& s : info["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
    FileJob j;
    j.path = s["rfilename"].get<std::string>();
    // Never write outside the model folder.
    if (j.path.empty() || j.path[0] == '/' || j.path.find("..") != std::string::npos)
      fail(api + " lists an unsafe file name '" + j.path + "'");
    if (s.contains("lfs") && s["lfs"].is_object()) {
      const auto& l = s["lfs"];
      if (l.contains("sha256") && l["sha256"].is_string()) j.sha256 = l["sha256"];
      if (l.contains("size") && l["size"].is_number_unsigned()) {
        j.size = l["size"];
        j.size_known = true;
      }
    }
    if (!j.size_known && s.contains("size") && s["size"].is_number_unsigned()) {
      j.size = s["size"];
      j.size_known = true;
    }
    jobs.push_back(j);
  }
  if (jobs.empty()) fail(o.repo + " at revision '" + o.revision + "' has no files");

  fs::create_directories(dir, ec);
  if (ec) fail("cannot create " + dir.string() + ": " + ec.message());
  std::ofstream(dir / ".incomplete") << o.revision << "\n";
  Progress progress;
  std::vector<FileJob> todo;
  std::uint64_t need = 0;
  for (const auto& j : jobs) {
    progress.total += j.size;
    if (j.size_known && file_size_or_0(dir / j.path) == j.size && fs::exists(dir / j.path)) {
      progress.done += j.size;  // complete from an earlier pull (checked when it was written)
      continue;
    }
    const std::uint64_t part = file_size_or_0(dir / (j.path + ".part"));
    progress.done += part;
    need += j.size > part ? j.size - part : 0;
    todo.push_back(j);
  }
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) == 0) {
    const std::uint64_t free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (need > free_bytes)
      fail("not enough disk space for " + o.repo + ": needs " + human(need) + " more, " +
           dir.string() + " has " + human(free_bytes) +
           " free; free some space or set "
           "MLXCEL_CACHE_DIR to a larger disk");
  }
  if (!o.quiet)
    std::fprintf(stderr, "pulling %s@%s: %zu files, %s (%zu to fetch) into %s\n", o.repo.c_str(),
                 o.revision.c_str(), jobs.size(), human(progress.total).c_str(), todo.size(),
                 dir.c_str());

  std::mutex mu;
  std::size_t next = 0;
  std::string first_error;
  std::atomic<bool> finished{false};
  auto worker = [&]() {
    while (true) {
      FileJob j;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next >= todo.size() || !first_error.empty()) return;
        j = todo[next++];
      }
      try {
        download_file(o, dir, j, progress);
        if (!o.quiet && !o.progress) {
          std::lock_guard<std::mutex> lock(mu);
          std::fprintf(stderr, "  %s (%s)\n", j.path.c_str(), human(j.size).c_str());
        }
      } catch (const Error& err) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = err.what();
        return;
      }
    }
  };
  std::thread bar;
  if (o.progress && !o.quiet)
    bar = std::thread([&]() {
      const auto t0 = std::chrono::steady_clock::now();
      while (!finished) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::uint64_t d = progress.done;
        const double frac = progress.total ? static_cast<double>(d) / progress.total : 1.0;
        const int width = 30, fill = static_cast<int>(frac * width);
        std::fprintf(stderr, "\r[%s%s] %5.1f%%  %s / %s  %.1f MiB/s ",
                     std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                     frac * 100, human(d).c_str(), human(progress.total).c_str(),
                     s > 0 ? d / 1048576.0 / s : 0.0);
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      std::fprintf(stderr, "\n");
    });
  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(1, std::min<int>(o.jobs, static_cast<int>(todo.size()))); ++i)
    workers.emplace_back(worker);
  for (auto& t : workers) t.join();
  finished = true;
  if (bar.joinable()) bar.join();
  if (!first_error.empty()) fail(first_error);

  json manifest{{"repo", o.repo},
                {"revision", o.revision},
                {"commit", info.value("sha", "")},
                {"endpoint", hub_endpoint()},
                {"files", jobs.size()}};
  std::ofstream(dir / kManifest) << manifest.dump(2) << "\n";
  fs::remove(dir / ".incomplete", ec);
  if (!o.quiet) std::fprintf(stderr, "done: %s\n", dir.c_str());
  return dir.string();
}

}  // namespace mlxcel::platform
