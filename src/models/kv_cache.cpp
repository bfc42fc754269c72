#include "models/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace mlxcel::models {

std::size_t KvCacheConfig::k_block_bytes() const {
  return static_cast<std::size_t>(n_kv_heads) * block_size * head_dim * dtype_size(dtype);
}
std::size_t KvCacheConfig::v_block_bytes() const {
  return static_cast<std::size_t>(n_kv_heads) * block_size * v_dim() * dtype_size(dtype);
}
std::size_t KvCacheConfig::block_bytes() const {
  return static_cast<std::size_t>(n_layers) * (k_block_bytes() + v_block_bytes());
}
std::int64_t KvCacheConfig::blocks_for_bytes(const KvCacheConfig& shape, std::size_t bytes) {
  std::size_t b = shape.block_bytes();
  return b == 0 ? 0 : static_cast<std::int64_t>(bytes / b);
}

std::uint64_t kv_block_hash(std::uint64_t prev, std::span<const std::int32_t> tokens) {
  // FNV-1a over the previous hash and the ids, then a final mix; 0 is reserved for "none".
  std::uint64_t h = 1469598103934665603ull ^ prev;
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(prev);
  for (std::int32_t t : tokens) mix(static_cast<std::uint32_t>(t));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

KvBlockPool::KvBlockPool(const KvCacheConfig& cfg) : cfg_(cfg) {
  MLXCEL_CHECK(cfg.n_layers > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.block_size > 0 &&
                   cfg.num_blocks > 0,
               ErrorCategory::kInternal, "KV cache: invalid shape");
  std::size_t total = cfg.block_bytes() * static_cast<std::size_t>(cfg.num_blocks);
  storage_.reset(new (std::nothrow) std::uint8_t[total]);
  if (!storage_) {
    throw_error(ErrorCategory::kOutOfMemory,
                "KV cache: cannot allocate " + std::to_string(total >> 20) +
                    " MiB; use a smaller --ctx-size or --parallel");
  }
  refcount_.assign(static_cast<std::size_t>(cfg.num_blocks), 0);
  hash_of_.assign(static_cast<std::size_t>(cfg.num_blocks), 0);
  for (std::int64_t b = cfg.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
}

std::int32_t KvBlockPool::allocate() {
  std::int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    b = evictable_.front();
    evictable_.pop_front();
    evictable_pos_.erase(b);
    by_hash_.erase(hash_of_[b]);
    hash_of_[b] = 0;
  } else {
    throw_error(ErrorCategory::kOutOfMemory,
                "KV cache full: all " + std::to_string(cfg_.num_blocks) + " blocks of " +
                    std::to_string(cfg_.block_size) +
                    " tokens are in use; lower --parallel or raise --ctx-size");
  }
  refcount_[b] = 1;
  return b;
}

void KvBlockPool::retain(std::int32_t b) {
  if (refcount_[b] == 0) {
    auto it = evictable_pos_.find(b);
    if (it != evictable_pos_.end()) {
      evictable_.erase(it->second);
      evictable_pos_.erase(it);
    }
  }
  ++refcount_[b];
}

void KvBlockPool::release(std::int32_t b) {
  MLXCEL_CHECK(refcount_[b] > 0, ErrorCategory::kInternal, "KV cache: double release");
  if (--refcount_[b] > 0) return;
  if (hash_of_[b] != 0) {
    evictable_.push_back(b);  // most recently used at the back
    evictable_pos_[b] = std::prev(evictable_.end());
  } else {
    free_.push_back(b);
  }
}

std::int32_t KvBlockPool::lookup(std::uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  retain(it->second);
  return it->second;
}

void KvBlockPool::publish(std::uint64_t hash, std::int32_t b) {
  if (hash_of_[b] != 0 || by_hash_.count(hash)) return;  // already cached (same content)
  hash_of_[b] = hash;
  by_hash_[hash] = b;
}

void* KvBlockPool::k_block(int layer, std::int32_t b) {
  std::size_t off = static_cast<std::size_t>(b) * cfg_.block_bytes() +
                    static_cast<std::size_t>(layer) * (cfg_.k_block_bytes() + cfg_.v_block_bytes());
  return storage_.get() + off;
}

void* KvBlockPool::v_block(int layer, std::int32_t b) {
  return static_cast<std::uint8_t*>(k_block(layer, b)) + cfg_.k_block_bytes();
}

std::int64_t KvBlockPool::free_blocks() const {
  return static_cast<std::int64_t>(free_.size() + evictable_.size());
}

SequenceKv::SequenceKv(KvBlockPool& pool) : pool_(pool) {}
SequenceKv::~SequenceKv() { clear(); }

void SequenceKv::clear() {
  for (std::int32_t b : blocks_) pool_.release(b);
  blocks_.clear();
  tokens_.clear();
  length_ = reserved_ = published_blocks_ = 0;
  chain_hash_ = 0;
  rotating_.reset(0);
}

std::int64_t SequenceKv::reuse_prefix(std::span<const std::int32_t> tokens) {
  MLXCEL_CHECK(length_ == 0 && blocks_.empty(), ErrorCategory::kInternal,
               "reuse_prefix on a non-empty sequence");
  const std::int64_t bs = block_size();
  std::int64_t max_blocks = (static_cast<std::int64_t>(tokens.size()) - 1) / bs;
  for (std::int64_t i = 0; i < max_blocks; ++i) {
    std::uint64_t h = kv_block_hash(chain_hash_, tokens.subspan(i * bs, bs));
    std::int32_t b = pool_.lookup(h);
    if (b < 0) break;
    blocks_.push_back(b);
    chain_hash_ = h;
    ++published_blocks_;
  }
  length_ = reserved_ = published_blocks_ * bs;
  tokens_.assign(tokens.begin(), tokens.begin() + length_);
  return length_;
}

std::int64_t SequenceKv::reserve(std::int64_t n) {
  const std::int64_t bs = block_size();
  std::int64_t start = length_;
  std::int64_t need = start + n;
  while (static_cast<std::int64_t>(blocks_.size()) * bs < need) {
    blocks_.push_back(pool_.allocate());  // throws when full; blocks so far stay owned
  }
  reserved_ = std::max(reserved_, need);
  return start;
}

void SequenceKv::commit(std::span<const std::int32_t> tokens) {
  MLXCEL_CHECK(length_ + static_cast<std::int64_t>(tokens.size()) <= reserved_,
               ErrorCategory::kInternal, "KV commit beyond reserved space");
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  length_ += static_cast<std::int64_t>(tokens.size());
  const std::int64_t bs = block_size();
  while ((published_blocks_ + 1) * bs <= length_) {
    std::span<const std::int32_t> blk(tokens_.data() + published_blocks_ * bs,
                                      static_cast<std::size_t>(bs));
    chain_hash_ = kv_block_hash(chain_hash_, blk);
    pool_.publish(chain_hash_, blocks_[published_blocks_]);
    ++published_blocks_;
  }
}

void* SequenceKv::k_block_of(int layer, std::int64_t pos) const {
  return pool_.k_block(layer, blocks_[pos / block_size()]);
}
void* SequenceKv::v_block_of(int layer, std::int64_t pos) const {
  return pool_.v_block(layer, blocks_[pos / block_size()]);
}

}  // namespace mlxcel::models
