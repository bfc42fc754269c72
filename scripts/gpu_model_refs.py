#!/usr/bin/env python3
"""Model-level GPU conformance in two halves, for a GPU machine without MLX (the H200).

  gpu_model_refs.py refs OUT_DIR FIXTURE...   here (MLX on the CPU): per fixture, the token ids of
      the w1/w8/w256 traces and the greedy prompt exactly as scripts/model_conformance.py draws
      them, mlx-lm's reference traces and mlx-lm's greedy 32 tokens.
  gpu_model_refs.py compare REFS_DIR RESULTS_DIR [--markdown OUT]   here, after the GPU run wrote
      RESULTS_DIR/<fixture>/{gpu,cpu}-{w1,w8,w256}.json and gen-{gpu,cpu}.json (scripts/gpu-test.sh
      models): decided-position gate per width against mlx-lm, and greedy GPU vs the CPU fast
      engine up to the first position where the GPU's and mlx-lm's traces are undecided.
"""
import argparse
import json
import random
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_traces import compare  # noqa: E402

WIDTHS = {"w1": 48, "w8": 576, "w256": 300}


def refs(out, fixtures):
    import mlx.core as mx
    from mlx_lm.utils import load_model
    from model_conformance import check_head, mlx_greedy, mlx_trace

    mx.set_default_device(mx.cpu)
    for f in fixtures:
        name = Path(f).name
        d = Path(out) / name
        if (d / "greedy.json").exists():
            continue
        d.mkdir(parents=True, exist_ok=True)
        model, config = load_model(Path(f))
        vocab = config["vocab_size"]
        rng = random.Random(zlib.crc32(name.encode()))  # as model_conformance.py
        check_head(model, 1)
        for width, n in WIDTHS.items():
            tokens = [rng.randrange(vocab) for _ in range(n)]
            (d / f"ids-{width}.json").write_text(json.dumps(tokens))
            (d / f"ref-{width}.json").write_text(json.dumps(mlx_trace(model, tokens, width)))
        prompt = [rng.randrange(vocab) for _ in range(16)]
        (d / "prompt.json").write_text(json.dumps(prompt))
        (d / "greedy.json").write_text(json.dumps(mlx_greedy(model, prompt)))
        print(name, "done", flush=True)


def cmp(refs_dir, results, markdown):
    rows, ok = [], True
    for d in sorted(Path(refs_dir).iterdir()):
        r = Path(results) / d.name
        if not (d / "greedy.json").exists():
            continue
        if not r.exists():
            rows.append(f"| {d.name} | not run | | | |")
            continue
        cells = []
        for w in WIDTHS:
            ref = json.loads((d / f"ref-{w}.json").read_text())
            try:
                gpu = json.loads((r / f"gpu-{w}.json").read_text())
                s = compare(ref, gpu, 2.0)
                cells.append(f"{s['disagree']}/{s['decided']} of {s['positions']}")
                ok &= s["status"] == "pass"
            except (OSError, ValueError) as e:
                cells.append(f"missing ({e.__class__.__name__})")
                ok = False
        greedy = "missing"
        try:
            g = json.loads((r / "gen-gpu.json").read_text())["tokens"]
            c = json.loads((r / "gen-cpu.json").read_text())["tokens"]
            m = json.loads((d / "greedy.json").read_text())
            fd = next((i for i, (a, b) in enumerate(zip(g, c)) if a != b), None)
            fm = next((i for i, (a, b) in enumerate(zip(g, m)) if a != b), None)
            greedy = ("gpu = cpu fast" if fd is None else f"gpu vs cpu fast differ at {fd}") + \
                     ("; = mlx-lm" if fm is None else f"; vs mlx-lm differ at {fm}")
        except (OSError, ValueError, KeyError):
            ok = False
        rows.append(f"| {d.name} | " + " | ".join(cells) + f" | {greedy} |")
    lines = ["Cells: disagreements with mlx-lm at decided positions / decided (of traced positions).",
             "", "| fixture | w1 | w8 | w256 | greedy 32 tokens |", "|---|---|---|---|---|"] + rows
    text = "\n".join(lines) + "\n"
    print(text)
    if markdown:
        Path(markdown).write_text(text)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("refs")
    a.add_argument("out")
    a.add_argument("fixtures", nargs="+")
    b = sub.add_parser("compare")
    b.add_argument("refs")
    b.add_argument("results")
    b.add_argument("--markdown")
    args = ap.parse_args()
    if args.cmd == "refs":
        refs(args.out, args.fixtures)
        return 0
    return cmp(args.refs, args.results, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
