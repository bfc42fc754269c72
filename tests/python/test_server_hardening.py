"""The server against hostile clients (issue 14): deep JSON, numbers outside every range, request
smuggling shapes, header floods, oversized chunked bodies, slowloris and idle-connection floods,
pipelining, browser-reachable requests without a key, a request whose logits turn NaN. Every test
runs a real server on 127.0.0.1 and ends by checking that it still serves."""
import json
import os
import resource
import socket
import threading
import time

import pytest

from _server_util import MODEL_ID, ServerProc, get, post, request

MSG = [{"role": "user", "content": "hi"}]
GREEDY = {"model": MODEL_ID, "messages": MSG, "max_tokens": 4, "temperature": 0}


def healthy(srv):
    st, h = get(srv, "/health")
    assert st == 200 and h["status"] == "ok", h


def send_until_answered(s, first: bytes, piece: bytes, limit: int):
    """Sends `first`, then `piece` repeatedly up to `limit` bytes, stopping as soon as the server
    answers (as curl does); returns (bytes sent after `first`, the answer's first bytes)."""
    import select
    s.sendall(first)
    sent = 0
    try:
        while sent < limit:
            if select.select([s], [], [], 0)[0]:
                break
            s.sendall(piece)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.settimeout(5)
    try:
        got = s.recv(65536)
    except (ConnectionResetError, socket.timeout):
        got = b""
    return sent, got


def raw_exchange(srv, data: bytes, timeout=10.0, read_all=True) -> bytes:
    """Sends raw bytes and returns what comes back until the server closes (or `timeout`)."""
    s = socket.create_connection((srv.host, srv.port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        end = time.time() + timeout
        while time.time() < end:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
            if not read_all and b"\r\n\r\n" in out:
                break
        return out
    finally:
        s.close()


def status_of(resp: bytes) -> int:
    assert resp.startswith(b"HTTP/1.1 "), resp[:200]
    return int(resp[9:12])


def post_bytes(path: str, body: bytes, extra=b"", ctype=b"application/json") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + ctype + b"\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


# ---- JSON depth, numbers, types ------------------------------------------------------------------

DEEP = "[" * 28000 + "]" * 28000


@pytest.mark.parametrize("where", ["extra message key", "tools", "chat_template_kwargs", "tool-call arguments"])
def test_deep_json_is_a_400_and_the_server_keeps_serving(server, where):
    if where == "extra message key":
        body = '{"messages": [{"role": "user", "content": "hi", "extra": %s}], "max_tokens": 2}' % DEEP
    elif where == "tools":
        body = '{"messages": [{"role": "user", "content": "hi"}], "tools": %s, "max_tokens": 2}' % DEEP
    elif where == "chat_template_kwargs":
        body = '{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": %s}}' % DEEP
    else:
        # The arguments string itself is valid JSON nested 28k deep: it must stay a string (or be
        # refused), never be expanded and recursed over.
        msg = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP}}]}
        body = json.dumps({"messages": [msg, {"role": "user", "content": "hi"}], "max_tokens": 2,
                           "temperature": 0})
    st, b = post(server, "/v1/chat/completions", raw=body.encode())
    if where == "tool-call arguments":
        assert st in (200, 400), b
    else:
        assert st == 400, b
        assert "deeper than" in b["error"]["message"]
    healthy(server)
    st, b = post(server, "/v1/chat/completions", GREEDY)
    assert st == 200 and b["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("raw,param", [
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9223372036854775808.0}', "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e999}', None),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 1e999}', None),
    (b'{"messages": [{"role": "user", "content": "hi"}], "seed": 1e300}', "seed"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "top_k": -1e300}', "top_k"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"1": 1e999}}', None),
])
def test_numbers_outside_every_range_are_400(server, raw, param):
    st, b = post(server, "/v1/chat/completions", raw=raw)
    assert st == 400, b
    if param:
        assert b["error"]["param"] == param
    healthy(server)


