#!/usr/bin/env python3
"""Refactor parity: two mlxcel binaries must compute the same logits, bit for bit.

usage: refactor_parity.py OLD_MLXCEL NEW_MLXCEL FIXTURE_DIR [FIXTURE_DIR ...]
                          [--widths w1,w8,w256] [--numerics fast,mlx] [--top-k 32]
                          [--greedy 32] [--seeded-temp T] [--no-dump] [--keep DIR] [--json OUT]

For every fixture, width and numerics mode it runs `mlxcel trace` with both binaries on the same
token ids (the sequences scripts/model_conformance.py uses: random.Random(crc32(fixture name)),
48 / 576 / 300 ids for w1 / w8 / w256, then a 16-id prompt) and compares
  - every logit of every position, bitwise: `trace --dump` writes each forward step's full logits
    as <step>.-1.logits.npy; both binaries' files are compared as uint32 bit patterns
    (NaNs with the same bits count as equal);
  - the top-k JSON of the trace (ids and values, bitwise), which works even if a binary's --dump
    no longer writes logits;
and then `mlxcel generate --temp 0` for --greedy tokens (and, with --seeded-temp, a seeded
sampled run) with both, comparing token ids.

A difference is reported with its first position (step, row, token id, both values), the
maximum absolute difference and the number of differing logits. The exit status is 0 only when
everything is identical. Scripts/build_at.sh REV OUTDIR builds the binary of another revision.
"""
import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

# The token sequences of scripts/model_conformance.py (kept in step with it; that module needs
# mlx, this one must not).
WIDTHS = {"w1": 48, "w8": 576, "w256": 300}
PROMPT_LEN = 16


def vocab_size(fixture):
    cfg = json.loads((Path(fixture) / "config.json").read_text())
    return cfg.get("vocab_size") or cfg["text_config"]["vocab_size"]


def token_ids(fixture):
    """{width: ids} and the greedy prompt, as model_conformance.check_fixture draws them."""
    vocab = vocab_size(fixture)
    rng = random.Random(zlib.crc32(Path(fixture).name.encode()))
    seqs = {w: [rng.randrange(vocab) for _ in range(n)] for w, n in WIDTHS.items()}
    prompt = [rng.randrange(vocab) for _ in range(PROMPT_LEN)]
    return seqs, prompt


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {r.returncode}: {r.stderr.strip()[-2000:]}")


def trace(binary, fixture, ids_path, width, numerics, top_k, out_dir, dump):
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [binary, "trace", "-m", fixture, "--tokens", ids_path, "--width", width, "--numerics", numerics,
           "--top-k", top_k, "-o", out_dir / "trace.json"]
    if dump:
        cmd += ["--dump", out_dir / "dump"]
    run(cmd)
    return json.loads((out_dir / "trace.json").read_text())


def logit_files(out_dir):
    d = out_dir / "dump"
    return sorted(d.glob("*.-1.logits.npy")) if d.is_dir() else []


class Diff:
    """Accumulates bitwise differences between two float32 streams."""

    def __init__(self):
        self.count = 0
        self.total = 0
        self.max_abs = 0.0
        self.first = None

    def add(self, a, b, where):
        a = np.ascontiguousarray(a, dtype=np.float32)
        b = np.ascontiguousarray(b, dtype=np.float32)
        if a.shape != b.shape:
            self.count += max(a.size, b.size)
            self.total += max(a.size, b.size)
            if self.first is None:
                self.first = f"{where}: shapes {a.shape} vs {b.shape}"
            return
        self.total += a.size
        ne = a.view(np.uint32) != b.view(np.uint32)
        n = int(ne.sum())
        if not n:
            return
        self.count += n
        with np.errstate(invalid="ignore"):
            d = np.abs(a[ne].astype(np.float64) - b[ne].astype(np.float64))
        if np.isfinite(d).any():
            self.max_abs = max(self.max_abs, float(np.nanmax(np.where(np.isfinite(d), d, np.nan))))
        else:
            self.max_abs = float("inf")
        if self.first is None:
            flat = int(np.flatnonzero(ne.reshape(-1))[0])
            idx = np.unravel_index(flat, a.shape)
            self.first = (f"{where} index {tuple(int(i) for i in idx)}: {float(a[idx])!r} "
                          f"(0x{int(a.view(np.uint32)[idx]):08x}) vs {float(b[idx])!r} (0x{int(b.view(np.uint32)[idx]):08x})")

    def summary(self):
        return {"differing": self.count, "compared": self.total, "max_abs": self.max_abs, "first": self.first}


