#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace mlxcel::gguf {

namespace {

// ggml's GGML_MAX_DIMS.
constexpr std::uint32_t kMaxRank = 4;
// Keys are at most 65535 bytes (docs/gguf.md).
constexpr std::uint64_t kMaxKeyBytes = 65535;
// Metadata array elements over the whole file: a 262k-entry vocabulary with scores and types is
// under a million; this bound keeps a hostile file from making the parser allocate gigabytes.
constexpr std::uint64_t kMaxArrayElements = std::uint64_t{1} << 24;

struct TypeRow {
  std::uint32_t id;
  TypeTraits traits;
};
// Block sizes and bytes per block from ggml.c `type_traits` (and docs/gguf.md).
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

[[noreturn]] void bad(const std::string& file, const std::string& msg) {
  throw_error(ErrorCategory::kBadInput, file + ": " + msg);
}

std::size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
      return 8;  // the smallest a string can be: its length
    case ValueType::kArray:
      return 12;  // element type and count
  }
  return 1;
}

bool known_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(ValueType::kF64); }

// Bounds-checked little-endian cursor over the file image.
class Cursor {
 public:
  Cursor(const std::uint8_t* base, std::uint64_t size, const std::string& file)
      : p_(base), n_(size), file_(file) {}
  std::uint64_t pos() const { return off_; }
  std::uint64_t left() const { return n_ - off_; }
  void need(std::uint64_t bytes, const char* what) const {
    if (bytes > left())
      bad(file_, std::string("truncated: ") + what + " at byte " + std::to_string(off_) +
                     " needs " + std::to_string(bytes) + " bytes, " + std::to_string(left()) +
                     " left");
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + off_, sizeof(T));
    off_ += sizeof(T);
    return v;
  }
  std::string string(const char* what, std::uint64_t max_len) {
    const auto len = read<std::uint64_t>(what);
    if (len > max_len)
      bad(file_, std::string(what) + " at byte " + std::to_string(off_ - 8) + " claims " +
                     std::to_string(len) + " bytes (limit " + std::to_string(max_len) + ")");
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + off_), static_cast<std::size_t>(len));
    off_ += len;
    return s;
  }

 private:
  const std::uint8_t* p_;
  std::uint64_t n_;
  std::uint64_t off_ = 0;
  const std::string& file_;
};

}  // namespace

const char* value_type_name(ValueType t) {
  static const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                 "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

const TypeTraits* type_traits(std::uint32_t id) {
  for (const auto& r : kTypes)
    if (r.id == id) return &r.traits;
  return nullptr;
}

const char* tensor_type_name(TensorType t) {
  const TypeTraits* tr = type_traits(static_cast<std::uint32_t>(t));
  return tr ? tr->name : "unknown";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

std::vector<std::int64_t> TensorInfo::shape() const {
  std::vector<std::int64_t> s;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it)
    s.push_back(static_cast<std::int64_t>(*it));
  return s;
}

struct File::Mapping {
  void* addr = nullptr;
  std::size_t len = 0;
  std::vector<std::uint8_t> owned;
  ~Mapping() {
    if (addr != nullptr && addr != MAP_FAILED) munmap(addr, len);
  }
};

File::~File() = default;

std::shared_ptr<File> File::open(const std::string& path) {
  std::shared_ptr<File> f(new File());
  f->path_ = path;
  f->map_ = std::make_unique<Mapping>();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    bad(path, "not a regular file");
  }
  f->size_ = static_cast<std::uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* a = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (a == MAP_FAILED) {
      ::close(fd);
      bad(path, std::string("cannot map: ") + std::strerror(errno));
    }
    f->map_->addr = a;
    f->map_->len = f->size_;
    f->base_ = static_cast<const std::uint8_t*>(a);
  }
  ::close(fd);
  f->parse();
  return f;
}

std::shared_ptr<File> File::from_bytes(std::vector<std::uint8_t> bytes, const std::string& name) {
  std::shared_ptr<File> f(new File());
  f->path_ = name;
  f->map_ = std::make_unique<Mapping>();
  f->map_->owned = std::move(bytes);
  f->base_ = f->map_->owned.data();
  f->size_ = f->map_->owned.size();
  f->parse();
  return f;
}

