#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "core/error.h"
#include "runtime/kv_cache.h"

using namespace mlxcel;
using namespace mlxcel::runtime;

namespace {
KvCacheConfig small_cfg(std::int64_t blocks) {
  KvCacheConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.v_dim = 4;
  c.dtype = DType::kF32;
  c.block_size = 4;
  c.num_blocks = blocks;
  return c;
}
std::vector<std::int32_t> iota_tokens(int n, int start = 100) {
  std::vector<std::int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}
}  // namespace

TEST(KvCache, BlocksAreDisjointAndSized) {
  KvBlockPool pool(small_cfg(8));
  EXPECT_EQ(pool.config().k_block_bytes(), 2u * 4 * 4 * 4);
  auto* k0 = static_cast<std::uint8_t*>(pool.k_block(0, 0));
  auto* v0 = static_cast<std::uint8_t*>(pool.v_block(0, 0));
  auto* k1 = static_cast<std::uint8_t*>(pool.k_block(1, 0));
  auto* b1 = static_cast<std::uint8_t*>(pool.k_block(0, 1));
  EXPECT_EQ(v0 - k0, static_cast<std::ptrdiff_t>(pool.config().k_block_bytes()));
  // Layer-major: block 1 follows block 0 within a layer; layer 1 starts after all 8 blocks.
  EXPECT_EQ(b1 - k0, static_cast<std::ptrdiff_t>(2 * pool.config().k_block_bytes()));
  EXPECT_EQ(k1 - k0, static_cast<std::ptrdiff_t>(8 * 2 * pool.config().k_block_bytes()));
  EXPECT_EQ(pool.config().block_bytes() * 8, pool.config().bytes());
}

TEST(KvCache, ReserveCommitAndFullError) {
  KvBlockPool pool(small_cfg(3));
  SequenceKv s(pool);
  EXPECT_EQ(s.reserve(10), 0);
  EXPECT_EQ(s.block_table().size(), 3u);
  s.commit(iota_tokens(10));
  EXPECT_EQ(s.length(), 10);
  EXPECT_EQ(pool.free_blocks(), 0);
  SequenceKv t(pool);
  try {
    t.reserve(1);
    FAIL() << "pool is full";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("KV cache full"), std::string::npos);
  }
}

TEST(KvCache, PrefixReuseSharesFullBlocksOnly) {
  KvBlockPool pool(small_cfg(16));
  auto prompt = iota_tokens(11);  // 2 full blocks + 3 tokens
  {
    SequenceKv a(pool);
    a.reserve(11);
    // write recognizable K data into block 0 of layer 1
    float* k = static_cast<float*>(pool.k_block(1, a.block_table()[0]));
    k[0] = 42.0f;
    a.commit(prompt);
    EXPECT_EQ(pool.cached_blocks(), 2);

    SequenceKv b(pool);
    EXPECT_EQ(b.reuse_prefix(prompt), 8);
    EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
    EXPECT_EQ(static_cast<float*>(pool.k_block(1, b.block_table()[0]))[0], 42.0f);
    // new tokens go to a fresh block, never into a shared one
    EXPECT_EQ(b.reserve(3), 8);
    EXPECT_NE(b.block_table()[2], a.block_table()[2]);
  }
  // Both released: cached blocks stay reusable until evicted.
  EXPECT_EQ(pool.free_blocks(), 16);
  SequenceKv c(pool);
  EXPECT_EQ(c.reuse_prefix(prompt), 8);
  // A different second block only shares the first.
  SequenceKv d(pool);
  auto other = prompt;
  other[5] = 7;
  EXPECT_EQ(d.reuse_prefix(other), 4);
}

TEST(KvCache, WholePromptIsNeverReused) {
  KvBlockPool pool(small_cfg(8));
  auto prompt = iota_tokens(8);
  SequenceKv a(pool);
  a.reserve(8);
  a.commit(prompt);
  SequenceKv b(pool);
  // 8 tokens = 2 full cached blocks, but the last token must be recomputed for logits.
  EXPECT_EQ(b.reuse_prefix(prompt), 4);
}

TEST(KvCache, EvictsLeastRecentlyUsedCachedBlocks) {
  KvBlockPool pool(small_cfg(4));
  {
    SequenceKv a(pool);
    a.reserve(8);
    a.commit(iota_tokens(8, 0));
  }
  {
    SequenceKv b(pool);
    b.reserve(8);
    b.commit(iota_tokens(8, 500));
  }
  EXPECT_EQ(pool.cached_blocks(), 4);
  SequenceKv c(pool);
  c.reserve(4);  // evicts the LRU block: a's first block
  SequenceKv d(pool);
  EXPECT_EQ(d.reuse_prefix(iota_tokens(9, 0)), 0);
  SequenceKv e(pool);
  EXPECT_EQ(e.reuse_prefix(iota_tokens(9, 500)), 8);
}

TEST(KvCache, BlocksAreReusedOnlyWhenTheirTokensAreEqual) {
  KvBlockPool pool(small_cfg(8));
  SequenceKv a(pool);
  auto t = iota_tokens(8);
  a.reserve(8);
  a.commit(t);
  // The key of the first block with the right tokens hits; the same key with other tokens (what
  // a hash collision would bring) is a miss, not a wrong block.
  const BlockKey k0 = kv_block_key(BlockKey{}, std::span<const std::int32_t>(t).first(4));
  std::vector<std::int32_t> other = {1, 2, 3, 4};
  EXPECT_EQ(pool.lookup(k0, other), -1);
  const std::int32_t hit = pool.lookup(k0, std::span<const std::int32_t>(t).first(4));
  EXPECT_EQ(hit, a.block_table()[0]);
  pool.release(hit);
}

TEST(KvCache, CacheSaltIsolatesPrefixes) {
  KvBlockPool pool(small_cfg(16));
  auto prompt = iota_tokens(9);
  SequenceKv a(pool);
  a.set_cache_salt("tenant-a");
  a.reserve(9);
  a.commit(prompt);
  SequenceKv other_tenant(pool);
  other_tenant.set_cache_salt("tenant-b");
  EXPECT_EQ(other_tenant.reuse_prefix(prompt), 0);
  SequenceKv unsalted(pool);
  EXPECT_EQ(unsalted.reuse_prefix(prompt), 0);
  SequenceKv same_tenant(pool);
  same_tenant.set_cache_salt("tenant-a");
  EXPECT_EQ(same_tenant.reuse_prefix(prompt), 8);
}

TEST(KvCache, BlockKeysChainTheWholePrefix) {
  std::vector<std::int32_t> x = {1, 2, 3, 4}, y = {5, 6, 7, 8};
  const BlockKey a = kv_block_key(kv_block_key(BlockKey{}, x), y);
  const BlockKey b = kv_block_key(kv_block_key(BlockKey{}, y), y);
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(a.none());
  EXPECT_TRUE(kv_salt_key("").none());
  EXPECT_FALSE(kv_salt_key("s") == kv_salt_key("t"));
}
