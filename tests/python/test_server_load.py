"""Bounded load test on loopback: 64 concurrent streaming clients send 128 greedy requests, every
fourth disconnecting mid-stream. Only intended 429s (queue full) may fail; every completed stream
carries exactly the non-streamed text (no lost or duplicated tokens) and usage; at the end all
slots and KV blocks are free and the server's RSS is back near its post-warm-up baseline."""
import http.client
import json
import threading
import time

from _server_util import get, metric, post

CLIENTS = 64
REQUESTS = 128
MAX_TOKENS = 12
RSS_SLACK_KIB = 48 * 1024  # thread stacks/arenas touched by 64 concurrent connections
PROMPTS = [f"Story {i}: once upon a time in the land of {w}," for i, w in
           enumerate("oak ash elm fir yew pine birch cedar maple alder beech larch poplar willow hazel rowan".split())]


def body(i):
    return {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}


def stream_one(srv, i, disconnect_after):
    """Returns ("ok", text, usage) | ("429", ...) | ("disconnected", ...) | ("error", detail)."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=120)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body(i)).encode(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return (str(r.status), r.read().decode(errors="replace"), None)
        text, usage, buf, events, done = "", None, b"", 0, False
        while not done:
            chunk = r.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                payload = ev[len(b"data: "):].decode()
                if payload == "[DONE]":
                    done = True
                    break
                j = json.loads(payload)
                if "error" in j:
                    return ("error", payload, None)
                if j.get("usage"):
                    usage = j["usage"]
                if j["choices"]:
                    text += j["choices"][0]["text"]
                    events += 1
                if disconnect_after is not None and events >= disconnect_after:
                    return ("disconnected", text, None)
        return ("ok" if done else "error", text, usage)
    finally:
        conn.close()


def wait_idle(srv, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        st, h = get(srv, "/health")
        if st == 200 and h["slots_active"] == 0 and h["queued"] == 0:
            return h
        time.sleep(0.05)
    raise AssertionError(f"server not idle: {h}")


def test_load_64_clients_with_disconnects(server):
    # Reference texts, non-streamed, one at a time.
    ref = {}
    for p in PROMPTS:
        st, b = post(server, "/v1/completions", {"prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0})
        assert st == 200
        ref[p] = (b["choices"][0]["text"], b["usage"]["completion_tokens"])
    # Warm-up burst so the thread pool and allocator arenas exist before the baseline.
    ts = [threading.Thread(target=stream_one, args=(server, i, None)) for i in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wait_idle(server)
    rss0 = server.rss_kib()
    st, m0 = get(server, "/metrics")

    results = [None] * REQUESTS
    next_i = [0]
    too_many = []
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= REQUESTS:
                return
            # A 429 is the intended answer to a full queue: back off and retry, as clients do.
            for attempt in range(200):
                r = stream_one(server, i, 2 if i % 4 == 3 else None)
                if r[0] != "429":
                    break
                with lock:
                    too_many.append(r)
                time.sleep(0.1)
            results[i] = r

    t0 = time.time()
    ts = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=150)
    elapsed = time.time() - t0
    assert all(not t.is_alive() for t in ts), "clients hung"

    kinds = {}
    for i, r in enumerate(results):
        kinds[r[0]] = kinds.get(r[0], 0) + 1
        if r[0] == "ok":
            want_text, want_n = ref[PROMPTS[i % len(PROMPTS)]]
            assert r[1] == want_text, f"request {i}: streamed text differs"
            assert r[2]["completion_tokens"] == want_n
        elif r[0] == "disconnected":
            assert i % 4 == 3
            assert want_prefix(ref, i, r[1])
        else:
            raise AssertionError((i, r))
    for r in too_many:
        assert json.loads(r[1])["error"]["type"] == "rate_limit_error" or json.loads(r[1])["error"]["message"]
    kinds["429"] = len(too_many)
    assert kinds["ok"] == REQUESTS - REQUESTS // 4 and kinds["disconnected"] == REQUESTS // 4, kinds

    h = wait_idle(server)
    assert h["status"] == "ok"
    st, m1 = get(server, "/metrics")
    assert metric(m1, "mlxcel_kv_blocks_used") == 0
    assert metric(m1, "mlxcel_active_slots") == 0 and metric(m1, "mlxcel_queue_depth") == 0
    assert metric(m1, "mlxcel_requests_cancelled_total") > metric(m0, "mlxcel_requests_cancelled_total")
    rejected = metric(m1, "mlxcel_requests_rejected_total") - metric(m0, "mlxcel_requests_rejected_total")
    assert rejected == kinds.get("429", 0)
    rss1 = server.rss_kib()
    print(f"load: {kinds} in {elapsed:.1f} s; RSS {rss0} -> {rss1} KiB")
    assert rss1 <= rss0 + RSS_SLACK_KIB, (rss0, rss1)


def want_prefix(ref, i, text):
    return ref[PROMPTS[i % len(PROMPTS)]][0].startswith(text)
