#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace mlxcel {

namespace fs = std::filesystem;
using nlohmann::json;

// Reference implementation's and MLX's bound on the JSON header.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int kMaxJsonDepth = 8;
constexpr std::size_t kMaxRank = 32;
// Tensors in one file: real shards hold hundreds to a few thousand; the largest checkpoints have
// under 100k tensors in all. The cap bounds parse time and memory for a hostile header.
constexpr std::size_t kMaxEntries = 262'144;

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  std::size_t len = 0;
  std::vector<std::uint8_t> owned;
  ~Mapping() {
    if (addr != nullptr && addr != MAP_FAILED) munmap(addr, len);
  }
};

namespace {

[[noreturn]] void bad(const std::string& file, const std::string& msg) {
  throw_error(ErrorCategory::kBadInput, file + ": " + msg);
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(const std::uint8_t* s, std::size_t n, std::size_t* bad_at) {
  std::size_t i = 0;
  while (i < n) {
    const std::uint8_t c = s[i];
    std::size_t len;
    std::uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      *bad_at = i;
      return false;
    }
    if (i + len > n) {
      *bad_at = i;
      return false;
    }
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        *bad_at = i;
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      *bad_at = i;
      return false;
    }
    i += len;
  }
  return true;
}

struct JsonAbort : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct JsonSyntax : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A SAX handler over nlohmann's DOM builder that rejects duplicate keys in any object, bounds the
// nesting depth and the number of tensors. (nlohmann's callback parser would do the same checks,
// but its end_object scans the parent container, which makes a header of n tensors O(n^2).)
class StrictSax {
 public:
  explicit StrictSax(json& out) : dom_(out, /*allow_exceptions=*/false) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool key(json::string_t& k) {
    if (!keys_.empty() && !keys_.back().insert(k).second)
      throw JsonAbort("duplicate key \"" + k + "\"");
    if (keys_.size() == 1 && k != "__metadata__" && ++tensors_ > kMaxEntries)
      throw JsonAbort("more than " + std::to_string(kMaxEntries) + " tensors in one file");
    return dom_.key(k);
  }
  bool start_object(std::size_t n) {
    deeper();
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    deeper();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    throw JsonSyntax(ex.what());
  }

