"""bench/compare.py on small hand-made inputs: an `mlxcel bench` CSV, llama-bench JSON (the field
names llama-bench's `-o json` writes) and mlx peer JSON lines. Expected ratios are the hand
arithmetic of the numbers below."""
import csv
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPARE = ROOT / "bench" / "compare.py"

HEADER = ("date,commit,model,shape,quant,backend,device,arch,runtime,threads,prompt_tokens,gen_tokens,batch,"
          "repeats,prefill_tok_s,decode_tok_s,peak_device_bytes,host_peak_rss_bytes,weight_bytes,"
          "decode_weight_bytes,kv_bytes_per_position,bytes_per_token,bandwidth_gbs,bandwidth_probe,"
          "roofline_tok_s,decode_roofline_fraction").split(",")


def ours_row(commit, shape, p, g, b, pp, tg, frac, quant="affine4-g64"):
    return dict(date="2026-12-03T00:00:00Z", commit=commit, model="/s/" + shape, shape=shape, quant=quant,
                backend="cuda:0 NVIDIA H200 (sm_90)", device="NVIDIA H200", arch="sm_90", runtime="CUDA 13.0",
                threads=16, prompt_tokens=p, gen_tokens=g, batch=b, repeats=3, prefill_tok_s=pp, decode_tok_s=tg,
                peak_device_bytes=1, host_peak_rss_bytes=1, weight_bytes=1, decode_weight_bytes=1,
                kv_bytes_per_position=1, bytes_per_token=1, bandwidth_gbs=4000, bandwidth_probe="device d2d copy",
                roofline_tok_s=tg / frac, decode_roofline_fraction=frac)


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        w.writeheader()
        for r in rows:
            w.writerow(r)


def llama_row(fname, mtype, n_prompt, n_gen, ts):
    return {"build_commit": "0c1e570", "backends": "CUDA", "gpu_info": "NVIDIA H200", "model_filename": fname,
            "model_type": mtype, "n_batch": 2048, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": 0,
            "avg_ns": 1, "avg_ts": ts, "stddev_ts": 0.1}


def run_compare(*files):
    r = subprocess.run([sys.executable, str(COMPARE), "--json", *map(str, files)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def group(res, shape, metric, tokens, batch=1, quant="affine4-g64"):
    hits = [g for g in res if (g["shape"], g["metric"], g["tokens"], g["batch"], g["quant"]) ==
            (shape, metric, tokens, batch, quant)]
    assert len(hits) == 1, (shape, metric, tokens, res)
    return {e["engine"].split()[0] + ":" + e["source"].rsplit("/", 1)[-1]: e for e in hits[0]["entries"]}


def test_like_for_like_ratios(tmp_path):
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    write_csv(old, [ours_row("aaaa", "llama-3.1-8b", 512, 128, 1, 10000.0, 300.0, 0.3)])
    write_csv(new, [ours_row("bbbb", "llama-3.1-8b", 512, 128, 1, 21408.0, 750.0, 0.75),
                    ours_row("bbbb", "llama-3.1-8b", 512, 128, 16, 50000.0, 6000.0, 0.6),
                    ours_row("bbbb", "qwen3-0.6b", 512, 128, 1, 40000.0, 2000.0, 0.5)])
    lb = tmp_path / "llama.json"
    lb.write_text(json.dumps([
        llama_row("/m/llama31_8b.gguf", "llama 8B Q4_0", 512, 0, 10704.0),
        llama_row("/m/llama31_8b.gguf", "llama 8B Q4_0", 0, 128, 338.0),
        llama_row("/m/qwen3_0p6b.gguf", "qwen3 0.6B Q4_0", 0, 128, 895.0),
        llama_row("/m/qwen3_0p6b.gguf", "qwen3 0.6B Q8_0", 0, 128, 700.0),  # other quant: no match
    ]))
    mlx = tmp_path / "mlx.jsonl"
    mlx.write_text(json.dumps(dict(shape="llama31_8b", engine="mlx-lm 0.32.2", quant="affine4 g64 bf16", prompt=512,
                                   gen=128, prefill_tps=5880.0, decode_tps=142.0)) + "\n")
    res = run_compare(old, lb, mlx, new)

    tg = group(res, "llama-3.1-8b", "decode", 128)
    assert abs(tg["llama.cpp:llama.json"]["mlxcel_ratio"] - 750 / 338) < 1e-9
    assert abs(tg["mlx-lm:mlx.jsonl"]["mlxcel_ratio"] - 750 / 142) < 1e-9
    assert abs(tg["mlxcel:old.csv"]["mlxcel_ratio"] - 2.5) < 1e-9  # newest mlxcel row vs the older one
    assert "mlxcel_ratio" not in tg["mlxcel:new.csv"]
    assert tg["mlxcel:new.csv"]["roofline_fraction"] == 0.75

    pp = group(res, "llama-3.1-8b", "prefill", 512)
    assert abs(pp["llama.cpp:llama.json"]["mlxcel_ratio"] - 2.0) < 1e-9
    # Batch 16 has no peer: it stands alone.
    assert list(group(res, "llama-3.1-8b", "decode", 128, batch=16)) == ["mlxcel:new.csv"]
    q = group(res, "qwen3-0.6b", "decode", 128)
    assert set(q) == {"mlxcel:new.csv", "llama.cpp:llama.json"}
    assert abs(q["llama.cpp:llama.json"]["mlxcel_ratio"] - 2000 / 895) < 1e-9
    assert list(group(res, "qwen3-0.6b", "decode", 128, quant="affine8-g64")) == ["llama.cpp:llama.json"]


def test_table_and_bad_file(tmp_path):
    f = tmp_path / "new.csv"
    write_csv(f, [ours_row("bbbb", "qwen3-0.6b", 512, 128, 1, 40000.0, 2000.0, 0.5)])
    r = subprocess.run([sys.executable, str(COMPARE), str(f)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "| qwen3-0.6b | affine4-g64 | tg128 | 1 | mlxcel bbbb" in r.stdout
    assert "2000.0 (50% of roofline)" in r.stdout
    # llama-bench -o csv: the same fields as its JSON, quoted.
    lcsv = tmp_path / "llama.csv"
    row = llama_row("/m/qwen3_0p6b.gguf", "qwen3 0.6B Q4_0", 0, 128, 800.0)
    lcsv.write_text(",".join('"%s"' % k for k in row) + "\n" + ",".join('"%s"' % v for v in row.values()) + "\n")
    res = run_compare(f, lcsv)
    assert abs(group(res, "qwen3-0.6b", "decode", 128)["llama.cpp:llama.csv"]["mlxcel_ratio"] - 2.5) < 1e-9
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    r = subprocess.run([sys.executable, str(COMPARE), str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "bad.json" in r.stderr
