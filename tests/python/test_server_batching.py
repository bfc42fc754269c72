"""Continuous batching changes nothing: with greedy sampling, each of N concurrent requests
returns exactly the tokens (and log-probabilities) it returns alone. Prompts of mixed lengths
make long prefills (several chunks) interleave with other requests' decode steps."""
import threading
import time

from _server_util import get, post

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()


def prompts():
    out = []
    for i in range(8):
        n = [3, 40, 700, 9, 260, 1, 520, 90][i]  # 700 and 520 words: several 256-token prefill chunks
        out.append(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(n)) + f" {i}:")
    return out


def run(server, prompt):
    st, body = post(server, "/v1/completions", {"prompt": prompt, "max_tokens": 20, "temperature": 0,
                                                "logprobs": 1}, timeout=120)
    assert st == 200, body
    c = body["choices"][0]
    return c["text"], c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"], c["finish_reason"]


def test_concurrent_greedy_equals_alone(server):
    ps = prompts()
    alone = [run(server, p) for p in ps]
    for i in range(len(ps)):
        assert alone[i][3] == "length" and len(alone[i][1]) == 20

    results = [None] * len(ps)
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            st, h = get(server, "/health")
            peak[0] = max(peak[0], h.get("slots_active", 0))
            time.sleep(0.005)

    barrier = threading.Barrier(len(ps))

    def worker(i):
        barrier.wait()
        results[i] = run(server, ps[i])

    w = threading.Thread(target=watch)
    w.start()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(ps))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    w.join()
    assert peak[0] >= 4, f"requests did not overlap (peak active slots {peak[0]})"
    for i in range(len(ps)):
        text, toks, lps, fin = results[i]
        assert toks == alone[i][1], f"request {i}: tokens differ when batched"
        assert text == alone[i][0]
        assert fin == "length"
        # The forward pass is row-independent: the same rows give the same numbers.
        assert max(abs(a - b) for a, b in zip(lps, alone[i][2])) < 1e-4
