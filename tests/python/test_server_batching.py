"""Continuous batching changes nothing: with greedy sampling, each of N concurrent requests
returns exactly the tokens and log-probabilities it returns alone. Prompts of mixed lengths make
long prefills (several chunks) interleave with other requests' decode steps. The CPU kernels are
row-stable (an output row's arithmetic does not depend on the other rows of the step), so the
log-probabilities are compared bit for bit, on float32, bfloat16 and 4-bit checkpoints and with
both numerics modes."""
import threading
import time

import pytest

from _server_util import SERVER_ARGS, ServerProc, get, post

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()

VARIANTS = {
    # name: (dtype, quantization, numerics)
    "f32-fast": ("float32", None, "fast"),
    "bf16-fast": ("bfloat16", None, "fast"),
    "bf16-affine4-fast": ("bfloat16", {"group_size": 64, "bits": 4}, "fast"),
    "bf16-affine4-mlx": ("bfloat16", {"group_size": 64, "bits": 4}, "mlx"),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant_server(request, server, server_model_dir, tmp_path_factory):
    dtype, quant, numerics = VARIANTS[request.param]
    if request.param == "f32-fast":
        yield server  # the session's main server runs the float32 checkpoint
        return
    import server_model
    d = server_model.make(tmp_path_factory.mktemp("model-" + request.param) / "tiny-qwen3", dtype=dtype,
                          quantize=quant)
    srv = ServerProc(d, SERVER_ARGS + ["--numerics", numerics],
                     tmp_path_factory.mktemp("log-" + request.param) / "server.log")
    yield srv
    srv.stop()


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


def test_concurrent_greedy_equals_alone(variant_server):
    server = variant_server
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
        assert lps == alone[i][2], f"request {i}: log-probabilities differ when batched"
