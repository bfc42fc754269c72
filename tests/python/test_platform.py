"""Device detection and memory planning over sysfs fixture trees (platform_fixtures.py says where
each layout fact comes from), with header-only checkpoints that declare the real sizes of
Llama-3.1-8B (bf16, 16.06 GB), Qwen3-30B-A3B (bf16, 61.06 GB) and Qwen3-30B-A3B-4bit (17.18 GB).

What this proves: the sysfs reader finds the right devices, UMA memory is planned from the GPU's
view (carve-out + usable GTT) and not from MemAvailable, and the fit decision for each system.
What it cannot prove here: the runtime half of detection (HIP / CUDA device properties), which
needs a GPU; the H200 case therefore checks the PCI fallback and plans with the memory the CUDA
runtime would report given through MLXCEL_MEMORY_LIMIT. The lead's H200 run covers the rest."""
import json
import os
import subprocess

import pytest

from _quant_util import CLI
import platform_fixtures as pf

GiB = 1 << 30


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    out = {}
    for name, kind, bits in [("llama-8b", "llama-8b", None), ("qwen3-30b", "qwen3-30b-a3b", None),
                             ("qwen3-30b-4bit", "qwen3-30b-a3b", 4)]:
        out[name] = (root / name, pf.make_checkpoint(root / name, kind, bits))
    return out


@pytest.fixture(scope="module")
def systems(tmp_path_factory):
    root = tmp_path_factory.mktemp("sysfs")
    return {name: make(root / name) for name, make in pf.SYSTEMS.items()}


