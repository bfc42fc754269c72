#!/usr/bin/env python3
"""Compare mlxcel encode throughput with HF tokenizers on the same corpus, one thread.

Writes a deterministic multilingual corpus (one document per line), runs
build/cpu/bench/bench_tokenizer on it, times HF tokenizers encoding the same lines one at a time
(TOKENIZERS_PARALLELISM=false), and prints MB/s for both and the ratio.
Usage: scripts/bench_tokenizer.py [--build build/cpu] [--lines 4000]
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))


def make_corpus(n, seed=7):
    rng = random.Random(seed)
    parts = [
        "The quick brown fox jumps over the lazy dog.", "It's what they'll say: we've done it!",
        "Grüße aus Köln — ñandú, café.", "Привет, мир!", "東京タワーは高いです。", "中文测试：你好，世界！",
        "مرحبا بالعالم", "हिन्दी वाक्य।", "emoji 👍🏽 👨‍👩‍👧‍👦 🇫🇷", "def f(x):\n    return x ** 2  # square",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }", "1234567890 3.14159 2024-07-26", "     \t\t  spaces  ",
        "https://example.com/path?q=1&r=2", "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    ]
    return [" ".join(rng.choice(parts) for _ in range(rng.randint(3, 12))).replace("\n", " ") for _ in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(REPO / "build" / "cpu"))
    ap.add_argument("--lines", type=int, default=4000)
    args = ap.parse_args()
    import test_tokenizer_hf as refs  # the HF references the tests use
    lines = make_corpus(args.lines)
    nbytes = sum(len(l.encode()) for l in lines)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        corpus_path = f.name
    out = subprocess.run([str(pathlib.Path(args.build) / "bench" / "bench_tokenizer"), "--benchmark_format=json"],
                         env=dict(os.environ, MLXCEL_BENCH_CORPUS=corpus_path), check=True, capture_output=True,
                         text=True).stdout
    ours = {b["name"].split("/")[1]: b["bytes_per_second"] / 1e6 for b in json.loads(out)["benchmarks"]}
    names = {"gpt2": "gpt2", "llama2": "llama2", "mistral-v0.3": "mistral-v0.3", "qwen2.5": "qwen2.5", "llama3": "llama3"}
    print(f"corpus: {len(lines)} lines, {nbytes / 1e6:.2f} MB; one thread, one string per encode call")
    print(f"{'tokenizer':14s} {'mlxcel MB/s':>12s} {'HF MB/s':>10s} {'ratio':>7s} {'HF batch MB/s':>14s} {'ratio':>7s}")
    for ours_name, case in names.items():
        ref = refs.CASES[case][0]()
        for l in lines[:200]:
            ref.encode(l, add_special_tokens=False)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for l in lines:
                ref.encode(l, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        hf = nbytes / best / 1e6
        best_b = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            ref.encode_batch(lines, add_special_tokens=False)  # one thread: TOKENIZERS_PARALLELISM=false
            best_b = min(best_b, time.perf_counter() - t0)
        hfb = nbytes / best_b / 1e6
        m = ours.get(ours_name, float("nan"))
        print(f"{ours_name:14s} {m:12.2f} {hf:10.2f} {m / hf:7.2f} {hfb:14.2f} {m / hfb:7.2f}")
    os.unlink(corpus_path)


if __name__ == "__main__":
    main()