void File::parse() {
  const std::string& file = path_;
  if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) {
    if (size_ >= 4 && std::memcmp(base_, "FUGG", 4) == 0)
      bad(file, "big-endian GGUF files are not supported");
    bad(file, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  }
  Cursor c(base_, size_, file);
  c.read<std::uint32_t>("magic");
  version_ = c.read<std::uint32_t>("version");
  if (version_ == 1)
    bad(file, "GGUF version 1 is not supported (re-convert it with a current llama.cpp)");
  if (version_ != 2 && version_ != 3) {
    if (version_ != 0 && (version_ & 0xFFFF) == 0)
      bad(file,
          "GGUF version " + std::to_string(version_) + " looks byte-swapped (big-endian file?)");
    bad(file, "unknown GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  }
  const auto n_tensors = c.read<std::uint64_t>("tensor count");
  const auto n_kv = c.read<std::uint64_t>("metadata count");
  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor info at
  // least 8 (name length) + 4 (rank) + 8 (one dim) + 4 (type) + 8 (offset).
  if (n_kv > c.left() / 13)
    bad(file, "metadata count " + std::to_string(n_kv) + " cannot fit in a " +
                  std::to_string(size_) + "-byte file");
  if (n_tensors > c.left() / 32)
    bad(file, "tensor count " + std::to_string(n_tensors) + " cannot fit in a " +
                  std::to_string(size_) + "-byte file");

  std::uint64_t array_elements = 0;
  auto read_scalar = [&](ValueType t, const std::string& key) {
    Value v;
    v.type = t;
    switch (t) {
      case ValueType::kU8:
        v.u = c.read<std::uint8_t>(key.c_str());
        break;
      case ValueType::kI8:
        v.i = c.read<std::int8_t>(key.c_str());
        break;
      case ValueType::kU16:
        v.u = c.read<std::uint16_t>(key.c_str());
        break;
      case ValueType::kI16:
        v.i = c.read<std::int16_t>(key.c_str());
        break;
      case ValueType::kU32:
        v.u = c.read<std::uint32_t>(key.c_str());
        break;
      case ValueType::kI32:
        v.i = c.read<std::int32_t>(key.c_str());
        break;
      case ValueType::kU64:
        v.u = c.read<std::uint64_t>(key.c_str());
        break;
      case ValueType::kI64:
        v.i = c.read<std::int64_t>(key.c_str());
        break;
      case ValueType::kF32:
        v.f = c.read<float>(key.c_str());
        break;
      case ValueType::kF64:
        v.f = c.read<double>(key.c_str());
        break;
      case ValueType::kBool: {
        const auto b = c.read<std::uint8_t>(key.c_str());
        if (b > 1)
          bad(file,
              "metadata " + key + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
        v.u = b;
        break;
      }
      case ValueType::kString:
        v.s = c.string(key.c_str(), c.left());
        break;
      case ValueType::kArray:
        break;  // handled by the caller
    }
    if (v.is_integer() && (t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
                           t == ValueType::kI64))
      v.u = v.i >= 0 ? static_cast<std::uint64_t>(v.i) : 0;
    else if (v.is_integer())
      v.i =
          v.u <= static_cast<std::uint64_t>(INT64_MAX) ? static_cast<std::int64_t>(v.u) : INT64_MAX;
    return v;
  };

  for (std::uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string("metadata key", kMaxKeyBytes);
    if (key.empty()) bad(file, "metadata entry " + std::to_string(k) + " has an empty key");
    if (kv_.count(key)) bad(file, "duplicate metadata key " + key);
    const auto t = c.read<std::uint32_t>("metadata type");
    if (!known_value_type(t))
      bad(file, "metadata " + key + ": unknown value type " + std::to_string(t));
    Value v;
    if (static_cast<ValueType>(t) == ValueType::kArray) {
      const auto et = c.read<std::uint32_t>("array element type");
      if (!known_value_type(et))
        bad(file, "metadata " + key + ": unknown array element type " + std::to_string(et));
      if (static_cast<ValueType>(et) == ValueType::kArray)
        bad(file, "metadata " + key + ": arrays of arrays are not supported");
      const auto n = c.read<std::uint64_t>("array length");
      const std::size_t es = scalar_size(static_cast<ValueType>(et));
      if (n > c.left() / es)
        bad(file, "metadata " + key + ": array of " + std::to_string(n) + " " +
                      value_type_name(static_cast<ValueType>(et)) + " cannot fit in the " +
                      std::to_string(c.left()) + " bytes left");
      array_elements += n;
      if (array_elements > kMaxArrayElements)
        bad(file, "metadata arrays hold more than " + std::to_string(kMaxArrayElements) +
                      " elements in all");
      v.type = ValueType::kArray;
      v.array_type = static_cast<ValueType>(et);
      v.items.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t e = 0; e < n; ++e) v.items.push_back(read_scalar(v.array_type, key));
    } else {
      v = read_scalar(static_cast<ValueType>(t), key);
    }
    kv_.emplace(std::move(key), std::move(v));
  }

  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::kU32)
      bad(file, "general.alignment must be u32, not " + std::string(value_type_name(a->type)));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      bad(file, "general.alignment " + std::to_string(a->u) + " is not a power of two");
    alignment_ = a->u;
  }

  tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t;
    t.name = c.string("tensor name", 65535);
    if (t.name.empty()) bad(file, "tensor " + std::to_string(k) + " has an empty name");
    if (tensor_index_.count(t.name)) bad(file, "duplicate tensor name " + t.name);
    const auto rank = c.read<std::uint32_t>("tensor rank");
    if (rank == 0 || rank > kMaxRank)
      bad(file, "tensor " + t.name + ": rank " + std::to_string(rank) + " (ggml allows 1.." +
                    std::to_string(kMaxRank) + ")");
    std::uint64_t n = 1;
    for (std::uint32_t d = 0; d < rank; ++d) {
      const auto dim = c.read<std::uint64_t>("tensor dimension");
      if (dim == 0 || dim > (std::uint64_t{1} << 62) / n)
        bad(file, "tensor " + t.name + ": dimension " + std::to_string(dim) +
                      " is zero or makes the element count overflow");
      n *= dim;
      t.dims.push_back(dim);
    }
    const auto type_id = c.read<std::uint32_t>("tensor type");
    const TypeTraits* tr = type_traits(type_id);
    if (!tr) bad(file, "tensor " + t.name + ": unknown ggml type id " + std::to_string(type_id));
    t.type = static_cast<TensorType>(type_id);
    if (t.dims[0] % tr->block_size != 0)
      bad(file, "tensor " + t.name + ": row of " + std::to_string(t.dims[0]) +
                    " elements is not a whole number of " + tr->name + " blocks (" +
                    std::to_string(tr->block_size) + ")");
    t.n_elements = n;
    t.n_bytes = n / tr->block_size * tr->type_size;
    t.offset = c.read<std::uint64_t>("tensor offset");
    if (t.offset % alignment_ != 0)
      bad(file, "tensor " + t.name + ": offset " + std::to_string(t.offset) +
                    " is not a multiple of the alignment " + std::to_string(alignment_));
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  data_start_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_start_ > size_)
    bad(file, "truncated: the tensor data section starts past the end of the file");
  const std::uint64_t data_bytes = data_start_ <= size_ ? size_ - data_start_ : 0;
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors_) {
    if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset)
      bad(file, "truncated: tensor " + t.name + " (" + std::to_string(t.n_bytes) +
                    " bytes at data offset " + std::to_string(t.offset) +
                    ") ends past the end of the file");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (std::size_t k = 1; k < by_offset.size(); ++k) {
    const TensorInfo& p = *by_offset[k - 1];
    if (p.offset + p.n_bytes > by_offset[k]->offset)
      bad(file, "tensors " + p.name + " and " + by_offset[k]->name + " overlap");
  }
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const Value* File::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string File::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) bad(path_, "metadata key " + key + " is missing");
  if (v->type != ValueType::kString)
    bad(path_, "metadata " + key + " must be a string, not " + value_type_name(v->type));
  return v->s;
}

