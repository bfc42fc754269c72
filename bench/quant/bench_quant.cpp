// Quantized matmul throughput, reported as GB/s of quantized weight bytes read (packed weight +
// scales + biases). BM_Dequantize / BM_QuantizedGemv measure the reference kernels that optimized
// CPU / GPU kernels are checked against; BM_CpuQmatmul the optimized CPU kernel (cpu::qmatmul,
// both ISAs) at decode (M = 1, 4) and prefill (M = 128) shapes, with GFLOP/s for the latter.
// Threads: MLXCEL_THREADS (default: all cores).
#include <benchmark/benchmark.h>

#include <random>

#include "backend/cpu/qmatmul.h"
#include "quant/qmm.h"
#include "quant/quantize.h"

using namespace mlxcel;

namespace {

struct Fixture {
  QuantizedTensor q;
  QuantParams p;
  Tensor x;
  std::size_t weight_bytes = 0;
};

Fixture make(QuantParams p, std::int64_t n, std::int64_t k) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> w(static_cast<std::size_t>(n * k)), x(static_cast<std::size_t>(k));
  for (auto& v : w) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  Fixture f;
  f.p = p;
  f.q = quantize(Tensor::from_f32(w, {n, k}, DType::kBF16), p);
  f.x = Tensor::from_f32(x, {1, k}, DType::kF32);
  f.weight_bytes =
      f.q.weight.nbytes() + f.q.scales.nbytes() + (f.q.biases.defined() ? f.q.biases.nbytes() : 0);
  return f;
}

QuantParams params_of(int id) {
  switch (id) {
    case 0:
      return {QuantMode::kAffine, 4, 64};
    case 1:
      return {QuantMode::kAffine, 8, 64};
    case 2:
      return {QuantMode::kAffine, 3, 64};
    case 3:
      return default_params(QuantMode::kMxfp4);
    case 4:
      return default_params(QuantMode::kMxfp8);
    default:
      return default_params(QuantMode::kNvfp4);
  }
}

void BM_Dequantize(benchmark::State& state) {
  const QuantParams p = params_of(static_cast<int>(state.range(0)));
  Fixture f = make(p, 1024, 2048);
  const Tensor* b = f.q.biases.defined() ? &f.q.biases : nullptr;
  for (auto _ : state) {
    Tensor d = dequantize(f.q.weight, f.q.scales, b, p, DType::kBF16);
    benchmark::DoNotOptimize(d.raw());
  }
  state.SetLabel(p.str());
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(f.weight_bytes) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_QuantizedGemv(benchmark::State& state) {
  const QuantParams p = params_of(static_cast<int>(state.range(0)));
  Fixture f = make(p, 2048, 2048);
  const Tensor* b = f.q.biases.defined() ? &f.q.biases : nullptr;
  for (auto _ : state) {
    Tensor y = quantized_matmul(f.x, f.q.weight, f.q.scales, b, true, p);
    benchmark::DoNotOptimize(y.raw());
  }
  state.SetLabel(p.str());
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(f.weight_bytes) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// range(0): params_of id, range(1): M, range(2): N, range(3): K, range(4): 1 for AVX2.
void BM_CpuQmatmul(benchmark::State& state) {
  const QuantParams p = params_of(static_cast<int>(state.range(0)));
  const std::int64_t m = state.range(1), n = state.range(2), k = state.range(3);
  const cpu::CpuIsa isa = state.range(4) ? cpu::CpuIsa::kAvx2 : cpu::CpuIsa::kScalar;
  if (!cpu::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  Fixture f = make(p, n, k);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(m * k)), y(static_cast<std::size_t>(m * n));
  for (auto& v : x) v = nd(rng);
  cpu::QWeight q;
  q.w = static_cast<const std::uint32_t*>(f.q.weight.raw());
  q.scales = f.q.scales.raw();
  q.scales_dtype = f.q.scales.dtype();
  q.biases = f.q.biases.defined() ? f.q.biases.raw() : nullptr;
  q.mode = static_cast<cpu::QMode>(p.mode);
  q.bits = p.bits;
  q.group_size = p.group_size;
  q.n = n;
  q.k = k;
  for (auto _ : state) {
    cpu::qmatmul(q, x.data(), m, nullptr, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = static_cast<double>(state.iterations());
  state.SetLabel(p.str() + (isa == cpu::CpuIsa::kAvx2 ? " avx2" : " scalar"));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(f.weight_bytes) * iters / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(iters * 2.0 * m * n * k * 1e-9, benchmark::Counter::kIsRate);
}

}  // namespace

// 4096 x 4096: 8 MiB of 4-bit weights (+ 1 MiB of scales and biases), the shape the notes quote;
// it fits a 32 MiB L3. 151936 x 1024 is Qwen3-0.6B's tied lm_head (80 MiB) and 16384 x 4096 a
// 36 MiB matrix of long rows, both streamed from DRAM.
BENCHMARK(BM_CpuQmatmul)
    ->ArgNames({"mode", "M", "N", "K", "avx2"})
    ->Args({0, 1, 4096, 4096, 1})
    ->Args({1, 1, 4096, 4096, 1})
    ->Args({3, 1, 4096, 4096, 1})
    ->Args({4, 1, 4096, 4096, 1})
    ->Args({2, 1, 4096, 4096, 1})
    ->Args({0, 1, 151936, 1024, 1})
    ->Args({0, 1, 16384, 4096, 1})
    ->Args({0, 4, 4096, 4096, 1})
    ->Args({0, 128, 2048, 2048, 1})
    ->Args({0, 1, 4096, 4096, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Dequantize)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizedGemv)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
