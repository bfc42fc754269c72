"""Smoke test of mlxcel-server on a GPU with the openai client (issue: the server runs on the GPU):
starts the server on MODEL with --device gpu, then a chat completion, a streamed one, a seeded
sampled pair (equal), a JSON-mode answer (parses) and /health; prints one line per check and
exits 1 on any failure.
    python3 scripts/gpu_server_smoke.py SERVER_BINARY MODEL_DIR [--device gpu]
"""
import json
import socket
import subprocess
import sys
import time
import urllib.request

from openai import OpenAI


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    binary, model = sys.argv[1], sys.argv[2]
    device = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--device" else "gpu"
    port = free_port()
    proc = subprocess.Popen([binary, "-m", model, "--port", str(port), "--device", device, "--parallel", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    fails = 0

    def report(name, ok, detail=""):
        nonlocal fails
        fails += 0 if ok else 1
        print(f"{name:28s} {'ok' if ok else 'FAIL'}  {detail}", flush=True)

    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(base + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("server did not become healthy")
        client = OpenAI(base_url=base + "/v1", api_key="none")
        model_id = client.models.list().data[0].id
        msgs = [{"role": "user", "content": "Write one sentence about GPUs."}]
        t0 = time.time()
        r = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=32, temperature=0)
        report("chat", bool(r.choices[0].message.content) and r.usage.completion_tokens > 0,
               f"{r.usage.completion_tokens} tokens in {time.time() - t0:.2f} s, finish {r.choices[0].finish_reason}")
        parts = [c.choices[0].delta.content or "" for c in
                 client.chat.completions.create(model=model_id, messages=msgs, max_tokens=32, temperature=0, stream=True)
                 if c.choices]
        report("chat stream", "".join(parts) == r.choices[0].message.content,
               f"{len(parts)} chunks, equal to the non-streamed greedy answer")
        a, b = [client.chat.completions.create(model=model_id, messages=msgs, max_tokens=24, temperature=0.9, top_p=0.9,
                                               seed=1234).choices[0].message.content for _ in range(2)]
        report("seeded sampling", a == b and bool(a), "two seeded answers equal")
        j = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Give JSON."}],
                                           max_tokens=48, temperature=0.7, seed=3,
                                           response_format={"type": "json_object"})
        txt = j.choices[0].message.content
        ok = True
        if j.choices[0].finish_reason == "stop":
            try:
                json.loads(txt)
            except ValueError:
                ok = False
        report("json_object", ok, f"finish {j.choices[0].finish_reason}: {txt[:60]!r}")
        with urllib.request.urlopen(base + "/health", timeout=2) as h:
            report("health after", h.status == 200)
    except Exception as e:  # noqa: BLE001 (a smoke test reports everything)
        report("exception", False, repr(e))
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
        if fails:
            print(out[-3000:])
    print(f"gpu_server_smoke: {'PASS' if fails == 0 else 'FAIL'} ({fails} failed)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
