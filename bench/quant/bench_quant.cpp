// CPU reference throughput: dequantize and quantized GEMV (M = 1, transpose = true), reported as
// GB/s of quantized weight bytes read (packed weight + scales + biases). These measure the
// reference kernels that optimized CPU / GPU kernels are checked against.
#include <benchmark/benchmark.h>

#include <random>

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
  f.weight_bytes = f.q.weight.nbytes() + f.q.scales.nbytes() + (f.q.biases.defined() ? f.q.biases.nbytes() : 0);
  return f;
}

QuantParams params_of(int id) {
  switch (id) {
    case 0: return {QuantMode::kAffine, 4, 64};
    case 1: return {QuantMode::kAffine, 8, 64};
    case 2: return {QuantMode::kAffine, 3, 64};
    case 3: return default_params(QuantMode::kMxfp4);
    case 4: return default_params(QuantMode::kMxfp8);
    default: return default_params(QuantMode::kNvfp4);
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
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(f.weight_bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
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
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(f.weight_bytes) * state.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_Dequantize)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizedGemv)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
