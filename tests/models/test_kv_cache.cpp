#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "core/error.h"
#include "models/kv_cache.h"

using namespace mlxcel;
using namespace mlxcel::models;

namespace {
KvCacheConfig small_cfg(std::int64_t blocks) {
  KvCacheConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 4;
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
  EXPECT_EQ(k1 - k0, static_cast<std::ptrdiff_t>(2 * pool.config().k_block_bytes()));
  EXPECT_EQ(b1 - k0, static_cast<std::ptrdiff_t>(pool.config().block_bytes()));
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
    float* k = static_cast<float*>(a.k_block_of(1, 0));
    k[0] = 42.0f;
    a.commit(prompt);
    EXPECT_EQ(pool.cached_blocks(), 2);

    SequenceKv b(pool);
    EXPECT_EQ(b.reuse_prefix(prompt), 8);
    EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
    EXPECT_EQ(static_cast<float*>(b.k_block_of(1, 0))[0], 42.0f);
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
