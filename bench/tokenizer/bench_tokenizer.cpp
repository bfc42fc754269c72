// Encode throughput (MB/s, one thread) of the fixture tokenizers. The corpus is the file named
// by MLXCEL_BENCH_CORPUS (one document per line; scripts/bench_tokenizer.py writes it and runs
// HF tokenizers on the same lines), else a built-in multilingual sample. Lines are encoded one
// at a time, as a server encodes requests.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> lines;
  if (const char* p = std::getenv("MLXCEL_BENCH_CORPUS")) {
    std::ifstream f(p);
    std::string l;
    while (std::getline(f, l)) lines.push_back(l);
    if (!lines.empty()) return lines;
  }
  const char* base[] = {
      "The quick brown fox jumps over the lazy dog while 12345 people watch in 2024.",
      "def encode(self, text: str) -> list[int]:\n    return [ord(c) for c in text]  # naive",
      "Grüße aus Köln — ñandú, café; Привет, мир! 東京タワーは高いです。مرحبا بالعالم 👍🏽",
      "    indented   code\twith\ttabs   and    runs of     spaces\n\n",
  };
  for (int k = 0; k < 2500; ++k) lines.push_back(std::string(base[k % 4]) + " #" + std::to_string(k));
  return lines;
}

std::string fixtures() {
  if (const char* p = std::getenv("MLXCEL_FIXTURES")) return p;
  return std::string(MLXCEL_SOURCE_DIR) + "/../shared/fixtures";
}

void encode_bench(benchmark::State& st, const mlxcel::Tokenizer& t) {
  static const std::vector<std::string> lines = corpus();
  size_t bytes = 0;
  for (const auto& l : lines) bytes += l.size();
  for (auto _ : st) {
    size_t n = 0;
    for (const auto& l : lines) n += t.encode(l, false).size();
    benchmark::DoNotOptimize(n);
  }
  st.SetBytesProcessed(static_cast<int64_t>(bytes * st.iterations()));
}

void register_all() {
  const std::string f = fixtures() + "/tokenizers/";
  struct Case {
    const char* name;
    std::string dir;
    bool tiktoken;
  };
  std::vector<Case> cases = {{"gpt2", f + "gpt2", false},
                             {"llama2", f + "llama2-sentencepiece-bpe", false},
                             {"mistral-v0.3", f + "mistral-7b-v0.3-metaspace", false},
                             {"qwen2.5", f + "qwen2.5", false},
                             {"llama3", f + "llama3-tiktoken", true}};
  for (const auto& c : cases) {
    try {
      auto t = c.tiktoken ? mlxcel::Tokenizer::from_tiktoken(c.dir + "/tokenizer.model",
                                                             c.dir + "/tokenizer_config.Llama-3.1-8B.json")
                          : mlxcel::Tokenizer::load(c.dir);
      benchmark::RegisterBenchmark((std::string("encode/") + c.name).c_str(),
                                   [t](benchmark::State& st) { encode_bench(st, t); })
          ->Unit(benchmark::kMillisecond);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "skip %s: %s\n", c.name, e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
