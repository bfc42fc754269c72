"""Hostile model folders (issue 14): model files come from downloads, so a damaged or malicious
tokenizer.json, chat template or shard must end in a clear error, never a crash or a hang."""
import json
import os
import shutil
import subprocess
import time

import pytest

from _server_util import MODEL_ID, SERVER_BIN, ServerProc, post


def clone(src, dst):
    """A copy of the model folder whose files are symlinks, except the ones a test rewrites."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        os.symlink(f, dst / f.name)
    return dst


def replace_file(d, name, text):
    (d / name).unlink()
    (d / name).write_text(text)


def start(model_dir, timeout=60):
    """Runs the server until it is healthy or exits; returns (proc or None, returncode, log)."""
    log = model_dir.parent / (model_dir.name + ".log")
    try:
        srv = ServerProc(model_dir, ["--parallel", "1", "--ctx-size", "256"], log)
        return srv, None, ""
    except RuntimeError as e:
        return None, None, str(e)


def run_to_exit(model_dir, timeout=30):
    r = subprocess.run([str(SERVER_BIN), "-m", str(model_dir), "--port", "0", "--ctx-size", "256"],
                       capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stderr


def test_deeply_nested_tokenizer_sequence_is_refused(server_model_dir, tmp_path):
    d = clone(server_model_dir, tmp_path / "m")
    # {"type": "Sequence", "normalizers": [ ... ]} nested 100000 deep, written without recursion;
    # the rest is a minimal valid tokenizer.json (the loader prefers it to vocab.json + merges.txt).
    deep = '{"type": "Sequence", "normalizers": [' * 100000 + '{"type": "NFC"}' + "]}" * 100000
    model = json.dumps({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []})
    (d / "tokenizer.json").write_text('{"normalizer": ' + deep + ', "model": ' + model + "}")
    rc, err = run_to_exit(d)
    assert rc > 0, (rc, err[-2000:])  # an exit code, not a signal
    assert "nests deeper than" in err, err[-2000:]


@pytest.mark.parametrize("template,expect", [
    ("{{ 1" + " + 1" * 100000 + " }}", "nests deeper"),
    ("{% if true %}" * 50000 + "x", "nests deeper"),
    ("{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}", "nests deeper"),
    ("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"),
    ("{{ 'x'|indent(1000000000000) }}", "exceeds"),
    ("{{ 'x'|center(1000000000000) }}", "exceeds"),
    ("{{ messages|tojson(indent=1000000000000) }}", "exceeds"),
])
def test_hostile_chat_templates_end_in_clear_errors(server_model_dir, tmp_path, template, expect):
    d = clone(server_model_dir, tmp_path / "m")
    cfg = json.loads((server_model_dir / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    replace_file(d, "tokenizer_config.json", json.dumps(cfg))
    srv, _, err = start(d)
    if srv is None:
        # Refused at load: the message says why, and the process exited normally.
        assert expect in err, err[-2000:]
        assert "exited with -" not in err, err[-2000:]
        return
    try:
        st, b = post(srv, "/v1/chat/completions", {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}],
                                                   "max_tokens": 2})
        assert st == 400, b
        assert expect in b["error"]["message"], b
        st, b = post(srv, "/v1/completions", {"prompt": "hello", "max_tokens": 2, "temperature": 0})
        assert st == 200
    finally:
        srv.stop()


def test_fifo_shard_is_refused_at_once(server_model_dir, tmp_path):
    d = clone(server_model_dir, tmp_path / "m")
    shard = next(p.name for p in server_model_dir.iterdir() if p.name.endswith(".safetensors"))
    raw = (server_model_dir / shard).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    names = [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]
    (d / shard).unlink()
    os.mkfifo(d / shard)
    index = {"metadata": {}, "weight_map": {k: shard for k in names}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    t0 = time.time()
    rc, err = run_to_exit(d, timeout=20)
    assert rc > 0, err[-2000:]
    assert "not a regular file" in err, err[-2000:]
    assert time.time() - t0 < 15