std::string File::get_string_or(const std::string& key, const std::string& fallback) const {
  return find(key) ? get_string(key) : fallback;
}

std::uint64_t File::get_uint(const std::string& key) const {
  const Value* v = find(key);
  if (!v) bad(path_, "metadata key " + key + " is missing");
  if (!v->is_integer())
    bad(path_, "metadata " + key + " must be an integer, not " + value_type_name(v->type));
  if (v->i < 0) bad(path_, "metadata " + key + " is negative");
  return v->u;
}

std::uint64_t File::get_uint_or(const std::string& key, std::uint64_t fallback) const {
  return find(key) ? get_uint(key) : fallback;
}

double File::get_float_or(const std::string& key, double fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  bad(path_, "metadata " + key + " must be a number, not " + value_type_name(v->type));
}

bool File::get_bool_or(const std::string& key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type != ValueType::kBool)
    bad(path_, "metadata " + key + " must be a bool, not " + value_type_name(v->type));
  return v->u != 0;
}

std::vector<std::string> File::get_string_array(const std::string& key) const {
  const Value* v = find(key);
  if (!v) bad(path_, "metadata key " + key + " is missing");
  if (v->type != ValueType::kArray || v->array_type != ValueType::kString)
    bad(path_, "metadata " + key + " must be an array of strings");
  std::vector<std::string> out;
  out.reserve(v->items.size());
  for (const auto& e : v->items) out.push_back(e.s);
  return out;
}

std::vector<std::int64_t> File::get_int_array_or_empty(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return {};
  Value probe;
  probe.type = v->array_type;
  if (v->type != ValueType::kArray || !probe.is_integer())
    bad(path_, "metadata " + key + " must be an array of integers");
  std::vector<std::int64_t> out;
  out.reserve(v->items.size());
  for (const auto& e : v->items) out.push_back(e.i);
  return out;
}

std::vector<double> File::get_float_array_or_empty(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return {};
  if (v->type != ValueType::kArray ||
      (v->array_type != ValueType::kF32 && v->array_type != ValueType::kF64))
    bad(path_, "metadata " + key + " must be an array of floats");
  std::vector<double> out;
  out.reserve(v->items.size());
  for (const auto& e : v->items) out.push_back(e.f);
  return out;
}

}  // namespace mlxcel::gguf
