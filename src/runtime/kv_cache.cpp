#include "runtime/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"

namespace mlxcel::runtime {

namespace {
// Keyed per process, so that colliding token sequences cannot be prepared offline.
std::uint64_t process_seed() {
  static const std::uint64_t seed = [] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

BlockKey finish(XXH128_hash_t h) {
  BlockKey k{h.low64, h.high64};
  if (k.none()) k.lo = 1;
  return k;
}
}  // namespace

std::int64_t kv_blocks_for_bytes(const KvCacheConfig& shape, std::size_t bytes) {
  const std::size_t b = shape.block_bytes();
  return b == 0 ? 0 : static_cast<std::int64_t>(bytes / b);
}

BlockKey kv_block_key(const BlockKey& prev, std::span<const std::int32_t> tokens) {
  std::vector<std::uint8_t> buf(16 + tokens.size() * 4);
  std::memcpy(buf.data(), &prev.lo, 8);
  std::memcpy(buf.data() + 8, &prev.hi, 8);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<std::uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) buf[16 + i * 4 + b] = static_cast<std::uint8_t>(v >> (8 * b));
  }
  return finish(XXH3_128bits_withSeed(buf.data(), buf.size(), process_seed()));
}

BlockKey kv_salt_key(const std::string& cache_salt) {
  if (cache_salt.empty()) return {};
  const std::string tagged = "mlxcel-cache-salt:" + cache_salt;
  return finish(XXH3_128bits_withSeed(tagged.data(), tagged.size(), process_seed()));
}

KvBlockPool::KvBlockPool(const KvCacheConfig& shape, ops::Backend* be) : layout_(shape) {
  if (layout_.v_dim == 0) layout_.v_dim = layout_.head_dim;
  MLXCEL_CHECK(layout_.n_layers > 0 && layout_.n_kv_heads > 0 && layout_.head_dim > 0 &&
                   layout_.block_size > 0 && layout_.num_blocks > 0,
               ErrorCategory::kInternal, "KV cache: invalid shape");
  const std::size_t total = layout_.bytes();
  if (be) {
    device_ = be->allocate(backend::MemoryKind::kKvCache, total);
    layout_.base = device_.data();
  } else {
    auto* p = static_cast<std::uint8_t*>(std::aligned_alloc(64, (total + 63) / 64 * 64));
    if (!p)
      throw_error(ErrorCategory::kOutOfMemory,
                  "KV cache: cannot allocate " + std::to_string(total >> 20) +
                      " MiB; use a smaller --ctx-size or --parallel");
    std::memset(p, 0, total);
    host_ = {p, [](std::uint8_t* q) { std::free(q); }};
    layout_.base = p;
  }
  const auto n = static_cast<std::size_t>(layout_.num_blocks);
  refcount_.assign(n, 0);
  key_of_.assign(n, BlockKey{});
  tokens_of_.assign(n * static_cast<std::size_t>(layout_.block_size), 0);
  for (std::int64_t b = layout_.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
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
    by_key_.erase(key_of_[b]);
    key_of_[b] = BlockKey{};
  } else {
    throw_error(ErrorCategory::kOutOfMemory,
                "KV cache full: all " + std::to_string(layout_.num_blocks) + " blocks of " +
                    std::to_string(layout_.block_size) +
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
  if (!key_of_[b].none()) {
    evictable_.push_back(b);  // most recently used at the back
    evictable_pos_[b] = std::prev(evictable_.end());
  } else {
    free_.push_back(b);
  }
}

std::int32_t KvBlockPool::lookup(const BlockKey& key, std::span<const std::int32_t> tokens) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return -1;
  const std::int32_t b = it->second;
  const std::int32_t* have = tokens_of_.data() + static_cast<std::size_t>(b) * layout_.block_size;
  if (tokens.size() != static_cast<std::size_t>(layout_.block_size) ||
      !std::equal(tokens.begin(), tokens.end(), have))
    return -1;  // a key collision: treat as a miss
  retain(b);
  return b;
}

void KvBlockPool::publish(const BlockKey& key, std::int32_t b, std::span<const std::int32_t> tokens) {
  if (!key_of_[b].none() || by_key_.count(key)) return;  // already cached (same content)
  key_of_[b] = key;
  by_key_[key] = b;
  std::copy(tokens.begin(), tokens.end(),
            tokens_of_.begin() + static_cast<std::ptrdiff_t>(b) * layout_.block_size);
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
  chain_ = salt_key_;
  rotating_.reset(0);
}

void SequenceKv::set_cache_salt(const std::string& salt) {
  MLXCEL_CHECK(length_ == 0 && blocks_.empty(), ErrorCategory::kInternal,
               "set_cache_salt on a non-empty sequence");
  salt_key_ = chain_ = kv_salt_key(salt);
}

std::int64_t SequenceKv::reuse_prefix(std::span<const std::int32_t> tokens) {
  MLXCEL_CHECK(length_ == 0 && blocks_.empty(), ErrorCategory::kInternal,
               "reuse_prefix on a non-empty sequence");
  const std::int64_t bs = block_size();
  const std::int64_t max_blocks = (static_cast<std::int64_t>(tokens.size()) - 1) / bs;
  for (std::int64_t i = 0; i < max_blocks; ++i) {
    auto blk = tokens.subspan(static_cast<std::size_t>(i * bs), static_cast<std::size_t>(bs));
    const BlockKey k = kv_block_key(chain_, blk);
    const std::int32_t b = pool_.lookup(k, blk);
    if (b < 0) break;
    blocks_.push_back(b);
    chain_ = k;
    ++published_blocks_;
  }
  length_ = reserved_ = published_blocks_ * bs;
  tokens_.assign(tokens.begin(), tokens.begin() + length_);
  return length_;
}

std::int64_t SequenceKv::reserve(std::int64_t n) {
  const std::int64_t bs = block_size();
  const std::int64_t start = length_;
  const std::int64_t need = start + n;
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
    chain_ = kv_block_key(chain_, blk);
    pool_.publish(chain_, blocks_[published_blocks_], blk);
    ++published_blocks_;
  }
}

}  // namespace mlxcel::runtime
