// CPU kernel throughput. GEMV reports the weight stream rate (bytes of W per second, the decode
// ceiling) and GEMM the dense rate (GFLOP/s, the prefill ceiling); attention reports decode
// keys/s. Every benchmark runs on both ISA paths (the AVX2 ones are skipped where absent).
// Threads: MLXCEL_THREADS (default: all cores).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "core/dtype.h"

using namespace mlxcel;
using namespace mlxcel::cpu;

namespace {

std::vector<bf16> random_bf16(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<bf16> v(n);
  for (auto& x : v) x = bf16(d(rng));
  return v;
}

void run_matmul(benchmark::State& state, CpuIsa isa, DType wt) {
  if (!isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  auto x = random_bf16(static_cast<std::size_t>(m * k), 1);
  std::vector<std::uint8_t> w(static_cast<std::size_t>(n * k) * dtype_size(wt));
  {
    auto wb = random_bf16(static_cast<std::size_t>(n * k), 2);
    for (std::int64_t i = 0; i < n * k; ++i) {
      const float f = wb[i].to_float() * 0.05f;
      if (wt == DType::kF32) reinterpret_cast<float*>(w.data())[i] = f;
      else if (wt == DType::kBF16) reinterpret_cast<bf16*>(w.data())[i] = bf16(f);
      else reinterpret_cast<f16*>(w.data())[i] = f16(f);
    }
  }
  std::vector<bf16> y(static_cast<std::size_t>(m * n));
  MatmulArgs a;
  a.x = x.data(); a.x_dtype = DType::kBF16; a.w = w.data(); a.w_dtype = wt;
  a.y = y.data(); a.y_dtype = DType::kBF16; a.m = m; a.n = n; a.k = k;
  for (auto _ : state) {
    matmul(a, isa);
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s_W"] = benchmark::Counter(iters * static_cast<double>(w.size()), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(iters * 2.0 * m * n * k * 1e-9, benchmark::Counter::kIsRate);
}

void BM_gemv_bf16_scalar(benchmark::State& s) { run_matmul(s, CpuIsa::kScalar, DType::kBF16); }
void BM_gemv_bf16_avx2(benchmark::State& s) { run_matmul(s, CpuIsa::kAvx2, DType::kBF16); }
void BM_gemv_f16_avx2(benchmark::State& s) { run_matmul(s, CpuIsa::kAvx2, DType::kF16); }
void BM_gemv_f32_avx2(benchmark::State& s) { run_matmul(s, CpuIsa::kAvx2, DType::kF32); }
void BM_gemm_bf16_scalar(benchmark::State& s) { run_matmul(s, CpuIsa::kScalar, DType::kBF16); }
void BM_gemm_bf16_avx2(benchmark::State& s) { run_matmul(s, CpuIsa::kAvx2, DType::kBF16); }

// GEMV: decode-shaped, M = 1 (and 4 for small-batch decode); W 4096 x 4096 = 32 MiB of bf16,
// larger than the last-level cache so the number is a memory-stream rate.
BENCHMARK(BM_gemv_bf16_scalar)->Args({1, 4096, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemv_bf16_avx2)->Args({1, 4096, 4096})->Args({2, 4096, 4096})->Args({4, 4096, 4096})->Args({1, 11008, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemv_f16_avx2)->Args({1, 4096, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemv_f32_avx2)->Args({1, 4096, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
// GEMM: prefill-shaped.
BENCHMARK(BM_gemm_bf16_scalar)->Args({128, 1024, 1024})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_gemm_bf16_avx2)->Args({128, 1024, 1024})->Args({512, 2048, 2048})->UseRealTime()->Unit(benchmark::kMillisecond);

void run_attention(benchmark::State& state, CpuIsa isa) {
  if (!isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const std::int64_t heads = 32, kv_heads = 8, d = 128, kv_len = state.range(0);
  auto q = random_bf16(static_cast<std::size_t>(heads * d), 3);
  auto k = random_bf16(static_cast<std::size_t>(kv_heads * kv_len * d), 4);
  auto v = random_bf16(static_cast<std::size_t>(kv_heads * kv_len * d), 5);
  std::vector<bf16> o(q.size());
  AttentionArgs a;
  a.q = q.data(); a.k = k.data(); a.v = v.data(); a.out = o.data(); a.dtype = DType::kBF16;
  a.n_heads = heads; a.n_kv_heads = kv_heads; a.head_dim = d; a.q_len = 1; a.kv_len = kv_len;
  a.q_offset = kv_len - 1; a.scale = 0.088f;
  for (auto _ : state) {
    attention(a, isa);
    benchmark::DoNotOptimize(o.data());
  }
  state.counters["GB/s_KV"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * kv_heads * kv_len * d * 2, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
void BM_attention_decode_scalar(benchmark::State& s) { run_attention(s, CpuIsa::kScalar); }
void BM_attention_decode_avx2(benchmark::State& s) { run_attention(s, CpuIsa::kAvx2); }
BENCHMARK(BM_attention_decode_scalar)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention_decode_avx2)->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