def compare_logit_dumps(old_dir, new_dir, width, n_tokens):
    """Every logit of every forward step. Returns (summary, note)."""
    fo, fn = logit_files(old_dir), logit_files(new_dir)
    if not fo or not fn:
        missing = " and ".join(s for s, f in (("OLD", fo), ("NEW", fn)) if not f)
        return None, f"{missing} wrote no logits dump; compared the top-k trace only"
    d = Diff()
    names_o, names_n = [f.name for f in fo], [f.name for f in fn]
    if names_o != names_n:
        d.count += 1
        d.first = f"different forward steps: {len(names_o)} vs {len(names_n)} logits files"
    for a, b in zip(fo, fn):
        d.add(np.load(a), np.load(b), f"{width} step {a.name.split('.')[0]}")
    return d.summary(), None


# The order in which a forward step emits its tensors (src/models/decoder.cpp), to name the first
# one that differs; names a binary does not write are skipped.
ORDER = ["embed", "attn_norm", "q", "k", "v", "q_rope", "k_rope", "attn", "o", "ffn_norm", "gate", "up",
         "act", "down", "h", "final_norm", "logits"]


def first_intermediate_diff(old_dir, new_dir):
    """The first tensor (step, layer, name) present in both dumps whose bits differ."""
    def key(name):
        step, layer, tensor = name[:-len(".npy")].split(".", 2)
        layer = int(layer)
        if tensor in ("final_norm", "logits"):
            layer = 1 << 30  # after the last layer
        return (int(step), layer, ORDER.index(tensor) if tensor in ORDER else len(ORDER), tensor)
    do, dn = old_dir / "dump", new_dir / "dump"
    common = sorted({f.name for f in do.glob("*.npy")} & {f.name for f in dn.glob("*.npy")}, key=key)
    for n in common:
        a, b = np.load(do / n), np.load(dn / n)
        if a.shape != b.shape or (a.view(np.uint32) != b.view(np.uint32)).any():
            diff = "shape" if a.shape != b.shape else f"max |d| {float(np.nanmax(np.abs(a - b))):.3g}"
            return f"{n} ({diff})"
    return None


def compare_topk(old, new, width):
    d = Diff()
    po, pn = old["positions"], new["positions"]
    if len(po) != len(pn):
        d.count += 1
        d.first = f"{width}: {len(po)} vs {len(pn)} positions"
    for a, b in zip(po, pn):
        ids_a, ids_b = [t[0] for t in a["top"]], [t[0] for t in b["top"]]
        if a["pos"] != b["pos"] or ids_a != ids_b:
            d.count += 1
            d.total += 1
            if d.first is None:
                r = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), min(len(ids_a), len(ids_b)))
                d.first = (f"{width} pos {a['pos']} rank {r}: token {ids_a[r] if r < len(ids_a) else None} vs "
                           f"{ids_b[r] if r < len(ids_b) else None}")
            continue
        d.add(np.array([t[1] for t in a["top"]], np.float32), np.array([t[1] for t in b["top"]], np.float32),
              f"{width} pos {a['pos']} top-k")
    return d.summary()


def generate(binary, fixture, prompt_path, n, numerics, out, temp=None, seed=None):
    cmd = [binary, "generate", "-m", fixture, "--prompt-ids", prompt_path, "-n", n, "--ignore-eos", "-q",
           "--output-ids", out, "--numerics", numerics, "--temp", 0 if temp is None else temp]
    if seed is not None:
        cmd += ["--seed", seed]
    run(cmd)
    return json.loads(Path(out).read_text())["tokens"]