def run(*args, root=None, extra=None, timeout=60):
    env = dict(os.environ)
    env.pop("HSA_OVERRIDE_GFX_VERSION", None)
    env.pop("MLXCEL_MEMORY_LIMIT", None)
    if root is not None:
        env["MLXCEL_SYSFS_ROOT"] = str(root)
    env.update(extra or {})
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def devices(root, extra=None):
    r = run("devices", "--json", root=root, extra=extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def plan(ckpt, root, backend, ctx=4096, extra=None):
    # --memory-only: the plan alone (the full inspect also reads every quantized module's scales).
    r = run("inspect", "-m", ckpt, "--ctx", ctx, "--backend", backend, "--json", "--memory-only",
            root=root, extra=extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["memory"]


def test_strix_halo_96g_carveout(systems, checkpoints):
    d = devices(systems["strix_halo_96g"])
    assert d["host"]["memory_total"] == 31 * GiB and d["host"]["memory_available"] == 28 * GiB
    [g] = d["gpus"]
    assert (g["vendor"], g["arch"], g["compute_units"], g["wave_size"], g["integrated"]) == \
        ("AMD", "gfx1151", 40, 32, True)
    assert g["vram_total"] == 96 * GiB and g["vram_free"] == 96 * GiB - 512 * (1 << 20)
    assert g["gtt_total"] == 15 * GiB + 512 * (1 << 20)
    assert g["pci_id"] == "1002:1586" and g["source"] == "sysfs (kfd)"
    assert d["warnings"] == []
    # GPU view: free carve-out + GTT (bounded by MemAvailable): 95.5 + 15.4 GiB.
    for name in ("llama-8b", "qwen3-30b", "qwen3-30b-4bit"):
        m = plan(checkpoints[name][0], systems["strix_halo_96g"], "rocm")
        assert m["fits"], (name, m["verdict"])
        assert m["weights"] == checkpoints[name][1]
        expect = 96 * GiB - 512 * (1 << 20) + 15 * GiB + 512 * (1 << 20) - 64 * (1 << 20)
        assert m["available"] == expect
    # The host's view (what engines that plan from MemAvailable see) refuses the 61 GB model.
    m = plan(checkpoints["qwen3-30b"][0], systems["strix_halo_96g"], "cpu")
    assert not m["fits"] and m["available"] == 28 * GiB


def test_strix_halo_512m_large_gtt(systems, checkpoints):
    [g] = devices(systems["strix_halo_512m"])["gpus"]
    assert g["integrated"] and g["vram_total"] == 512 * (1 << 20) and g["gtt_total"] == 124 * GiB
    for name in ("llama-8b", "qwen3-30b", "qwen3-30b-4bit"):
        m = plan(checkpoints[name][0], systems["strix_halo_512m"], "rocm")
        assert m["fits"], (name, m["verdict"])
        # usable GTT is capped by MemAvailable (120 GiB) although GTT has 124 GiB free
        assert m["available"] == 512 * (1 << 20) - 100 * (1 << 20) + 120 * GiB


def test_strix_halo_small_gtt_warns_and_refuses(tmp_path, checkpoints):
    root = pf.strix_halo_512m(tmp_path / "sh", gtt=32 * GiB)
    m = plan(checkpoints["qwen3-30b"][0], root, "rocm")
    assert not m["fits"]
    assert any("ttm.pages_limit" in w and "GTT" in w for w in m["warnings"]), m["warnings"]
    m = plan(checkpoints["llama-8b"][0], root, "rocm")
    assert m["fits"] and m["warnings"] == []


def test_rx7900xtx_discrete(systems, checkpoints):
    [g] = devices(systems["rx7900xtx"])["gpus"]
    assert (g["arch"], g["compute_units"], g["integrated"], g["vram_total"]) == ("gfx1100", 96, False, 24 * GiB)
    assert g["pci_id"] == "1002:744c"
    avail = 24 * GiB - 300 * (1 << 20)
    m8 = plan(checkpoints["llama-8b"][0], systems["rx7900xtx"], "rocm")
    assert m8["fits"] and m8["available"] == avail  # device free memory, GTT not counted
    assert not plan(checkpoints["qwen3-30b"][0], systems["rx7900xtx"], "rocm")["fits"]
    assert plan(checkpoints["qwen3-30b-4bit"][0], systems["rx7900xtx"], "rocm")["fits"]
    # A long context pushes the 8B model out: 131072 tokens x 128 KiB of KV = 16 GiB more.
    big = plan(checkpoints["llama-8b"][0], systems["rx7900xtx"], "rocm", ctx=131072)
    assert big["kv_cache"] == 131072 * 131072 and not big["fits"]


def test_h200_seen_on_pci(systems, checkpoints):
    d = devices(systems["h200"])
    [g] = d["gpus"]  # the NVSwitch bridge function is not a GPU
    assert (g["vendor"], g["pci_id"], g["memory_known"], g["usable"]) == ("NVIDIA", "10de:2335", False, False)
    assert "cuda preset" in g["unusable_reason"]
    assert g["driver_version"] == "580.65.06"
    m = plan(checkpoints["qwen3-30b"][0], systems["h200"], "cuda")
    assert m["available_known"] is False and "cannot tell" in m["verdict"]
    # With the free memory the CUDA runtime reports on an H200 (~139.8 GiB):
    lim = {"MLXCEL_MEMORY_LIMIT": "139G"}
    for name in ("llama-8b", "qwen3-30b", "qwen3-30b-4bit"):
        assert plan(checkpoints[name][0], systems["h200"], "cuda", extra=lim)["fits"], name
    assert not plan(checkpoints["qwen3-30b"][0], systems["h200"], "cuda", ctx=40960,
                    extra={"MLXCEL_MEMORY_LIMIT": "40G"})["fits"]


def test_no_gpu(systems, checkpoints):
    d = devices(systems["no_gpu"])
    assert d["gpus"] == [] and d["warnings"] == []
    assert plan(checkpoints["llama-8b"][0], systems["no_gpu"], "cpu")["fits"]
    assert plan(checkpoints["qwen3-30b-4bit"][0], systems["no_gpu"], "cpu")["fits"]
    assert not plan(checkpoints["qwen3-30b"][0], systems["no_gpu"], "cpu")["fits"]
    m = plan(checkpoints["llama-8b"][0], systems["no_gpu"], "rocm")
    assert m["available_known"] is False
    r = run("devices", root=systems["no_gpu"])
    assert r.returncode == 0 and "gpu: none found" in r.stdout


def test_estimate_numbers_from_config(systems, checkpoints):
    # Qwen3-30B-A3B: 48 layers x 4 KV heads x 128 x (K,V) x bf16 = 98304 bytes/token; 4000 tokens
    # round up to 125 blocks of 32 = 4000.
    m = plan(checkpoints["qwen3-30b"][0], systems["no_gpu"], "cpu", ctx=4000)
    assert m["kv_bytes_per_token"] == 48 * 4 * 128 * 2 * 2
    assert m["ctx_allocated"] == 4000 and m["kv_cache"] == 98304 * 4000
    m = plan(checkpoints["qwen3-30b"][0], systems["no_gpu"], "cpu", ctx=4001)
    assert m["ctx_allocated"] == 4032 and m["kv_blocks"] == 126
    m = plan(checkpoints["qwen3-30b"][0], systems["no_gpu"], "cpu", ctx=4001,
             extra={"MLXCEL_MEMORY_LIMIT": "200G"})
    assert m["available"] == 200 * GiB and "MLXCEL_MEMORY_LIMIT" in m["available_from"]


def test_memory_limit_bad_value(systems, checkpoints):
    r = run("inspect", "-m", checkpoints["llama-8b"][0], "--memory-only", root=systems["no_gpu"],
            extra={"MLXCEL_MEMORY_LIMIT": "lots"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "MLXCEL_MEMORY_LIMIT='lots' is not a size" in r.stderr
    # The full inspect still lists the checkpoint, and says why the plan is missing.
    r = run("inspect", "-m", checkpoints["llama-8b"][0], "--json", root=systems["no_gpu"],
            extra={"MLXCEL_MEMORY_LIMIT": "lots"})
    assert r.returncode == 0 and "is not a size" in json.loads(r.stdout)["memory"]["error"]


def test_full_inspect_includes_the_plan(systems, checkpoints):
    r = run("inspect", "-m", checkpoints["llama-8b"][0], "--ctx", 8192, "--backend", "rocm",
            root=systems["rx7900xtx"])
    assert r.returncode == 0, r.stderr
    assert "total weight bytes: 16060522496" in r.stdout
    assert "memory plan: ctx 8192" in r.stdout and "fits: needs" in r.stdout


def test_warnings(systems, tmp_path):
    d = devices(systems["strix_halo_96g"], extra={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})
    assert any("HSA_OVERRIDE_GFX_VERSION=11.0.0" in w and "gfx1151" in w for w in d["warnings"])
    old = pf.strix_halo_512m(tmp_path / "old", kernel="6.14.0-1017-oem")
    w = devices(old)["warnings"]
    assert len(w) == 1 and "6.18.4" in w[0] and "6.14.0" in w[0]
    r = run("devices", root=old)
    assert "warning:" in r.stderr and "gfx1151" in r.stdout and "carve-out" in r.stdout


def test_generate_refuses_before_loading(systems, checkpoints):
    # The 61 GB model on a 32 GiB host: refused with the numbers, before any weight is read.
    r = run("generate", "-m", checkpoints["qwen3-30b"][0], "-p", "hi", root=systems["no_gpu"])
    assert r.returncode != 0
    assert "does not fit" in r.stderr and "--force" in r.stderr
    r = run("generate", "-m", checkpoints["llama-8b"][0], "-p", "hi", "--estimate-memory",
            root=systems["no_gpu"])
    assert r.returncode == 0 and "fits" in r.stdout and "kv cache" in r.stdout


def test_plan_matches_what_generate_allocates(server_model_dir, tmp_path):
    """The planner's KV + workspace + logits against the bytes the CPU backend really allocated
    (Backend::memory_stats().peak, printed as "device peak"); the CPU maps weights in place, so
    they are not part of the peak. A 600-token prompt fills a whole 512-token prefill chunk."""
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([5] * 600))
    for ctx in (8192, 32768):
        r = run("generate", "-m", server_model_dir, "--prompt-ids", ids, "-n", 4, "-c", ctx)
        assert r.returncode == 0, r.stderr
        peak = float(r.stderr.split("device peak: ")[1].split(" MiB")[0])
        r = run("inspect", "-m", server_model_dir, "--ctx", ctx, "--backend", "cpu", "--json",
                "--memory-only")
        m = json.loads(r.stdout)["memory"]
        est = (m["allocations"] - m["weights"]) / (1 << 20)
        assert abs(est - peak) <= 0.15 * peak + 0.5, (ctx, est, peak)  # peak is printed in whole MiB


def test_server_plans_its_kv_pool(systems, checkpoints):
    server = CLI.parent / "mlxcel-server"
    env = dict(os.environ, MLXCEL_SYSFS_ROOT=str(systems["no_gpu"]))
    env.pop("MLXCEL_MEMORY_LIMIT", None)
    r = subprocess.run([str(server), checkpoints["llama-8b"][0], "--estimate-memory", "-c", "8192",
                        "-np", "3"], capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    assert "3 sequences" in r.stdout
    # 3 x 8192 tokens x 128 KiB = 3 GiB of KV, the pool the engine allocates (kv_pool_blocks).
    [kv] = [line.split() for line in r.stdout.splitlines() if line.strip().startswith("kv cache")]
    assert kv[2:4] == ["3.00", "GiB"], r.stdout
    r = subprocess.run([str(server), checkpoints["qwen3-30b"][0], "--port", "0"],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode != 0 and "does not fit" in r.stderr and "--force" in r.stderr
