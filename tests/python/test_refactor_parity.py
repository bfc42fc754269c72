"""scripts/refactor_parity.py on one tiny fixture: the same binary twice is identical, and a binary
that computes something else (here: mlxcel reading a copy of the fixture with one weight changed by
1%) is caught, with the first differing tensor named."""
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from _quant_util import CLI  # noqa: E402
from make_fixtures import family_configs, write_fixture  # noqa: E402

SCRIPT = ROOT / "scripts" / "refactor_parity.py"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("parity")
    mx.set_default_device(mx.cpu)
    tok, seed, cfg = family_configs()["llama"]
    return write_fixture(out, "llama", "bf16", tok, seed, cfg)


def parity(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args), "--widths", "w1", "--greedy", "8"],
                          capture_output=True, text=True, timeout=600)


def test_same_binary_is_identical(tiny):
    r = parity(CLI, CLI, tiny, "--numerics", "fast,mlx")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4/4 checks identical" in r.stdout, r.stdout


def test_different_numbers_are_caught(tiny, tmp_path):
    pert = tmp_path / tiny.name
    pert.mkdir()
    for f in tiny.iterdir():
        (pert / f.name).write_bytes(f.read_bytes())
    w = mx.load(str(pert / "model.safetensors"))
    k = "model.layers.1.mlp.down_proj.weight"
    v = np.array(w[k].astype(mx.float32))
    v[:, 3] *= 1.01
    w[k] = mx.array(v).astype(w[k].dtype)
    mx.save_safetensors(str(pert / "model.safetensors"), w, metadata={"format": "mlx"})
    wrapper = tmp_path / "mlxcel-perturbed"
    wrapper.write_text(f'#!/bin/bash\nfrom="{tiny}"\nto="{pert}"\nargs=()\n'
                       'for a in "$@"; do args+=("${a//"$from"/"$to"}"); done\n'
                       f'exec "{CLI}" "${{args[@]}}"\n')
    wrapper.chmod(0o755)
    r = parity(CLI, wrapper, tiny, "--numerics", "mlx")
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if " w1 " in ln)
    assert "DIFF" in line and ".1.down.npy" in line, line
