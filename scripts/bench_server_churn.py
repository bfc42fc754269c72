#!/usr/bin/env python3
"""Churn benchmark (not a test): 64 clients send greedy requests (streaming and not, chat and
completion) back to back for a fixed time against an mlxcel-server it starts on 127.0.0.1; about a
third of them disconnect at a random moment. It reports:
  - lost or duplicated tokens: every completed answer must equal the answer the same request got
    alone before the load, and every cut stream must be a prefix of it;
  - the server's RSS, open descriptors and threads before, at the peak and after the load;
  - requests completed, cut, refused (429) and failed.
Exit status 1 when tokens were lost or duplicated, or fds / threads / RSS did not come back.

  scripts/bench_server_churn.py --model DIR [--minutes 5] [--clients 64] [--parallel 8]
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):", "List three colors:",
           "In 1905, Einstein", "The quick brown fox", "Q: What is 7 times 8?\nA:", "Dear diary,"]


def proc_stats(pid):
    rss = threads = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return {"rss_kib": rss, "threads": threads, "fds": fds}


def body_for(i, stream, chat, max_tokens):
    p = PROMPTS[i % len(PROMPTS)]
    if chat:
        b = {"messages": [{"role": "user", "content": p}], "max_tokens": max_tokens, "temperature": 0}
    else:
        b = {"prompt": p, "max_tokens": max_tokens, "temperature": 0}
    if stream:
        b["stream"] = True
    return b


def text_of_stream_events(events, chat):
    out, reasoning = "", ""
    for e in events:
        if e == "[DONE]" or "choices" not in e or not e["choices"]:
            continue
        c = e["choices"][0]
        if chat:
            d = c.get("delta", {})
            reasoning += d.get("reasoning_content") or ""
            out += d.get("content") or ""
        else:
            out += c.get("text") or ""
    return (reasoning + "\x00" + out) if reasoning else out


def run_one(port, i, stream, chat, max_tokens, cut_after=None):
    """Returns (status, text, complete). cut_after: close the socket after that many bytes."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = json.dumps(body_for(i, stream, chat, max_tokens)).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    try:
        s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        raw = b""
        while True:
            if cut_after is not None and len(raw) >= cut_after:
                break
            chunk = s.recv(4096 if cut_after is not None else 65536)
            if not chunk:
                break
            raw += chunk
    finally:
        s.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 "):
        return 0, "", False
    status = int(head[9:12])
    chunked = b"transfer-encoding: chunked" in head.lower()
    payload, complete = b"", False
    if chunked:
        while rest:
            line, sep, tail = rest.partition(b"\r\n")
            if not sep:
                break
            n = int(line, 16)
            if n == 0:
                complete = True
                break
            if len(tail) < n + 2:
                payload += tail[:n]
                break
            payload += tail[:n]
            rest = tail[n + 2:]
    else:
        payload = rest
        complete = cut_after is None
    if status != 200:
        return status, "", complete
    if stream:
        events = []
        for ev in payload.split(b"\n\n"):
            if ev.startswith(b"data: "):
                d = ev[6:].decode("utf-8", "replace")
                if d == "[DONE]":
                    events.append(d)
                else:
                    try:
                        events.append(json.loads(d))
                    except json.JSONDecodeError:
                        break  # a cut in the middle of an event
        if events and events[-1] != "[DONE]":
            complete = False
        if any(isinstance(e, dict) and "error" in e for e in events):
            return 500, "", complete
        return status, text_of_stream_events(events, chat), complete and events[-1:] == ["[DONE]"]
    try:
        j = json.loads(payload)
    except json.JSONDecodeError:
        return status, "", False
    if chat:
        m = j["choices"][0]["message"]
        rc = m.get("reasoning_content")
        return status, ((rc + "\x00") if rc else "") + (m.get("content") or ""), True
    return status, j["choices"][0]["text"], True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--server", default=str(ROOT / "build" / "cpu" / "bin" / "mlxcel-server"))
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--cut-fraction", type=float, default=0.33)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds of churn before the baseline")
    a = ap.parse_args()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open("/tmp/bench_server_churn.log", "wb")
    srv = subprocess.Popen([a.server, "-m", a.model, "--port", str(port), "--parallel", str(a.parallel),
                            "--ctx-size", "512", "--max-queue", str(a.clients)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline or srv.poll() is not None:
                sys.exit("the server did not start; see /tmp/bench_server_churn.log")
            time.sleep(0.2)

        # References: each request alone, before any load.
        ref = {}
        for i in range(len(PROMPTS)):
            for stream in (False, True):
                for chat in (False, True):
                    st, text, ok = run_one(port, i, stream, chat, a.max_tokens)
                    assert st == 200 and ok, (i, stream, chat, st)
                    ref[(i, stream, chat)] = text
        for i in range(len(PROMPTS)):
            for chat in (False, True):
                if ref[(i, False, chat)] != ref[(i, True, chat)]:
                    sys.exit(f"streamed and non-streamed answers differ for prompt {i} chat={chat}")
        # Warm-up: the same churn for a short while, so thread stacks, allocator arenas and the
        # prefix cache reach their working size before the baseline (as test_server_load does).
        warm_end = time.time() + a.warmup

        def warm(k):
            rng = random.Random(k)
            while time.time() < warm_end:
                cut = rng.randrange(200, 2500) if rng.random() < a.cut_fraction else None
                try:
                    run_one(port, rng.randrange(len(PROMPTS)), rng.random() < 0.6, rng.random() < 0.5,
                            a.max_tokens, cut)
                except OSError:
                    pass
        ws = [threading.Thread(target=warm, args=(k,)) for k in range(a.clients)]
        for t in ws:
            t.start()
        for t in ws:
            t.join()
        time.sleep(3.0)
        before = proc_stats(srv.pid)

        counts = {"completed": 0, "cut": 0, "refused": 0, "failed": 0, "lost_or_duplicated": 0}
        peak = dict(before)
        lock = threading.Lock()
        end = time.time() + a.minutes * 60
        bad = []

        def client(k):
            rng = random.Random(a.seed * 1000 + k)
            while time.time() < end:
                i = rng.randrange(len(PROMPTS))
                stream, chat = rng.random() < 0.6, rng.random() < 0.5
                cut = rng.randrange(200, 2500) if rng.random() < a.cut_fraction else None
                try:
                    st, text, complete = run_one(port, i, stream, chat, a.max_tokens, cut)
                except OSError:
                    st, text, complete = -1, "", False
                expect = ref[(i, stream, chat)]
                with lock:
                    if st == 429:
                        counts["refused"] += 1
                    elif st != 200:
                        if cut is None:
                            counts["failed"] += 1
                            bad.append((i, stream, chat, st))
                        else:
                            counts["cut"] += 1
                    elif complete:
                        counts["completed"] += 1
                        if text != expect:
                            counts["lost_or_duplicated"] += 1
                            bad.append((i, stream, chat, text[:80], expect[:80]))
                    else:
                        counts["cut"] += 1
                        # A cut stream may end inside a multi-byte character; compare code points.
                        if not expect.startswith(text.rstrip("\ufffd")):
                            counts["lost_or_duplicated"] += 1
                            bad.append(("cut", i, stream, chat, text[:80], expect[:80]))

        rss_trace = []

        def sampler():
            last = 0.0
            while time.time() < end:
                st = proc_stats(srv.pid)
                with lock:
                    for k in peak:
                        peak[k] = max(peak[k], st[k])
                if time.time() - last >= 30:
                    rss_trace.append(st["rss_kib"])
                    last = time.time()
                time.sleep(0.5)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
        threads.append(threading.Thread(target=sampler))
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
        time.sleep(3.0)  # let cancelled requests and closed connections settle
        after = proc_stats(srv.pid)

        rss_change = (after["rss_kib"] - before["rss_kib"]) / max(1, before["rss_kib"]) * 100
        print(f"churn: {a.clients} clients for {elapsed / 60:.1f} min, {a.parallel} slots, "
              f"max_tokens {a.max_tokens}, ~{a.cut_fraction:.0%} of requests cut")
        print(f"  completed {counts['completed']}, cut {counts['cut']}, refused (429) {counts['refused']}, "
              f"failed {counts['failed']}, lost or duplicated tokens in {counts['lost_or_duplicated']}")
        print(f"  RSS KiB before {before['rss_kib']}, peak {peak['rss_kib']}, after {after['rss_kib']} "
              f"({rss_change:+.1f}%)")
        print(f"  fds before {before['fds']}, peak {peak['fds']}, after {after['fds']}; "
              f"threads before {before['threads']}, peak {peak['threads']}, after {after['threads']}")
        print("  RSS KiB every 30 s under load:", " ".join(str(x) for x in rss_trace))
        for b in bad[:10]:
            print("  mismatch:", b)
        ok = (counts["lost_or_duplicated"] == 0 and counts["failed"] == 0 and abs(rss_change) <= 5.0 and
              after["fds"] <= before["fds"] and after["threads"] <= before["threads"])
        print("  result:", "OK" if ok else "PROBLEM")
        return 0 if ok else 1
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
