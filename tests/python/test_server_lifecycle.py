"""Request lifecycle on a real server: a client that disconnects while its request is queued or
generating (streaming or not) frees its queue place or slot at once; `echo`; the server's
sampling-default flags. The engine sleeps 40 ms per step (--debug-step-delay-ms) so that the tiny
model keeps a slot busy long enough to observe."""
import http.client
import json
import socket
import time

import pytest

from _server_util import SERVER_ARGS, ServerProc, get, metric, post, request

LONG = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0.8, "seed": 1}


@pytest.fixture(scope="module")
def slow_server(server_model_dir, tmp_path_factory):
    srv = ServerProc(server_model_dir, ["--parallel", "1", "--ctx-size", "1024", "--max-queue", "4",
                                        "--debug-step-delay-ms", "40"],
                     tmp_path_factory.mktemp("slow") / "server.log")
    yield srv
    srv.stop()


def metrics(srv):
    st, text, _ = request(srv, "GET", "/metrics")
    assert st == 200
    return text


def open_request(srv, body):
    """Sends a request and returns the open socket without reading the answer."""
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def wait_for(pred, what, timeout=3.0):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def health(srv):
    return get(srv, "/health")[1]


@pytest.mark.parametrize("stream", [False, True])
def test_disconnect_while_queued_leaves_the_queue(slow_server, stream):
    srv = slow_server
    busy = open_request(srv, dict(LONG, stream=True))  # takes the only slot for ~16 s
    wait_for(lambda: health(srv)["slots_active"] == 1, "the long request to start")
    cancelled0 = metric(metrics(srv), "mlxcel_requests_cancelled_total")
    queued = open_request(srv, dict(LONG, stream=stream))
    wait_for(lambda: health(srv)["queued"] == 1, "the second request to queue")
    t0 = time.time()
    queued.close()
    wait_for(lambda: health(srv)["queued"] == 0, "the queue to drop the disconnected request")
    assert time.time() - t0 < 2.0
    assert metric(metrics(srv), "mlxcel_requests_cancelled_total") == cancelled0 + 1
    assert health(srv)["slots_active"] == 1, "the running request must be unaffected"
    busy.close()
    wait_for(lambda: health(srv)["slots_active"] == 0, "the slot to free after the stream closed")


@pytest.mark.parametrize("stream", [False, True])
def test_disconnect_while_generating_frees_the_slot(slow_server, stream):
    srv = slow_server
    gen0 = metric(metrics(srv), "mlxcel_generated_tokens_total")
    s = open_request(srv, dict(LONG, stream=stream))
    wait_for(lambda: health(srv)["slots_active"] == 1, "the request to start")
    time.sleep(0.5)
    t0 = time.time()
    s.close()
    wait_for(lambda: health(srv)["slots_active"] == 0, "the slot to free")
    assert time.time() - t0 < 2.0
    generated = metric(metrics(srv), "mlxcel_generated_tokens_total") - gen0
    assert generated < 100, f"the request kept generating after the disconnect ({generated} tokens)"


def test_completion_echo(server):
    prompt = "The capital of France is"
    st, plain = post(server, "/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0})
    assert st == 200
    st, echoed = post(server, "/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0,
                                                  "echo": True})
    assert st == 200
    assert echoed["choices"][0]["text"] == prompt + plain["choices"][0]["text"]
    assert echoed["usage"] == plain["usage"] or echoed["usage"]["completion_tokens"] == 6
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 6, "temperature": 0,
                                                        "echo": True, "stream": True}),
                 {"Content-Type": "application/json"})
    raw = conn.getresponse().read().decode()
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in raw.split("\n\n")
                   if e.startswith("data: {") and json.loads(e[6:])["choices"])
    assert text == echoed["choices"][0]["text"]
    st, err = post(server, "/v1/completions", {"prompt": prompt, "echo": True, "logprobs": 1})
    assert st == 400 and err["error"]["param"] == "echo"


def test_sampling_default_flags(server_model_dir, tmp_path):
    srv = ServerProc(server_model_dir, SERVER_ARGS + ["--temp", "0", "--top-k", "5"], tmp_path / "log")
    try:
        body = {"prompt": "Hello there", "max_tokens": 12}
        a = post(srv, "/v1/completions", body)[1]["choices"][0]["text"]
        b = post(srv, "/v1/completions", body)[1]["choices"][0]["text"]
        greedy = post(srv, "/v1/completions", dict(body, temperature=0))[1]["choices"][0]["text"]
        assert a == b == greedy, "--temp 0 must make requests without a temperature greedy"
        # A request's own temperature overrides the default.
        outs = {post(srv, "/v1/completions", dict(body, temperature=1.5, seed=s))[1]["choices"][0]["text"]
                for s in range(4)}
        assert len(outs) > 1
    finally:
        srv.stop()
    bad = ServerProc.__new__(ServerProc)
    import subprocess
    from _server_util import SERVER_BIN
    r = subprocess.run([str(SERVER_BIN), "-m", str(server_model_dir), "--temp", "-1"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "temperature" in r.stderr.lower()
