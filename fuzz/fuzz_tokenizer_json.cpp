// libFuzzer target: a tokenizer.json (from a model download) is either loaded or refused with an
// mlxcel::Error; a loaded tokenizer encodes and decodes a short text without crashing. The bytes go
// through the real file entry point (an in-memory file, no disk).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = memfd_create("tokenizer.json", 0);
  if (fd < 0) return 0;
  std::size_t off = 0;
  while (off < size) {
    const ssize_t n = write(fd, data + off, size - off);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    mlxcel::Tokenizer t = mlxcel::Tokenizer::from_tokenizer_json(path);
    auto ids = t.encode("Hello, world! 12 \xc3\xa9t\xc3\xa9 <|im_start|>", true);
    (void)t.decode(ids);
  } catch (const mlxcel::Error&) {
  }
  close(fd);
  return 0;
}
