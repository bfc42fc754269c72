#pragma once
// Paged KV cache. Memory is a pool of fixed-size blocks (block_size tokens) in one backend
// allocation; each block holds, for every layer, K as [n_kv_heads, block_size, head_dim] and V as
// [n_kv_heads, block_size, v_dim] (backend::KvLayout). A sequence owns a block table. Full blocks
// are immutable once written and can be shared between sequences (prefix reuse): a block is found
// by a 128-bit hash chained over all token ids up to its end (XXH3, keyed per process and by the
// request's cache salt), and reused only when its own tokens are equal to the new request's too.
// Unreferenced cached blocks are evicted least recently used.
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "ops/ops.h"
#include "runtime/rotating_order.h"

namespace mlxcel::runtime {

// The shape of a pool (base unset): what Model::kv_layout returns.
using KvCacheConfig = ops::KvLayout;
// Blocks of `shape` that fit in `bytes`.
std::int64_t kv_blocks_for_bytes(const KvCacheConfig& shape, std::size_t bytes);

// A chained block key: 128 bits, 0/0 reserved for "none".
struct BlockKey {
  std::uint64_t lo = 0, hi = 0;
  bool operator==(const BlockKey&) const = default;
  bool operator<(const BlockKey& o) const { return hi != o.hi ? hi < o.hi : lo < o.lo; }
  bool none() const { return lo == 0 && hi == 0; }
};
// Key of a block's tokens given the key of everything before it.
BlockKey kv_block_key(const BlockKey& prev, std::span<const std::int32_t> tokens);
// The key a sequence's chain starts from: none without a salt, else a key of the salt, so
// requests of different salts (tenants) never share blocks.
BlockKey kv_salt_key(const std::string& cache_salt);

class KvBlockPool {
 public:
  // `be` null: host memory (tests); else one allocation of the backend's KV memory kind.
  explicit KvBlockPool(const KvCacheConfig& shape, ops::Backend* be = nullptr);
  const KvCacheConfig& config() const { return layout_; }
  // The layout with its base address: what the model's forward reads and writes.
  const ops::KvLayout& layout() const { return layout_; }

  // A fresh block with refcount 1; evicts an unreferenced cached block if none is free. Throws
  // out_of_memory ("KV cache full") when every block is in use.
  std::int32_t allocate();
  void retain(std::int32_t block);
  void release(std::int32_t block);

  // Prefix cache over full blocks. A hit needs the key and the block's tokens to be equal; it is
  // retained for the caller. -1 if absent.
  std::int32_t lookup(const BlockKey& key, std::span<const std::int32_t> tokens);
  void publish(const BlockKey& key, std::int32_t block, std::span<const std::int32_t> tokens);

  void* k_block(int layer, std::int32_t block) const { return layout_.k_block(layer, block); }
  void* v_block(int layer, std::int32_t block) const { return layout_.v_block(layer, block); }

  std::int64_t num_blocks() const { return layout_.num_blocks; }
  std::int64_t free_blocks() const;  // free + evictable
  std::int64_t used_blocks() const { return num_blocks() - free_blocks(); }
  std::int64_t cached_blocks() const { return static_cast<std::int64_t>(by_key_.size()); }

 private:
  ops::KvLayout layout_;
  std::unique_ptr<std::uint8_t[], void (*)(std::uint8_t*)> host_{nullptr, nullptr};
  backend::DeviceBuffer device_;
  std::vector<std::int32_t> refcount_;
  std::vector<BlockKey> key_of_;          // none = not published
  std::vector<std::int32_t> tokens_of_;   // [num_blocks, block_size]: a published block's tokens
  std::vector<std::int32_t> free_;
  std::list<std::int32_t> evictable_;     // refcount 0 but published, LRU at front
  std::unordered_map<std::int32_t, std::list<std::int32_t>::iterator> evictable_pos_;
  std::map<BlockKey, std::int32_t> by_key_;
};

// One sequence's view of the pool.
class SequenceKv {
 public:
  explicit SequenceKv(KvBlockPool& pool);
  ~SequenceKv();
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  KvBlockPool& pool() const { return pool_; }
  std::int64_t length() const { return length_; }
  const std::vector<std::int32_t>& block_table() const { return blocks_; }
  int block_size() const { return pool_.config().block_size; }
  DType dtype() const { return pool_.config().dtype; }

  // Isolates this sequence's cached blocks: only sequences of the same salt share them (vLLM's
  // cache_salt). Call on an empty sequence, before reuse_prefix.
  void set_cache_salt(const std::string& salt);

  // Reuses cached full blocks for the longest block-aligned prefix of `tokens` (never the whole
  // prompt: at least one token is left to compute the next-token logits). Call on an empty
  // sequence; returns the number of tokens whose K/V are now present.
  std::int64_t reuse_prefix(std::span<const std::int32_t> tokens);

  // Makes room for `n` more tokens (allocating blocks) and returns the first new position.
  std::int64_t reserve(std::int64_t n);
  // Records the tokens whose K/V were written (after a forward) and publishes newly full blocks.
  void commit(std::span<const std::int32_t> tokens);

  void clear();  // releases every block

  // mlx-lm's sliding-window slot order for this sequence (`--numerics mlx` only; see
  // runtime/rotating_order.h). Reset by clear().
  RotatingOrder& rotating_order() { return rotating_; }

 private:
  RotatingOrder rotating_;
  KvBlockPool& pool_;
  std::vector<std::int32_t> blocks_;
  std::vector<std::int32_t> tokens_;  // committed tokens (for hashing)
  std::int64_t length_ = 0;           // committed length
  std::int64_t reserved_ = 0;         // length including reserved space
  BlockKey salt_key_;                 // start of the chain
  BlockKey chain_;                    // key of tokens_[0 .. published_blocks*block_size)
  std::int64_t published_blocks_ = 0;
};

}  // namespace mlxcel::runtime
