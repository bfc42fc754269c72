#pragma once
// safetensors reader and writer (MLX_FORMATS.md §6). A file is validated completely before any
// tensor is exposed: header length bound (100,000,000 bytes, as the reference implementation and
// MLX), UTF-8, JSON, no duplicate names, known dtypes, shapes whose byte size fits int64, offsets
// inside the file, and a byte buffer covered exactly (no holes, overlaps or trailing bytes). MLX
// writes unpadded headers, so tensor data can be unaligned: such tensors are copied out.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mlxcel {

struct TensorEntry {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  std::uint64_t begin = 0;  // offsets relative to the start of the byte buffer
  std::uint64_t end = 0;
  std::uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // mmaps `path` (read-only, private) and validates it. Throws kBadInput naming the file (and
  // the tensor when one is at fault).
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  // Validates an in-memory image (tests, fuzzing). `name` appears in error messages.
  static std::shared_ptr<SafetensorsFile> from_bytes(std::vector<std::uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }  // sorted by name
  const TensorEntry* find(const std::string& name) const;
  bool has(const std::string& name) const { return find(name) != nullptr; }
  // Zero-copy view over the mapping when the data is aligned for its dtype; an aligned copy
  // otherwise. Throws kBadInput if the name is missing.
  Tensor tensor(const std::string& name) const;
  Tensor tensor(const TensorEntry& e) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::uint64_t data_bytes() const { return data_size_; }
  std::uint64_t header_bytes() const { return header_size_; }

  struct Mapping;  // the mmap (or owned bytes), kept alive by every tensor view

 private:
  void parse();
  std::string path_;
  std::shared_ptr<Mapping> map_;
  const std::uint8_t* base_ = nullptr;
  std::uint64_t size_ = 0;
  std::uint64_t header_size_ = 0;
  std::uint64_t data_size_ = 0;
  std::vector<TensorEntry> entries_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A model folder: shards named by model.safetensors.index.json when present (every name it maps
// must be in the shard it names), else every `model*.safetensors` as mlx-lm loads them. Tensor
// names are unique across shards.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  Tensor tensor(const std::string& name) const;
  const TensorEntry& entry(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  std::uint64_t total_bytes() const;  // sum of tensor bytes

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<std::size_t, const TensorEntry*>> where_;
};

// Writes tensors (in the given order, contiguous, header padded with spaces to 8 bytes so data
// is aligned) atomically through a temporary file. Names must be unique.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mlxcel
