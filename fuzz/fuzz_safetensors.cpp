// libFuzzer target: any byte string given to the safetensors parser is either refused with an
// mlxcel::Error or yields tensors whose every byte can be read (ASan checks the bounds).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto f = mlxcel::SafetensorsFile::from_bytes(std::vector<std::uint8_t>(data, data + size), "fuzz");
    volatile std::uint8_t sink = 0;
    for (const auto& e : f->entries()) {
      mlxcel::Tensor t = f->tensor(e);
      const auto* p = static_cast<const std::uint8_t*>(t.raw());
      for (std::size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];
    }
    (void)sink;
  } catch (const mlxcel::Error&) {
  }
  return 0;
}
