#include "core/dtype.h"

namespace mlxcel {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;
  bool is_float;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kBool, "BOOL", 1, false},    {DType::kU8, "U8", 1, false},
    {DType::kI8, "I8", 1, false},        {DType::kU16, "U16", 2, false},
    {DType::kI16, "I16", 2, false},      {DType::kU32, "U32", 4, false},
    {DType::kI32, "I32", 4, false},      {DType::kU64, "U64", 8, false},
    {DType::kI64, "I64", 8, false},      {DType::kF16, "F16", 2, true},
    {DType::kBF16, "BF16", 2, true},     {DType::kF32, "F32", 4, true},
    {DType::kF64, "F64", 8, true},       {DType::kF8E4M3, "F8_E4M3", 1, true},
    {DType::kF8E8M0, "F8_E8M0", 1, true}, {DType::kF8E5M2, "F8_E5M2", 1, true},
};
const DTypeInfo& info(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i;
  return kInfo[0];
}
}  // namespace

std::size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }

bool parse_dtype(std::string_view s, DType* out) {
  for (const auto& i : kInfo) {
    if (i.name == s) {
      *out = i.type;
      return true;
    }
  }
  return false;
}

}  // namespace mlxcel
