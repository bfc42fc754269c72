#include "io/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace mlxcel::io {

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

NpyArray npy_load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  MLXCEL_CHECK(f.good(), ErrorCategory::kBadInput, "npy: cannot open " + path);
  char magic[8];
  f.read(magic, 8);
  MLXCEL_CHECK(f.good() && std::memcmp(magic, "\x93NUMPY", 6) == 0, ErrorCategory::kBadInput,
               "npy: " + path + " is not a .npy file");
  std::uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    hlen = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  }
  std::string header(hlen, '\0');
  f.read(header.data(), hlen);
  NpyArray a;
  auto field = [&](const std::string& key) {
    auto p = header.find("'" + key + "'");
    MLXCEL_CHECK(p != std::string::npos, ErrorCategory::kBadInput, "npy: " + path + " lacks " + key);
    return header.substr(header.find(':', p) + 1);
  };
  std::string d = field("descr");
  a.descr = d.substr(d.find('\'') + 1, 3);
  MLXCEL_CHECK(field("fortran_order").find("False") < 3, ErrorCategory::kBadInput,
               "npy: " + path + " is Fortran-ordered");
  std::string s = field("shape");
  s = s.substr(s.find('(') + 1, s.find(')') - s.find('(') - 1);
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    if (tok.find_first_of("0123456789") != std::string::npos) a.shape.push_back(std::stoll(tok));
  }
  const std::int64_t n = a.numel();
  if (a.descr == "<f4") {
    a.f32.resize(static_cast<std::size_t>(n));
    f.read(reinterpret_cast<char*>(a.f32.data()), n * 4);
  } else if (a.descr == "<i4") {
    a.i32.resize(static_cast<std::size_t>(n));
    f.read(reinterpret_cast<char*>(a.i32.data()), n * 4);
  } else {
    throw_error(ErrorCategory::kBadInput, "npy: " + path + " has dtype " + a.descr + " (use <f4 or <i4)");
  }
  MLXCEL_CHECK(f.good(), ErrorCategory::kBadInput, "npy: " + path + " is truncated");
  return a;
}

void npy_save_f32(const std::string& path, const std::vector<float>& data,
                  const std::vector<std::int64_t>& shape) {
  std::string sh = "(";
  for (auto d : shape) sh += std::to_string(d) + ", ";
  sh += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + sh + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  MLXCEL_CHECK(f.good(), ErrorCategory::kBadInput, "npy: cannot write " + path);
  f.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t hl = static_cast<std::uint16_t>(header.size());
  const char hb[2] = {static_cast<char>(hl & 0xff), static_cast<char>(hl >> 8)};
  f.write(hb, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
}

}  // namespace mlxcel::io
