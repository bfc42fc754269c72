"""`mlxcel bench` on the CPU over a small `mlxcel synth` checkpoint: the CSV row carries the run's shape
and provenance, and its byte accounting agrees with what MLX reads from the checkpoint and with
the config's KV geometry. Timings themselves are never asserted (benchmarks do not pass or fail
on speed)."""
import csv
import json
import subprocess

import pytest

from _quant_util import CLI

mx = pytest.importorskip("mlx.core")


def run(*args, timeout=300):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench") / "smol"
    r = run("synth", "--like", "smollm2-135m", "--layers", "2", "--no-tokenizer", d)
    assert r.returncode == 0, r.stderr
    return d


def test_csv_row_and_byte_accounting(model, tmp_path):
    out = tmp_path / "b.csv"
    for batch in (1, 3):
        r = run("bench", "-m", model, "-p", "20", "-g", "5", "--repeat", "1", "--batch", batch, "-t", "2",
                "--csv", out)
        assert r.returncode == 0, r.stderr
        assert "| tg5 b%d |" % batch in r.stdout and "machine: 2 threads" in r.stdout, r.stdout
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 2
    cfg = json.loads((model / "config.json").read_text())
    tensors = mx.load(str(model / "model.safetensors"))
    # The model counts its matrices (norm vectors are a few KiB, not streamed as weights).
    weight_bytes = sum(v.nbytes for k, v in tensors.items() if not k.endswith("norm.weight"))
    # K and V of every layer, bf16 (the checkpoint's activation dtype).
    kv_pos = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"]) * 2
    for row, batch in zip(rows, (1, 3)):
        assert (row["shape"], row["quant"], row["backend"].split()[0]) == ("smollm2-135m", "affine4-g64", "cpu")
        assert (int(row["prompt_tokens"]), int(row["gen_tokens"]), int(row["batch"]), int(row["repeats"])) == (20, 5, batch, 1)
        assert len(row["commit"]) >= 7 and row["date"].endswith("Z") and row["runtime"] == "-"
        assert int(row["weight_bytes"]) == weight_bytes
        assert int(float(row["kv_bytes_per_position"])) == kv_pos
        # Tied embeddings: a decode step reads every matrix, the LM head being the embedding.
        assert weight_bytes * 0.99 <= float(row["decode_weight_bytes"]) <= weight_bytes * 1.01
        expect = (float(row["decode_weight_bytes"]) + batch * kv_pos * (20 + 5 / 2)) / batch
        assert abs(float(row["bytes_per_token"]) - expect) <= 1e-6 * expect
        bw, roof, tg = float(row["bandwidth_gbs"]), float(row["roofline_tok_s"]), float(row["decode_tok_s"])
        assert bw > 0 and float(row["prefill_tok_s"]) > 0 and tg > 0
        assert abs(roof - bw * 1e9 / float(row["bytes_per_token"])) <= 1e-6 * roof
        assert abs(float(row["decode_roofline_fraction"]) - tg / roof) <= 1e-6
        assert int(row["host_peak_rss_bytes"]) > 0


def test_bad_input(model, tmp_path):
    foreign = tmp_path / "other.csv"
    foreign.write_text("commit,backend,device\n")
    r = run("bench", "-m", model, "-p", "8", "-g", "2", "-r", "1", "--csv", foreign)
    assert r.returncode == 2 and "different header" in r.stderr, r.stderr
    r = run("bench", "-m", model, "-p", "8000", "-g", "1000", "-r", "1")
    assert r.returncode == 2 and "context" in r.stderr, r.stderr
    r = run("bench", "-m", model, "--batch", "0")
    assert r.returncode == 2 and "--batch" in r.stderr, r.stderr
