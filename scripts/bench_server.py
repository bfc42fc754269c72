#!/usr/bin/env python3
"""Serving benchmark: aggregate generation throughput (tok/s) and time to first token (median,
p90) at 1, 4, 16 and 64 concurrent streaming clients, against a running mlxcel-server (--url) or
one it starts (--model DIR). Each client sends greedy /v1/completions requests back to back for
a fixed number of requests per level; tokens are counted from the server's usage chunk.

  scripts/bench_server.py --model DIR [--parallel 16] [--max-tokens 64] [--out docs/performance/server-cpu.md]
"""
import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]


def stream(host, port, prompt, max_tokens):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        conn.close()
        return None
    ttft, tokens, buf = None, 0, b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            p = ev[6:]
            if p == b"[DONE]":
                continue
            j = json.loads(p)
            if j.get("choices") and ttft is None:
                ttft = time.perf_counter() - t0
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
    conn.close()
    return ttft, tokens, time.perf_counter() - t0


def level(host, port, clients, requests, max_tokens):
    results, lock, nxt = [], threading.Lock(), [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= requests:
                return
            r = None
            while r is None:  # 429: retry after a pause
                r = stream(host, port, f"Request {i}: the history of the {i % 7}th century was", max_tokens)
                if r is None:
                    time.sleep(0.05)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in results if r[0] is not None)
    toks = sum(r[1] for r in results)
    per_stream = statistics.median(r[1] / r[2] for r in results if r[2] > 0)
    return {"clients": clients, "requests": len(results), "tokens": toks, "wall_s": wall,
            "tok_s": toks / wall, "ttft_median_s": statistics.median(ttfts),
            "ttft_p90_s": ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))], "per_stream_tok_s": per_stream}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--model", help="start build/cpu/bin/mlxcel-server on this folder")
    ap.add_argument("--build", default=os.environ.get("MLXCEL_BUILD_DIR", str(ROOT / "build" / "cpu")))
    ap.add_argument("--parallel", type=int, default=16, help="--parallel for a started server")
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=0, help="per level (default: 2 x clients, at least 4)")
    ap.add_argument("--out", help="write a Markdown report here")
    a = ap.parse_args()
    proc = None
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port
    else:
        if not a.model:
            ap.error("give --url or --model")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        host = "127.0.0.1"
        proc = subprocess.Popen([str(Path(a.build) / "bin" / "mlxcel-server"), "-m", a.model, "--port", str(port),
                                 "--parallel", str(a.parallel), "--max-queue", "256", "--ctx-size", "2048"],
                                stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                c = http.client.HTTPConnection(host, port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
    try:
        stream(host, port, "warm up", 4)
        rows = []
        for n in [int(x) for x in a.levels.split(",")]:
            reqs = a.requests or max(4, 2 * n)
            r = level(host, port, n, reqs, a.max_tokens)
            rows.append(r)
            print(f"{n:3d} clients: {r['tok_s']:8.1f} tok/s aggregate, per stream {r['per_stream_tok_s']:6.1f} tok/s, "
                  f"TTFT median {r['ttft_median_s'] * 1000:7.1f} ms p90 {r['ttft_p90_s'] * 1000:7.1f} ms "
                  f"({r['requests']} requests, {r['tokens']} tokens, {r['wall_s']:.1f} s)", flush=True)
    finally:
        if proc:
            proc.terminate()
            proc.wait()
    if a.out:
        single = rows[0]["tok_s"] if rows and rows[0]["clients"] == 1 else None
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
                   platform.processor())
        lines = [
            "# mlxcel-server throughput",
            "",
            f"Measured by `scripts/bench_server.py` (tree at commit `{commit}`) on a host with {cpu}"
            f" ({os.cpu_count()} cores visible), {time.strftime('%Y-%m-%d')}; the server ran on the device"
            " it picks by default (the GPU where one is present).",
            f"Model: `{a.model or a.url}`; greedy streaming /v1/completions, max_tokens {a.max_tokens}, server"
            f" --parallel {a.parallel}. Aggregate tok/s = generated tokens of all requests / wall time of the level;"
            " TTFT is measured at the client (request sent to first content chunk) and includes queueing.",
            "",
            "| clients | requests | aggregate tok/s | x single stream | per-stream tok/s | TTFT median ms | TTFT p90 ms |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            rel = f"{r['tok_s'] / single:.2f}" if single else "-"
            lines.append(f"| {r['clients']} | {r['requests']} | {r['tok_s']:.1f} | {rel} | {r['per_stream_tok_s']:.1f} |"
                         f" {r['ttft_median_s'] * 1000:.1f} | {r['ttft_p90_s'] * 1000:.1f} |")
        Path(a.out).write_text("\n".join(lines) + "\n")
        print("wrote", a.out)


if __name__ == "__main__":
    sys.exit(main())
