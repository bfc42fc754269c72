"""Shared pieces of the server tests: the tiny model fixture, a real mlxcel-server process on a
free loopback port, raw HTTP helpers (stdlib only) and the mlx-lm reference (greedy tokens and
log-probabilities from mlx-lm's own forward pass, prompts from transformers' chat template)."""
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("MLXCEL_BUILD_DIR", ROOT / "build" / "cpu"))
SERVER_BIN = BUILD / "bin" / "mlxcel-server"
MODEL_ID = "tiny-qwen3"
API_KEY = "sk-test-0123456789"

# The main server: 8 slots, 1024-token context, a queue of 24 beyond the slots.
SERVER_ARGS = ["--parallel", "8", "--ctx-size", "1024", "--max-queue", "24", "--timeout", "120"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProc:
    def __init__(self, model_dir: Path, args, log_path: Path):
        if not SERVER_BIN.exists():
            pytest.skip(f"{SERVER_BIN} is not built")
        self.port = free_port()
        self.host = "127.0.0.1"
        self.url = f"http://{self.host}:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        cmd = [str(SERVER_BIN), "-m", str(model_dir), "--alias", MODEL_ID, "--port", str(self.port)] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        deadline = time.time() + 90
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlxcel-server exited with {self.proc.returncode}: {self.log_text()}")
            try:
                st, body = get(self, "/health")
                if st == 200 and body.get("status") == "ok":
                    break
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"mlxcel-server did not become healthy: {self.log_text()}")
            time.sleep(0.1)

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def rss_kib(self) -> int:
        for line in open(f"/proc/{self.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def request(srv, method, path, body=None, headers=None, raw: bytes = None, timeout=60):
    """Returns (status, parsed JSON or text, response headers)."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers=h)
    r = conn.getresponse()
    text = r.read()
    conn.close()
    ctype = r.getheader("Content-Type", "")
    if "json" in ctype:
        return r.status, json.loads(text), dict(r.getheaders())
    return r.status, text.decode("utf-8", "replace"), dict(r.getheaders())


def get(srv, path, headers=None):
    st, body, _ = request(srv, "GET", path, headers=headers, timeout=5)
    return st, body


def post(srv, path, body=None, headers=None, raw=None, timeout=60):
    st, b, _ = request(srv, "POST", path, body=body, headers=headers, raw=raw, timeout=timeout)
    return st, b


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def sse_events(srv, path, body, headers=None, timeout=60):
    """Streams a request over raw HTTP; returns the decoded `data:` payloads (the [DONE] marker
    as the string "[DONE]")."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = conn.getresponse()
    assert r.status == 200, r.read()
    out = []
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            assert ev.startswith(b"data: "), ev
            payload = ev[6:].decode()
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    conn.close()
    return out


class Reference:
    """mlx-lm's model and transformers' tokenizer for the same folder."""

    def __init__(self, model_dir: Path):
        import mlx_lm
        self.model, wrapper = mlx_lm.load(str(model_dir))
        self.tok = wrapper._tokenizer

    def chat_ids(self, messages, **kwargs):
        out = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
        if isinstance(out, dict) or hasattr(out, "keys"):
            out = out["input_ids"]
        return list(out)

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids):
        return self.tok.decode(ids)

    def greedy(self, ids, n, eos=(151645, 151643)):
        """Greedy continuation with a KV cache: (token ids, logprob rows as numpy)."""
        import mlx.core as mx
        from mlx_lm.models.cache import make_prompt_cache
        cache = make_prompt_cache(self.model)
        x = mx.array([list(ids)])
        toks, rows = [], []
        for _ in range(n):
            logits = self.model(x, cache=cache)[0, -1].astype(mx.float32)
            lp = logits - mx.logsumexp(logits)
            t = int(mx.argmax(lp).item())
            rows.append(lp)
            if t in eos:
                break
            toks.append(t)
            x = mx.array([[t]])
        return toks, rows
