#pragma once
// SHA-256 (FIPS 180-4) for checking downloaded files against the hub's lfs.sha256. Written here
// because it is 60 lines and the alternative, libcrypto, would be a new link dependency.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mlxcel::platform {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  std::string hex();  // finishes; the object is spent afterwards

 private:
  void block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

// Hex digest of a file's contents; throws bad_input when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace mlxcel::platform
