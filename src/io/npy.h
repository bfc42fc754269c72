#pragma once
// Minimal .npy (NumPy format v1/v2) reader and writer for test drivers and `mlxcel trace --dump`: little-endian '<f4'
// and '<i4', C order only. numpy.save / numpy.load on the Python side.
#include <cstdint>
#include <string>
#include <vector>

namespace mlxcel::io {

struct NpyArray {
  std::string descr;  // "<f4" or "<i4"
  std::vector<std::int64_t> shape;
  std::vector<float> f32;
  std::vector<std::int32_t> i32;
  std::int64_t numel() const;
};

NpyArray npy_load(const std::string& path);  // throws mlxcel::Error(kBadInput) with the path
void npy_save_f32(const std::string& path, const std::vector<float>& data,
                  const std::vector<std::int64_t>& shape);

}  // namespace mlxcel::io
