"""Graceful shutdown (docs/server.md): on SIGTERM the server stops accepting, lets running
requests finish within --shutdown-grace, ends every stream still open with an error event and
[DONE], and exits 0; a second signal exits at once; a client dripping header bytes does not keep
it alive."""
import json
import signal
import socket
import threading
import time

from _server_util import ServerProc


def open_stream(srv, max_tokens):
    s = socket.create_connection((srv.host, srv.port), timeout=60)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0.8, "seed": 3,
                       "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def read_stream(s, out, i):
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        out[i] = ("error", repr(e), data)
        return
    out[i] = ("closed", None, data)


def sse_payloads(raw: bytes):
    """Decodes a chunked SSE response; returns (status, payloads, terminated)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0
    text, terminated = b"", False
    while body:
        line, _, rest = body.partition(b"\r\n")
        n = int(line, 16)
        if n == 0:
            terminated = True
            break
        text += rest[:n]
        body = rest[n + 2:]
    events = [e[6:].decode() for e in text.split(b"\n\n") if e.startswith(b"data: ")]
    return status, events, terminated


def test_shutdown_under_32_streams(server_model_dir, tmp_path_factory):
    srv = ServerProc(server_model_dir, ["--parallel", "8", "--ctx-size", "1024", "--max-queue", "32",
                                        "--debug-step-delay-ms", "30", "--shutdown-grace", "2"],
                     tmp_path_factory.mktemp("shutdown") / "server.log")
    socks = [open_stream(srv, 600) for _ in range(32)]
    out = [None] * 32
    threads = [threading.Thread(target=read_stream, args=(s, out, i)) for i, s in enumerate(socks)]
    for t in threads:
        t.start()
    time.sleep(1.5)  # 8 streams generating, 24 queued
    dripper = socket.create_connection((srv.host, srv.port), timeout=10)
    dripper.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finishes its headers
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rc = srv.proc.wait(15)
    dt = time.time() - t0
    for t in threads:
        t.join(10)
    dripper.close()
    srv.log.close()
    assert rc == 0, srv.log_path.read_text()[-2000:]
    assert dt < 2 + 2.5, f"exit took {dt:.1f} s with a 2 s grace"
    finished = errored = 0
    for i, o in enumerate(out):
        assert o is not None and o[0] == "closed", (i, o)
        status, events, terminated = sse_payloads(o[2])
        assert status == 200, o[2][:300]
        assert terminated, f"stream {i} was cut without the final chunk: {events[-3:]}"
        assert events[-1] == "[DONE]", events[-3:]
        last = json.loads(events[-2])
        if "error" in last:
            errored += 1
            assert "shutting down" in last["error"]["message"]
        else:
            finished += 1
            assert last["choices"][0]["finish_reason"] in ("stop", "length")
    assert errored >= 24, (finished, errored)  # the queued ones at least
    print(f"shutdown under 32 streams: exit 0 after {dt:.2f} s, {finished} finished, {errored} ended with an error event")


def test_idle_shutdown_is_immediate_and_second_signal_exits_at_once(server_model_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("shutdown2")
    srv = ServerProc(server_model_dir, ["--parallel", "1", "--ctx-size", "256"], d / "a.log")
    idle = [socket.create_connection((srv.host, srv.port), timeout=10) for _ in range(20)]
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(10) == 0
    assert time.time() - t0 < 1.5, "idle keep-alive connections held the shutdown"
    for s in idle:
        s.close()
    srv.log.close()

    srv = ServerProc(server_model_dir, ["--parallel", "1", "--ctx-size", "1024", "--debug-step-delay-ms", "50",
                                        "--shutdown-grace", "60"], d / "b.log")
    s = open_stream(srv, 900)
    time.sleep(1.0)
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert srv.proc.poll() is None, "the first signal must wait for the running request"
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rc = srv.proc.wait(10)
    assert time.time() - t0 < 1.0
    assert rc != 0  # not a graceful exit
    s.close()
    srv.log.close()