 private:
  void deeper() {
    if (++depth_ > kMaxJsonDepth)
      throw JsonAbort("JSON nesting deeper than " + std::to_string(kMaxJsonDepth));
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::set<std::string>> keys_;
  std::size_t tensors_ = 0;
  int depth_ = 0;
};

json parse_strict_json(const char* begin, const char* end) {
  json j;
  StrictSax sax(j);
  json::sax_parse(begin, end, &sax);
  return j;
}

bool known_unsupported_dtype(const std::string& s) {
  static const char* kNames[] = {"F4", "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"};
  for (const char* n : kNames)
    if (s == n) return true;
  return false;
}

std::uint64_t get_u64(const json& v, const std::string& file, const std::string& what) {
  if (!v.is_number_integer()) bad(file, what + " must be a non-negative integer");
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  const std::int64_t s = v.get<std::int64_t>();
  if (s < 0) bad(file, what + " is negative (" + std::to_string(s) + ")");
  return static_cast<std::uint64_t>(s);
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  // Look before opening: open() on a FIFO blocks until a writer appears, and a device could be
  // endless. O_NONBLOCK covers a swap between the stat and the open.
  struct stat pre {};
  if (::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode))
    bad(path,
        "not a regular file (a FIFO, device or directory); a shard must be a plain .safetensors "
        "file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw_error(ErrorCategory::kBadInput, path + ": cannot open (" + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    bad(path,
        "not a regular file (a FIFO, device or directory); a shard must be a plain .safetensors "
        "file");
  }
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->path_ = path;
  f->map_ = std::make_shared<Mapping>();
  f->size_ = static_cast<std::uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* a = mmap(nullptr, static_cast<std::size_t>(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (a == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      bad(path, std::string("mmap failed (") + std::strerror(e) + ")");
    }
    f->map_->addr = a;
    f->map_->len = static_cast<std::size_t>(f->size_);
    f->base_ = static_cast<const std::uint8_t*>(a);
  }
  ::close(fd);
  f->parse();
  return f;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::from_bytes(std::vector<std::uint8_t> bytes,
                                                             const std::string& name) {
  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  f->path_ = name;
  f->map_ = std::make_shared<Mapping>();
  f->map_->owned = std::move(bytes);
  f->size_ = f->map_->owned.size();
  f->base_ = f->map_->owned.data();
  f->parse();
  return f;
}

void SafetensorsFile::parse() {
  const std::string& file = path_;
  if (size_ < 8) {
    bad(file, "file is " + std::to_string(size_) + " bytes, too short for a safetensors header (truncated?)");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
  if (n > kMaxHeaderBytes) {
    bad(file, "header length " + std::to_string(n) + " exceeds the 100000000-byte limit (not a safetensors file?)");
  }
  if (n > size_ - 8) {
    bad(file, "header length " + std::to_string(n) + " runs past the end of the " + std::to_string(size_) +
                  "-byte file (truncated?)");
  }
  if (n < 2) bad(file, "header of " + std::to_string(n) + " bytes cannot hold a JSON object");
  header_size_ = n;
  data_size_ = size_ - 8 - n;
  const auto* h = base_ + 8;
  if (h[0] != '{') bad(file, "header does not start with '{'");
  std::size_t bad_at = 0;
  if (!valid_utf8(h, static_cast<std::size_t>(n), &bad_at)) {
    bad(file, "header is not valid UTF-8 (byte " + std::to_string(bad_at) + " of the header)");
  }
  json j;
  try {
    j = parse_strict_json(reinterpret_cast<const char*>(h), reinterpret_cast<const char*>(h + n));
  } catch (const JsonAbort& e) {
    bad(file, std::string("invalid header: ") + e.what());
  } catch (const JsonSyntax& e) {
    bad(file, std::string("header is not valid JSON: ") + e.what());
  } catch (const json::exception& e) {
    bad(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(file, "header is not a JSON object");

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad(file, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(file, "__metadata__ value for \"" + m.key() + "\" is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor \"" + name + "\"";
    if (!v.is_object()) bad(file, what + ": entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) bad(file, what + ": missing or non-string \"dtype\"");
    if (sh == v.end() || !sh->is_array()) bad(file, what + ": missing or non-array \"shape\"");
    if (off == v.end() || !off->is_array() || off->size() != 2) {
      bad(file, what + ": \"data_offsets\" must be an array [begin, end]");
    }
    TensorEntry e;
    e.name = name;
    const std::string ds = dt->get<std::string>();
    if (!parse_dtype(ds, &e.dtype)) {
      if (known_unsupported_dtype(ds)) {
        throw_error(ErrorCategory::kUnsupported, file + ": " + what + " has dtype " + ds +
                                                     ", which mlxcel does not read; convert the checkpoint "
                                                     "with mlx_lm.convert");
      }
      bad(file, what + ": unknown dtype \"" + ds + "\"");
    }
    if (sh->size() > kMaxRank) bad(file, what + ": rank " + std::to_string(sh->size()) + " is too large");
    std::uint64_t numel = 1;
    for (const auto& d : *sh) {
      const std::uint64_t dim = get_u64(d, file, what + " shape entry");
      if (dim > static_cast<std::uint64_t>(INT64_MAX)) bad(file, what + ": dimension does not fit int64");
      e.shape.push_back(static_cast<std::int64_t>(dim));
      if (__builtin_mul_overflow(numel, dim, &numel) || numel > static_cast<std::uint64_t>(INT64_MAX)) {
        bad(file, what + ": shape " + shape_to_string(e.shape) + " overflows int64");
      }
    }
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(dtype_size(e.dtype)), &nbytes) ||
        nbytes > static_cast<std::uint64_t>(INT64_MAX)) {
      bad(file, what + ": byte size of shape " + shape_to_string(e.shape) + " overflows int64");
    }
    e.begin = get_u64((*off)[0], file, what + " data_offsets[0]");
    e.end = get_u64((*off)[1], file, what + " data_offsets[1]");
    if (e.end < e.begin) bad(file, what + ": data_offsets end < begin");
    if (e.end > data_size_) {
      bad(file, what + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                    ") run past the " + std::to_string(data_size_) + "-byte data buffer (truncated file?)");
    }
    if (e.end - e.begin != nbytes) {
      bad(file, what + ": " + std::string(ds) + " " + shape_to_string(e.shape) + " needs " + std::to_string(nbytes) +
                    " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    }
    entries_.push_back(std::move(e));
  }

  // The buffer must be covered exactly, in offset order.
  std::vector<const TensorEntry*> by_off;
  for (const auto& e : entries_) by_off.push_back(&e);
  std::sort(by_off.begin(), by_off.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t pos = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry* e : by_off) {
    if (e->begin < pos) {
      bad(file, "tensor \"" + e->name + "\" overlaps tensor \"" + (prev ? prev->name : std::string("?")) +
                    "\" (offset " + std::to_string(e->begin) + " < " + std::to_string(pos) + ")");
    }
    if (e->begin > pos) {
      bad(file, "hole in the data buffer: bytes [" + std::to_string(pos) + ", " + std::to_string(e->begin) +
                    ") before tensor \"" + e->name + "\" belong to no tensor");
    }
    pos = e->end;
    prev = e;
  }
  if (pos != data_size_) {
    bad(file, std::to_string(data_size_ - pos) + " trailing bytes after the last tensor belong to no tensor");
  }
  std::sort(entries_.begin(), entries_.end(), [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  for (std::size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (e == nullptr) bad(path_, "no tensor named \"" + name + "\"");
  return tensor(*e);
}

Tensor SafetensorsFile::tensor(const TensorEntry& e) const {
  const std::uint8_t* p = base_ + 8 + header_size_ + e.begin;
  const std::size_t n = static_cast<std::size_t>(e.nbytes());
  const std::size_t align = dtype_size(e.dtype);
  if (n > 0 && reinterpret_cast<std::uintptr_t>(p) % align == 0) {
    auto buf = Buffer::wrap(const_cast<std::uint8_t*>(p), n, cpu_device(), map_);
    return Tensor(buf, e.dtype, e.shape);
  }
  Tensor t = Tensor::empty(e.dtype, e.shape);
  if (n > 0) std::memcpy(t.raw(), p, n);
  return t;
}

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = dir;
  if (!fs::is_directory(dir)) {
    throw_error(ErrorCategory::kBadInput, dir + ": not a directory; pass the model folder (config.json + *.safetensors)");
  }
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> index_map;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    if (!fs::is_regular_file(index_path))
      throw_error(ErrorCategory::kBadInput,
                  index_path.string() + ": not a regular file (a FIFO or device?)");
    std::ifstream in(index_path);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      throw_error(ErrorCategory::kBadInput, index_path.string() + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw_error(ErrorCategory::kBadInput, index_path.string() + ": missing \"weight_map\" object");
    }
    std::set<std::string> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        throw_error(ErrorCategory::kBadInput, index_path.string() + ": weight_map entry \"" + it.key() + "\" is not a file name");
      }
      const std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." || f.empty()) {
        throw_error(ErrorCategory::kBadInput, index_path.string() + ": shard name \"" + f + "\" is not a plain file name");
      }
      files.insert(f);
      index_map[it.key()] = f;
    }
    shard_names.assign(files.begin(), files.end());
    for (const auto& de : fs::directory_iterator(dir)) {
      const std::string n = de.path().filename().string();
      if (n.rfind("model", 0) == 0 && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 &&
          files.count(n) == 0) {
        LOG_WARN(dir << ": " << n << " is not named by model.safetensors.index.json and is ignored "
                     "(mlx-lm would load it too; remove it if it is stale)");
      }
    }
  } else {
    for (const auto& de : fs::directory_iterator(dir)) {
      const std::string n = de.path().filename().string();
      if (de.is_regular_file() && n.rfind("model", 0) == 0 && n.size() > 12 &&
          n.compare(n.size() - 12, 12, ".safetensors") == 0) {
        shard_names.push_back(n);
      }
    }
    std::sort(shard_names.begin(), shard_names.end());
  }
  if (shard_names.empty()) {
    throw_error(ErrorCategory::kBadInput,
                dir + ": no model*.safetensors files; is this an MLX / Hugging Face model folder?");
  }
  for (const auto& n : shard_names) {
    const std::string p = (fs::path(dir) / n).string();
    if (!fs::exists(p)) {
      throw_error(ErrorCategory::kBadInput, p + ": shard named by model.safetensors.index.json is missing (incomplete download?)");
    }
    c.files_.push_back(SafetensorsFile::open(p));
  }
  for (std::size_t i = 0; i < c.files_.size(); ++i) {
    for (const auto& e : c.files_[i]->entries()) {
      auto [it, fresh] = c.where_.emplace(e.name, std::make_pair(i, &e));
      if (!fresh) {
        throw_error(ErrorCategory::kBadInput, dir + ": tensor \"" + e.name + "\" appears in both " +
                                                  c.files_[it->second.first]->path() + " and " + c.files_[i]->path());
      }
    }
  }
  for (const auto& [name, f] : index_map) {
    auto it = c.where_.find(name);
    const std::string shard = (fs::path(dir) / f).string();
    if (it == c.where_.end() || c.files_[it->second.first]->path() != shard) {
      throw_error(ErrorCategory::kBadInput, index_path.string() + ": \"" + name + "\" is mapped to " + f +
                                                " but that shard does not hold it");
    }
  }
  return c;
}

const TensorEntry& Checkpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw_error(ErrorCategory::kBadInput, dir_ + ": no tensor named \"" + name + "\"");
  return *it->second.second;
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw_error(ErrorCategory::kBadInput, dir_ + ": no tensor named \"" + name + "\"");
  return *files_[it->second.first];
}

Tensor Checkpoint::tensor(const std::string& name) const { return file_of(name).tensor(entry(name)); }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t t = 0;
  for (const auto& kv : where_) t += kv.second.second->nbytes();
  return t;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::uint64_t off = 0;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    MLXCEL_CHECK(seen.insert(name).second && name != "__metadata__", ErrorCategory::kInternal,
                 "write_safetensors: duplicate tensor name " + name);
    const std::uint64_t n = t.nbytes();
    h[name] = {{"dtype", std::string(dtype_name(t.dtype()))}, {"shape", t.shape()}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8 != 0) hs.push_back(' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_error(ErrorCategory::kBadInput, tmp + ": cannot write");
    std::uint8_t len[8];
    std::uint64_t L = hs.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(L >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    for (const auto& kv : tensors) {
      const Tensor c = kv.second.contiguous();
      out.write(static_cast<const char*>(c.raw()), static_cast<std::streamsize>(c.nbytes()));
    }
    if (!out) throw_error(ErrorCategory::kBadInput, tmp + ": write failed (disk full?)");
  }
  fs::rename(tmp, path);
}

}  // namespace mlxcel
