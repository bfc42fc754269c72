#pragma once
// Paged KV cache. Memory is a pool of fixed-size blocks (block_size tokens); each block holds, for
// every layer, K as [n_kv_heads, block_size, head_dim] and V as [n_kv_heads, block_size,
// v_head_dim]. A sequence owns a block table. Full blocks are immutable once written and can be
// shared between sequences: a block is identified by a hash chained over all token ids up to its
// end, so a new request whose prompt starts with a cached prefix reuses those blocks instead of
// recomputing them (prefix reuse). Unreferenced cached blocks are evicted least recently used.
//
// The pool owns plain buffers through a BlockStorage, so the same bookkeeping serves host memory
// now and device memory (one allocation, graph-capture-stable addresses) for the GPU backend.
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "models/rotating_order.h"

namespace mlxcel::models {

struct KvCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int v_head_dim = 0;  // 0 = head_dim
  DType dtype = DType::kF32;
  int block_size = 32;
  std::int64_t num_blocks = 0;

  int v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  std::size_t k_block_bytes() const;  // one layer's K part of one block
  std::size_t v_block_bytes() const;
  std::size_t block_bytes() const;    // all layers, K and V
  // Blocks that fit in `bytes`.
  static std::int64_t blocks_for_bytes(const KvCacheConfig& shape, std::size_t bytes);
};

class KvBlockPool {
 public:
  explicit KvBlockPool(const KvCacheConfig& cfg);
  const KvCacheConfig& config() const { return cfg_; }

  // A fresh block with refcount 1; evicts an unreferenced cached block if none is free. Throws
  // out_of_memory ("KV cache full") when every block is in use.
  std::int32_t allocate();
  void retain(std::int32_t block);
  void release(std::int32_t block);

  // Prefix cache over full blocks.
  std::int32_t lookup(std::uint64_t hash);  // -1 if absent; a hit is retained for the caller
  void publish(std::uint64_t hash, std::int32_t block);

  void* k_block(int layer, std::int32_t block);
  void* v_block(int layer, std::int32_t block);

  std::int64_t num_blocks() const { return cfg_.num_blocks; }
  std::int64_t free_blocks() const;  // free + evictable
  std::int64_t used_blocks() const { return num_blocks() - free_blocks(); }
  std::int64_t cached_blocks() const { return static_cast<std::int64_t>(by_hash_.size()); }

 private:
  KvCacheConfig cfg_;
  std::unique_ptr<std::uint8_t[]> storage_;
  std::vector<std::int32_t> refcount_;
  std::vector<std::uint64_t> hash_of_;  // 0 = not published
  std::vector<std::int32_t> free_;
  std::list<std::int32_t> evictable_;   // refcount 0 but published, LRU at front
  std::unordered_map<std::int32_t, std::list<std::int32_t>::iterator> evictable_pos_;
  std::unordered_map<std::uint64_t, std::int32_t> by_hash_;
};

// One sequence's view of the pool.
class SequenceKv {
 public:
  explicit SequenceKv(KvBlockPool& pool);
  ~SequenceKv();
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  std::int64_t length() const { return length_; }
  const std::vector<std::int32_t>& block_table() const { return blocks_; }
  int block_size() const { return pool_.config().block_size; }
  DType dtype() const { return pool_.config().dtype; }

  // Reuses cached full blocks for the longest block-aligned prefix of `tokens` (never the whole
  // prompt: at least one token is left to compute the next-token logits). Call on an empty
  // sequence; returns the number of tokens whose K/V are now present.
  std::int64_t reuse_prefix(std::span<const std::int32_t> tokens);

  // Makes room for `n` more tokens (allocating blocks) and returns the first new position.
  std::int64_t reserve(std::int64_t n);
  // Records the tokens whose K/V were written (after a forward) and publishes newly full blocks.
  void commit(std::span<const std::int32_t> tokens);

  // Address of position `pos` for a layer: K row of head h is k_at(layer, pos) + h*block_size*dim.
  void* k_block_of(int layer, std::int64_t pos) const;
  void* v_block_of(int layer, std::int64_t pos) const;

  void clear();  // releases every block

  // mlx-lm's sliding-window slot order for this sequence (`--numerics mlx` only; see
  // models/rotating_order.h). Reset by clear().
  RotatingOrder& rotating_order() { return rotating_; }

 private:
  RotatingOrder rotating_;
  KvBlockPool& pool_;
  std::vector<std::int32_t> blocks_;
  std::vector<std::int32_t> tokens_;  // committed tokens (for hashing)
  std::int64_t length_ = 0;           // committed length
  std::int64_t reserved_ = 0;         // length including reserved space
  std::uint64_t chain_hash_ = 0;      // hash of tokens_[0 .. published_blocks*block_size)
  std::int64_t published_blocks_ = 0;
};

// Chained hash of a block's tokens given the hash of everything before it (never 0).
std::uint64_t kv_block_hash(std::uint64_t prev, std::span<const std::int32_t> tokens);

}  // namespace mlxcel::models
