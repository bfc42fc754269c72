// Pure functions of src/platform: gfx names from KFD's gfx_target_version, the architecture
// coverage refusal, sizes, the KV pool rule, kernel versions, SHA-256. Expected values come from
// the documents that define them (KFD's encoding, FIPS 180-4 test vectors, config.json numbers
// of published models), not from our own output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "platform/arch.h"
#include "platform/devices.h"
#include "platform/memory_plan.h"
#include "platform/preflight.h"
#include "platform/sha256.h"

namespace mlxcel::platform {
namespace {

TEST(Platform, GfxNameFromKfdTargetVersion) {
  // major*10000 + minor*100 + stepping; minor and stepping print as hex digits.
  EXPECT_EQ(gfx_name(110501), "gfx1151");
  EXPECT_EQ(gfx_name(110000), "gfx1100");
  EXPECT_EQ(gfx_name(120001), "gfx1201");
  EXPECT_EQ(gfx_name(90010), "gfx90a");
  EXPECT_EQ(gfx_name(90402), "gfx942");
  EXPECT_EQ(gfx_name(90012), "gfx90c");
  EXPECT_EQ(gfx_name(0), "");
}

TEST(Platform, ApuTargets) {
  EXPECT_TRUE(is_apu_gfx("gfx1151"));
  EXPECT_TRUE(is_apu_gfx("gfx1103"));
  EXPECT_FALSE(is_apu_gfx("gfx1100"));
  EXPECT_FALSE(is_apu_gfx("gfx942"));
}

TEST(Platform, RocmCoverageIsExact) {
  const std::vector<std::string> t{"gfx1100", "gfx1201"};
  auto err = arch_coverage_error(BackendKind::kRocm, "gfx1151", t);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("MLXCEL_ROCM_ARCHITECTURES=gfx1151"), std::string::npos) << *err;
  EXPECT_NE(err->find("cmake --preset rocm"), std::string::npos) << *err;
  EXPECT_NE(err->find("--device cpu"), std::string::npos) << *err;
  EXPECT_NE(err->find("invalid device function"), std::string::npos) << *err;
  EXPECT_FALSE(arch_coverage_error(BackendKind::kRocm, "gfx1201", t).has_value());
  // gfx1150 code does not run on gfx1151 (HIP code objects match exactly).
  EXPECT_TRUE(arch_coverage_error(BackendKind::kRocm, "gfx1151", {"gfx1150"}).has_value());
  EXPECT_FALSE(arch_coverage_error(BackendKind::kCpu, "gfx1151", {}).has_value());
}

TEST(Platform, CudaCoverageFollowsSassAndPtxRules) {
  EXPECT_FALSE(arch_coverage_error(BackendKind::kCuda, "sm_90", {"sm_90"}).has_value());
  EXPECT_FALSE(
      arch_coverage_error(BackendKind::kCuda, "sm_86", {"sm_80"}).has_value());  // same major
  EXPECT_FALSE(
      arch_coverage_error(BackendKind::kCuda, "sm_120", {"sm_90"}).has_value());  // PTX JIT
  auto err = arch_coverage_error(BackendKind::kCuda, "sm_80", {"sm_90"});
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("MLXCEL_CUDA_ARCHITECTURES=80"), std::string::npos) << *err;
}

TEST(Platform, ParseSize) {
  EXPECT_EQ(parse_size("96G", "x"), 96ull << 30);
  EXPECT_EQ(parse_size("512M", "x"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5GiB", "x"), 3ull << 29);
  EXPECT_EQ(parse_size("4096", "x"), 4096ull);
  EXPECT_EQ(parse_size("2k", "x"), 2048ull);
  for (const char* bad : {"", "G", "-1G", "12X", "abc", "1e30T"}) {
    try {
      parse_size(bad, "MLXCEL_MEMORY_LIMIT");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kBadInput);
      EXPECT_NE(std::string(e.what()).find("MLXCEL_MEMORY_LIMIT"), std::string::npos);
    }
  }
}

TEST(Platform, KvPoolRoundsToBlocks) {
  EXPECT_EQ(kv_pool_blocks(4096, 32, 1), 128);
  EXPECT_EQ(kv_pool_blocks(4097, 32, 1), 129);
  EXPECT_EQ(kv_pool_blocks(100, 32, 4), 16);
}

TEST(Platform, KvBytesOfLlama31_8B) {
  // Llama-3.1-8B config.json: 32 layers, 8 KV heads, head_dim 128; bf16 K and V:
  // 32 * 8 * 128 * 2 * 2 = 131072 bytes per token.
  ModelShape s;
  s.n_layers = 32;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.hidden_size = 4096;
  s.n_heads = 32;
  s.vocab_size = 128256;
  s.intermediate_size = 14336;
  EXPECT_EQ(kv_bytes_per_token(s, 2), 131072u);
  WeightInfo w;
  w.bytes = 16060522496ull;
  PlanRequest r;
  r.ctx = 8000;
  r.backend = BackendKind::kCuda;
  const MemoryPlan p = plan_memory(s, w, r);
  EXPECT_EQ(p.ctx_allocated, 8000);  // 250 blocks of 32
  EXPECT_EQ(p.kv, 131072ull * 8000);
  EXPECT_EQ(p.weights, w.bytes);
  EXPECT_GT(p.total(), p.allocations());
}

TEST(Platform, KernelVersion) {
  EXPECT_EQ(parse_kernel_version("6.18.4-200.fc43.x86_64"), (std::vector<int>{6, 18, 4}));
  EXPECT_EQ(parse_kernel_version("6.8.0-45-generic"), (std::vector<int>{6, 8, 0}));
  EXPECT_EQ(parse_kernel_version("6.19"), (std::vector<int>{6, 19, 0}));
}

TEST(Platform, Sha256FipsVectors) {
  // FIPS 180-4 examples (NIST CSRC "SHA256.pdf").
  Sha256 a;
  a.update("abc", 3);
  EXPECT_EQ(a.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 b;
  const std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  b.update(m.data(), m.size());
  EXPECT_EQ(b.hex(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 c;
  EXPECT_EQ(c.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace mlxcel::platform