def test_tokenize_wrong_types_are_400(server):
    for body, param in [({"content": "x", "add_special": "yes"}, "add_special"), ({"content": 5}, "content"),
                        ({"content": ["x"]}, "content")]:
        st, b = post(server, "/tokenize", body)
        assert st == 400 and b["error"]["param"] == param, b
    st, b = post(server, "/tokenize", raw=b'{"content": "x", "add_special": 1e999}')
    assert st == 400, b
    st, b = post(server, "/tokenize", {"content": "hello", "add_special": False})
    assert st == 200 and b["tokens"]


def test_huge_prompt_is_refused_before_tokenizing(server):
    # 7 MiB of text cannot fit a 1024-token context; the answer must not wait for the tokenizer.
    body = json.dumps({"prompt": "hello world " * ((7 << 20) // 12), "max_tokens": 2}).encode()
    t0 = time.time()
    st, b = post(server, "/v1/completions", raw=body)
    dt = time.time() - t0
    assert st == 400 and b["error"]["param"] == "prompt", b
    assert "bytes" in b["error"]["message"]
    assert dt < 1.0, f"took {dt:.2f} s"
    healthy(server)


# ---- HTTP framing ---------------------------------------------------------------------------------

def test_wrong_method_is_405_with_allow(server):
    for method, path, allow in [("GET", "/v1/chat/completions", "POST"), ("POST", "/health", "GET"),
                                ("DELETE", "/v1/models", "GET"), ("PUT", "/tokenize", "POST")]:
        st, b, h = request(server, method, path, body={} if method != "GET" else None)
        assert st == 405, (method, path, b)
        assert allow in h.get("Allow", ""), h
        assert b["error"]["code"] == "method_not_allowed"
    st, b, _ = request(server, "GET", "/nope")
    assert st == 404


def test_duplicate_content_length_is_refused(server):
    body = json.dumps(GREEDY).encode()
    for extra in [b"Content-Length: %d\r\n" % len(body), b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n"]:
        resp = raw_exchange(server, post_bytes("/v1/chat/completions", body, extra=extra))
        assert status_of(resp) == 400, resp[:300]
    healthy(server)


def test_json_content_type_is_required_on_post(server):
    body = json.dumps(GREEDY).encode()
    for ctype in [b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data; boundary=x"]:
        resp = raw_exchange(server, post_bytes("/v1/chat/completions", body, ctype=ctype))
        assert status_of(resp) == 415, resp[:300]
    resp = raw_exchange(server, post_bytes("/v1/chat/completions", body, ctype=b"application/json; charset=utf-8"))
    assert status_of(resp) == 200


def test_foreign_host_and_origin_are_refused_without_a_key(server):
    # DNS rebinding: a page on evil.example resolves its own name to 127.0.0.1.
    st, b, _ = request(server, "GET", "/v1/models", headers={"Host": "evil.example:%d" % server.port})
    assert st == 403 and b["error"]["code"] == "forbidden_host", b
    st, b, _ = request(server, "POST", "/v1/chat/completions", body=GREEDY,
                       headers={"Origin": "https://evil.example"})
    assert st == 403 and b["error"]["code"] == "forbidden_origin", b
    for host in ["localhost:%d" % server.port, "127.0.0.1", "[::1]:%d" % server.port]:
        st, _, _ = request(server, "GET", "/v1/models", headers={"Host": host})
        assert st == 200, host
    st, _, _ = request(server, "POST", "/v1/chat/completions", body=GREEDY, headers={"Origin": "http://localhost:3000"})
    assert st == 200


def test_header_limits(server):
    many = b"".join(b"X-F%d: v\r\n" % i for i in range(500))
    resp = raw_exchange(server, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many + b"\r\n")
    assert status_of(resp) == 431, resp[:200]
    rss0 = server.rss_kib()
    # 32 MiB of header bytes: refused after the first 16 KiB, memory does not follow the flood.
    s = socket.create_connection((server.host, server.port), timeout=10)
    sent, got = send_until_answered(s, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ", b"a" * 65536, 32 << 20)
    s.close()
    assert got.startswith(b"HTTP/1.1 431"), (sent, got[:100])
    assert sent < (8 << 20), sent
    grown = server.rss_kib() - rss0
    print(f"header flood: refused after {sent} bytes, RSS grew {grown} KiB")
    assert grown < 10 * 1024
    healthy(server)


def test_pipelined_requests_are_answered_in_order(server):
    reqs = b""
    for i in range(5):
        body = json.dumps({"content": "word%d" % i}).encode()
        reqs += post_bytes("/tokenize", body)
    reqs += b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    resp = raw_exchange(server, reqs, timeout=10)
    parts = resp.split(b"HTTP/1.1 ")[1:]
    assert len(parts) == 6, resp[:2000]
    expected = []
    for i in range(5):
        st, b = post(server, "/tokenize", {"content": "word%d" % i})
        expected.append(b["tokens"])
    for i, p in enumerate(parts[:5]):
        assert p.startswith(b"200")
        body = p.split(b"\r\n\r\n", 1)[1]
        assert json.loads(body)["tokens"] == expected[i]
    assert parts[5].startswith(b"200") and b'"status":"ok"' in parts[5]


def test_keep_alive_requests_pay_no_nagle_delay(server):
    import http.client
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    times = []
    for i in range(30):
        t0 = time.perf_counter()
        conn.request("POST", "/tokenize", body=json.dumps({"content": "x%d" % i}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        times.append(time.perf_counter() - t0)
    conn.close()
    times.sort()
    print(f"keep-alive /tokenize: median {times[len(times) // 2] * 1000:.2f} ms, max {times[-1] * 1000:.2f} ms")
    assert times[len(times) // 2] < 0.02, times  # delayed ACK + Nagle would add ~40 ms each


# ---- bodies -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_body_server(server_model_dir, tmp_path_factory):
    srv = ServerProc(server_model_dir, ["--parallel", "2", "--ctx-size", "256", "--max-body-bytes", "1048576"],
                     tmp_path_factory.mktemp("small-body") / "server.log")
    yield srv
    srv.stop()


def test_oversized_chunked_body_is_413_without_memory_growth(small_body_server):
    srv = small_body_server
    rss0 = srv.rss_kib()
    for _ in range(3):
        s = socket.create_connection((srv.host, srv.port), timeout=10)
        chunk = b"%x\r\n" % 65536 + b"a" * 65536 + b"\r\n"
        # 64 MiB offered against a 1 MiB limit.
        sent, got = send_until_answered(s, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                           b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                                        chunk, 64 << 20)
        s.close()
        assert got.startswith(b"HTTP/1.1 413"), (sent, got[:200])
        assert sent < (16 << 20), "the server kept reading a body far past its limit"
    grown = srv.rss_kib() - rss0
    print(f"3 chunked bodies of up to 64 MiB against a 1 MiB limit: RSS grew {grown} KiB")
    assert grown < 10 * 1024, (rss0, srv.rss_kib())
    # A body within the limit, chunked, works.
    body = json.dumps({"prompt": "hello", "max_tokens": 2, "temperature": 0}).encode()
    data = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    resp = raw_exchange(srv, data)
    assert status_of(resp) == 200, resp[:300]
    healthy(srv)


# ---- connection floods ------------------------------------------------------------------------------

def test_slowloris_and_idle_connections_do_not_starve_clients(server):
    need = 2400
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need + 1000), hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need + 200:
        pytest.skip(f"ulimit -n is {soft}; this test needs {need + 200}")
    slow, idle = [], []
    stop = threading.Event()
    try:
        for _ in range(200):
            s = socket.create_connection((server.host, server.port), timeout=10)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append(s)
        for _ in range(2000):
            idle.append(socket.create_connection((server.host, server.port), timeout=10))

        def drip():  # one header byte per socket every 0.5 s, as slowloris does
            while not stop.wait(0.5):
                for s in slow:
                    try:
                        s.send(b"X")
                    except OSError:
                        pass
        t = threading.Thread(target=drip, daemon=True)
        t.start()
        time.sleep(1.0)
        t0 = time.time()
        st, h = get(server, "/health")
        dt_health = time.time() - t0
        assert st == 200 and h["status"] == "ok"
        t0 = time.time()
        st, b = post(server, "/v1/chat/completions", GREEDY, timeout=10)
        dt_chat = time.time() - t0
        assert st == 200 and b["usage"]["completion_tokens"] >= 1
        print(f"with 200 slowloris + 2000 idle connections: /health {dt_health * 1000:.1f} ms, "
              f"greedy chat {dt_chat * 1000:.1f} ms")
        assert dt_health < 1.0 and dt_chat < 1.0, (dt_health, dt_chat)
    finally:
        stop.set()
        for s in slow + idle:
            s.close()
    healthy(server)


def test_slowloris_is_cut_by_the_read_timeout(server_model_dir, tmp_path_factory):
    srv = ServerProc(server_model_dir, ["--parallel", "1", "--ctx-size", "256", "--read-timeout", "1",
                                        "--idle-timeout", "2"],
                     tmp_path_factory.mktemp("timeouts") / "server.log")
    try:
        s = socket.create_connection((srv.host, srv.port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        t0 = time.time()
        closed = False
        while time.time() - t0 < 5:
            try:
                s.send(b"X")
            except OSError:
                closed = True
                break
            s.settimeout(0.3)
            try:
                if s.recv(100) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
        assert closed and time.time() - t0 < 3, "a dripping request outlived the 1 s read timeout"
        s.close()
        idle = socket.create_connection((srv.host, srv.port), timeout=10)
        idle.settimeout(5)
        t0 = time.time()
        assert idle.recv(100) == b""
        assert 1.5 < time.time() - t0 < 4, "the idle timeout is 2 s"
        idle.close()
        healthy(srv)
    finally:
        srv.stop()


# ---- engine isolation -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nan_server(server_model_dir, tmp_path_factory):
    srv = ServerProc(server_model_dir, ["--parallel", "4", "--ctx-size", "512", "--debug-step-delay-ms", "20",
                                        "--debug-nan-marker", "POISON-NAN"],
                     tmp_path_factory.mktemp("nan") / "server.log")
    yield srv
    srv.stop()


def test_nan_logits_fail_one_request_only(nan_server):
    srv = nan_server
    result = {}

    def long_request():
        result["r"] = post(srv, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40,
                                                     "temperature": 0}, timeout=60)
    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)  # the long request is generating, so the NaN one shares its steps
    st, b = post(srv, "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "POISON-NAN please"}], "max_tokens": 8}, timeout=30)
    assert st == 500, b
    assert "non-finite logits" in b["error"]["message"]
    st_h, h = get(srv, "/health")
    assert st_h == 200 and h["status"] == "ok", h
    t.join(60)
    st, b = result["r"]
    assert st == 200 and b["usage"]["completion_tokens"] >= 1, b
    # The streaming form ends with an error event and [DONE].
    import http.client
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", body=json.dumps(
        {"messages": [{"role": "user", "content": "POISON-NAN"}], "max_tokens": 8, "stream": True}),
        headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    events = [e[6:] for e in text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]" and "non-finite logits" in events[-2], events
    st, b = post(srv, "/v1/chat/completions", GREEDY)
    assert st == 200
    healthy(srv)


# ---- flags --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", [["--timeout", "1e10"], ["--timeout", "0"], ["--timeout", "nan"],
                                  ["--read-timeout", "-1"], ["--max-connections", "0"]])
def test_out_of_range_flags_are_refused(server_model_dir, flag):
    import subprocess
    from _server_util import SERVER_BIN
    r = subprocess.run([str(SERVER_BIN), "-m", str(server_model_dir), "--port", "0"] + flag,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and r.returncode > 0, r
    assert flag[0] in r.stderr, r.stderr
