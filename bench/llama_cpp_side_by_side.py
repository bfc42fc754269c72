#!/usr/bin/env python3
"""mlxcel vs llama.cpp on the same model and the same cores: prefill (pp) and decode (tg) tok/s.

usage: bench/llama_cpp_side_by_side.py --gguf FILE.gguf --mlx-dir DIR [-p 128] [-n 64] [-r 5]
                                       [-t 1,2] [--mlxcel build/cpu/bin/mlxcel] [--csv OUT.csv]

llama.cpp runs through llama-cpp-python (a bench tool, not a test dependency: install it into
its own venv, e.g. `python3 -m venv /work/venv-llama && CMAKE_ARGS="-DGGML_NATIVE=ON"
/work/venv-llama/bin/pip install llama-cpp-python`, and run this script with that python; its
ctypes package also runs from an unpacked sdist with LLAMA_CPP_LIB_PATH naming the folder of
libllama.so / libggml*.so, see docs/performance/cpu.md) on
the original GGUF; mlxcel runs `mlxcel bench` on the folder `mlxcel convert --from-gguf` made
from the same file (scripts/smollm2.sh). Both: the same number of random prompt tokens, greedy
decoding with EOS ignored, `-t` threads for prefill and decode, one warm-up pass, then the
engines alternate run by run (so load from other processes falls on both alike) and the table
shows medians (min-max) over the repeats, for each thread count of `-t`. Decode tok/s counts the tokens after the first (the
first comes from the prefill's logits), as `mlxcel bench` does.

On a machine shared with other work, llama.cpp's OpenMP threads spin at every barrier and a
descheduled thread stalls the others: with 2 threads on 2 busy cores it decoded ~10x slower than
with 1. Set OMP_WAIT_POLICY=PASSIVE (read when the library loads) to measure it the way
mlxcel's pool behaves (workers sleep), and compare 1 thread too.

This is a benchmark: it prints numbers and never fails on them.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def last_logits(llm):
    """The last evaluated token's logits (llama.cpp keeps only that row unless logits_all)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))


def llama_cpp_run(llm, prompt, n_gen):
    """One pass: prefill `prompt`, then n_gen greedy tokens; returns (pp tok/s, tg tok/s)."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    tok = int(np.argmax(last_logits(llm)))
    for _ in range(n_gen - 1):
        llm.eval([tok])
        tok = int(np.argmax(last_logits(llm)))
    t2 = time.perf_counter()
    return len(prompt) / (t1 - t0), (n_gen - 1) / (t2 - t1)


def mlxcel_run(exe, model_dir, pp, tg, threads):
    """One `mlxcel bench` invocation (its own warm-up pass, then one timed pass)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "b.csv"
        subprocess.run([str(exe), "bench", str(model_dir), "-p", str(pp), "-n", str(tg), "-r", "1",
                        "-t", str(threads), "--csv", str(out)], check=True, capture_output=True, text=True)
        rows = list(csv.DictReader(out.open()))
    rate = {r["test"]: float(r["tok_s"]) for r in rows}
    return rate[f"pp{pp}"], rate[f"tg{tg}"], rows[0]["commit"]


def summary(v):
    return f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="the original GGUF file (llama.cpp)")
    ap.add_argument("--mlx-dir", required=True, help="the folder mlxcel convert made from it")
    ap.add_argument("-p", "--n-prompt", type=int, default=128)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("-t", "--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--mlxcel", default=str(ROOT / "build" / "cpu" / "bin" / "mlxcel"))
    ap.add_argument("--csv", help="append one row per engine and test")
    args = ap.parse_args()
    try:
        import llama_cpp
    except ImportError:
        sys.exit("llama_cpp_side_by_side: llama-cpp-python is not installed in this python "
                 f"({sys.executable}); see the usage above")
    pp, tg = args.n_prompt, args.n_gen
    for th in [int(x) for x in str(args.threads).split(",")]:
        run_threads(args, llama_cpp, pp, tg, th)


def run_threads(args, llama_cpp, pp, tg, th):
    llm = llama_cpp.Llama(model_path=args.gguf, n_ctx=pp + tg + 16, n_batch=max(pp, 32), n_ubatch=max(pp, 32),
                          n_threads=th, n_threads_batch=th, verbose=False)
    vocab = llm.n_vocab()
    prompt = [int(x) for x in np.random.default_rng(0).integers(0, vocab, size=pp)]
    llama_cpp_run(llm, prompt, tg)  # warm-up
    res = {"llama.cpp": ([], []), "mlxcel": ([], [])}
    commit = "?"
    for r in range(args.repeats):
        a, b, commit = mlxcel_run(args.mlxcel, args.mlx_dir, pp, tg, th)
        res["mlxcel"][0].append(a)
        res["mlxcel"][1].append(b)
        a, b = llama_cpp_run(llm, prompt, tg)
        res["llama.cpp"][0].append(a)
        res["llama.cpp"][1].append(b)
        print(f"{th} threads, repeat {r + 1}/{args.repeats}: mlxcel pp {res['mlxcel'][0][-1]:.1f} "
              f"tg {res['mlxcel'][1][-1]:.1f} | llama.cpp pp {a:.1f} tg {b:.1f}", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    omp = os.environ.get("OMP_WAIT_POLICY", "default")
    print(f"\nmodel: {args.gguf} vs {args.mlx_dir}; {th} threads; median (min-max) of {args.repeats} "
          f"alternating runs; load average {load:.1f}; OMP_WAIT_POLICY {omp}")
    print(f"llama-cpp-python {llama_cpp.__version__}; mlxcel {commit}")
    print(f"| engine | threads | pp{pp} tok/s | tg{tg} tok/s |\n|---|---|---|---|")
    for eng, (p, t) in res.items():
        print(f"| {eng} | {th} | {summary(p)} | {summary(t)} |")
    ratio = statistics.median(res["mlxcel"][1]) / statistics.median(res["llama.cpp"][1])
    print(f"decode: mlxcel / llama.cpp = {ratio:.2f}", flush=True)
    if args.csv:
        new = not Path(args.csv).exists()
        with open(args.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["engine", "version", "model", "threads", "omp_wait_policy", "test", "tok_s_median",
                            "tok_s_min", "tok_s_max", "repeats", "load_avg"])
            for eng, (p, t) in res.items():
                ver = llama_cpp.__version__ if eng == "llama.cpp" else commit
                model = args.gguf if eng == "llama.cpp" else args.mlx_dir
                for name, v in ((f"pp{pp}", p), (f"tg{tg}", t)):
                    w.writerow([eng, ver, model, th, omp, name, f"{statistics.median(v):.2f}", f"{min(v):.2f}",
                                f"{max(v):.2f}", args.repeats, f"{load:.1f}"])


if __name__ == "__main__":
    main()
