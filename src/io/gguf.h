#pragma once
// GGUF reader (versions 2 and 3, little-endian; the layout of ggml's docs/gguf.md). The whole file
// is validated before anything is exposed: magic and version, counts bounded by the bytes that
// could hold them, strings and arrays inside the file, no duplicate keys or tensor names, known
// value and tensor types, rank 1..4, element counts that fit int64 and are whole blocks of their
// type, `general.alignment` a power of two, tensor offsets aligned and tensor data inside the
// file without overlaps. Every refusal is one kBadInput line naming the file and what is wrong.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlxcel::gguf {

enum class ValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* value_type_name(ValueType t);

// ggml tensor types (ggml.h `enum ggml_type`); ids are part of the file format.
enum class TensorType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct TypeTraits {
  const char* name;
  std::uint32_t block_size;  // elements per block
  std::uint32_t type_size;   // bytes per block
};
// Returns nullptr for an id that is not (or no longer) a ggml type.
const TypeTraits* type_traits(std::uint32_t id);
const char* tensor_type_name(TensorType t);

// A metadata value. Scalars keep their exact value in the member matching their kind; arrays hold
// their elements (arrays of arrays are refused, as ggml refuses them).
struct Value {
  ValueType type = ValueType::kU8;
  ValueType array_type = ValueType::kU8;  // element type when type == kArray
  std::uint64_t u = 0;                    // unsigned integers and bool
  std::int64_t i = 0;                     // signed integers
  double f = 0;                           // f32 / f64
  std::string s;                          // kString
  std::vector<Value> items;               // kArray

  bool is_integer() const;
  bool is_float() const { return type == ValueType::kF32 || type == ValueType::kF64; }
};

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // ggml order: dims[0] is the fastest-varying (columns)
  TensorType type = TensorType::kF32;
  std::uint64_t offset = 0;  // relative to the start of the tensor data section
  std::uint64_t n_elements = 0;
  std::uint64_t n_bytes = 0;
  // Rows x columns as MLX sees the tensor: dims reversed.
  std::vector<std::int64_t> shape() const;
};

class File {
 public:
  // mmaps `path` read-only and validates it.
  static std::shared_ptr<File> open(const std::string& path);
  // Validates an in-memory image (tests, fuzzing); `name` appears in errors.
  static std::shared_ptr<File> from_bytes(std::vector<std::uint8_t> bytes, const std::string& name);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  const std::map<std::string, Value>& metadata() const { return kv_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // file order
  const TensorInfo* find_tensor(const std::string& name) const;
  const std::uint8_t* data(const TensorInfo& t) const { return base_ + data_start_ + t.offset; }

  // Typed metadata access; each throws kBadInput naming the key when it is present with another
  // type. The *_or forms return `fallback` when the key is absent.
  const Value* find(const std::string& key) const;
  std::string get_string(const std::string& key) const;  // required
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  std::uint64_t get_uint(const std::string& key) const;  // any non-negative integer type
  std::uint64_t get_uint_or(const std::string& key, std::uint64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;  // f32/f64 or integers
  bool get_bool_or(const std::string& key, bool fallback) const;
  std::vector<std::string> get_string_array(const std::string& key) const;  // required
  std::vector<std::int64_t> get_int_array_or_empty(const std::string& key) const;
  std::vector<double> get_float_array_or_empty(const std::string& key) const;  // f32/f64 items

 private:
  File() = default;
  void parse();
  std::string path_;
  struct Mapping;
  std::unique_ptr<Mapping> map_;
  const std::uint8_t* base_ = nullptr;
  std::uint64_t size_ = 0;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_start_ = 0;
  std::map<std::string, Value> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

}  // namespace mlxcel::gguf
