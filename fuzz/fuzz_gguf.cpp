// libFuzzer target: any byte string given to the GGUF reader is either refused with an
// mlxcel::Error or yields metadata and tensors whose every byte can be read (ASan checks the
// bounds); the tokenizer rebuild on top of it refuses or succeeds, never crashes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto f = mlxcel::gguf::File::from_bytes(std::vector<std::uint8_t>(data, data + size), "fuzz");
    volatile std::uint8_t sink = 0;
    for (const auto& t : f->tensors()) {
      const std::uint8_t* p = f->data(t);
      for (std::uint64_t i = 0; i < t.n_bytes; ++i) sink = sink ^ p[i];
    }
    (void)sink;
    (void)mlxcel::gguf::build_tokenizer(*f, 0);
  } catch (const mlxcel::Error&) {
  }
  return 0;
}