def check_fixture(old_bin, new_bin, fixture, widths, numerics_modes, a, tmp):
    seqs, prompt = token_ids(fixture)
    name = Path(fixture).name
    rows = []
    prompt_path = tmp / "prompt.json"
    prompt_path.write_text(json.dumps(prompt))
    for numerics in numerics_modes:
        for width in widths:
            ids = tmp / f"ids-{width}.json"
            ids.write_text(json.dumps(seqs[width]))
            t0 = time.time()
            row = {"fixture": name, "numerics": numerics, "check": width}
            try:
                dirs = {}
                for side, b in (("old", old_bin), ("new", new_bin)):
                    dirs[side] = tmp / f"{numerics}-{width}-{side}"
                    row[side] = trace(b, fixture, ids, width, numerics, a.top_k, dirs[side], not a.no_dump)
                row["topk"] = compare_topk(row.pop("old"), row.pop("new"), width)
                if not a.no_dump:
                    row["logits"], note = compare_logit_dumps(dirs["old"], dirs["new"], width, len(seqs[width]))
                    if note:
                        row["note"] = note
                    elif row["logits"]["differing"]:
                        row["first_tensor"] = first_intermediate_diff(dirs["old"], dirs["new"])
                row["ok"] = row["topk"]["differing"] == 0 and (row.get("logits") or {}).get("differing", 0) == 0
            except RuntimeError as e:
                row.pop("old", None), row.pop("new", None)
                row["ok"], row["error"] = False, str(e)
            finally:
                if a.keep is None:
                    for side in ("old", "new"):
                        shutil.rmtree(tmp / f"{numerics}-{width}-{side}", ignore_errors=True)
            row["seconds"] = round(time.time() - t0, 1)
            rows.append(row)
        runs = []
        if a.greedy > 0:
            runs.append((f"greedy{a.greedy}", None, None))
        if a.seeded_temp is not None and a.greedy > 0:
            runs.append((f"seeded{a.greedy}", a.seeded_temp, 1234))
        for label, temp, seed in runs:
            t0 = time.time()
            row = {"fixture": name, "numerics": numerics, "check": label}
            try:
                toks = [generate(b, fixture, prompt_path, a.greedy, numerics, tmp / f"gen-{side}.json", temp, seed)
                        for side, b in (("old", old_bin), ("new", new_bin))]
                first = next((i for i, (x, y) in enumerate(zip(*toks)) if x != y), None)
                if first is None and len(toks[0]) != len(toks[1]):
                    first = min(len(toks[0]), len(toks[1]))
                row["tokens"] = {"equal": toks[0] == toks[1], "first_difference": first, "n": len(toks[0]),
                                 "old": toks[0], "new": toks[1]}
                row["ok"] = toks[0] == toks[1]
            except RuntimeError as e:
                row["ok"], row["error"] = False, str(e)
            row["seconds"] = round(time.time() - t0, 1)
            rows.append(row)
    return rows


def cell(row):
    if "error" in row:
        return "ERROR " + row["error"].splitlines()[0][:120]
    if "tokens" in row:
        t = row["tokens"]
        return "equal" if t["equal"] else f"DIFFER at token {t['first_difference']}"
    parts = []
    lg = row.get("logits")
    if lg is not None:
        parts.append(f"logits {lg['differing']}/{lg['compared']} differ" +
                     (f" (max |d| {lg['max_abs']:.3g}; first {lg['first']})" if lg["differing"] else ""))
    tk = row["topk"]
    parts.append(f"top-k {tk['differing']}/{tk['compared']} differ" +
                 (f" (first {tk['first']})" if tk["differing"] else ""))
    if row.get("first_tensor"):
        parts.append(f"first differing tensor {row['first_tensor']}")
    if row.get("note"):
        parts.append(row["note"])
    return "; ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("fixtures", nargs="+")
    ap.add_argument("--widths", default="w1,w8,w256")
    ap.add_argument("--numerics", default="fast,mlx")
    ap.add_argument("--top-k", type=int, default=32, help="top-k of the trace JSON (default 32)")
    ap.add_argument("--greedy", type=int, default=32, help="greedy tokens to generate (0: skip)")
    ap.add_argument("--seeded-temp", type=float, help="also generate with this temperature and --seed 1234")
    ap.add_argument("--no-dump", action="store_true", help="compare the top-k traces only, not every logit")
    ap.add_argument("--keep", help="keep the traces and dumps under this folder")
    ap.add_argument("--json", help="write the rows as JSON")
    a = ap.parse_args(argv)
    widths = a.widths.split(",")
    for w in widths:
        if w not in WIDTHS:
            ap.error(f"unknown width {w} (w1, w8, w256)")
    numerics = a.numerics.split(",")
    for n in numerics:
        if n not in ("fast", "mlx"):
            ap.error(f"unknown numerics {n} (fast, mlx)")
    for b in (a.old, a.new):
        if not Path(b).is_file():
            ap.error(f"{b}: no such binary")
    rows = []
    print(f"{'fixture':26s} {'numerics':8s} {'check':9s} {'ok':4s} {'s':>6s}  detail", flush=True)
    for f in a.fixtures:
        if not (Path(f) / "config.json").is_file():
            ap.error(f"{f}: not a model folder (no config.json)")
        if a.keep:
            tmp_ctx = None
            tmp = Path(a.keep) / Path(f).name
            tmp.mkdir(parents=True, exist_ok=True)
        else:
            tmp_ctx = tempfile.TemporaryDirectory(prefix="parity-")
            tmp = Path(tmp_ctx.name)
        try:
            for row in check_fixture(a.old, a.new, f, widths, numerics, a, tmp):
                rows.append(row)
                print(f"{row['fixture']:26s} {row['numerics']:8s} {row['check']:9s} "
                      f"{'ok' if row['ok'] else 'DIFF':4s} {row['seconds']:6.1f}  {cell(row)}", flush=True)
        finally:
            if tmp_ctx is not None:
                tmp_ctx.cleanup()
    bad = [r for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} checks identical" + ("" if not bad else f"; {len(bad)} DIFFER"))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
