#!/usr/bin/env python3
"""mlx-lm reference traces for one checkpoint and one prompt (the model-level oracle).

usage: mlx_reference.py MODEL_DIR (--ids 1,2,3 | --ids-file F | --prompt TEXT) --out OUT.json
                        [--max-tokens 32] [--top-k 8] [--no-generate]

Writes OUT.json:
  {"model": dir, "mlx": version, "mlx_lm": version, "prompt_ids": [...],
   "generated_ids": [...],             # greedy (argmax, temperature 0) via mlx_lm generate_step
   "top_k": K,
   "positions": [{"ids": [...K], "logits": [...K]}, ...]}  # teacher-forced forward over
                                       # prompt_ids + generated_ids, float32 logits, best first
Position p holds the logits that predict token p + 1. A position is "decided" when
logits[0] - logits[1] >= 2.0 (DESIGN.md, Correctness).
"""
import argparse
import json
import sys
from pathlib import Path

import mlx.core as mx
import mlx_lm
from mlx_lm.generate import generate_step
from mlx_lm.utils import load


def teacher_forced_topk(model, ids, k):
    logits = model(mx.array(ids)[None]).astype(mx.float32)[0]
    order = mx.argsort(-logits, axis=-1)[:, :k]
    vals = mx.take_along_axis(logits, order, axis=-1)
    mx.eval(order, vals)
    return [{"ids": o, "logits": v} for o, v in zip(order.tolist(), vals.tolist())]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--ids", help="comma-separated token ids")
    src.add_argument("--ids-file", help="file with whitespace/comma-separated token ids")
    src.add_argument("--prompt", help="text, encoded with the checkpoint's tokenizer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--no-generate", action="store_true", help="teacher-forced trace of the prompt only")
    args = ap.parse_args(argv)

    mx.set_default_device(mx.cpu)
    model, tokenizer = load(args.model)
    if args.ids is not None:
        ids = [int(t) for t in args.ids.split(",") if t.strip()]
    elif args.ids_file is not None:
        ids = [int(t) for t in Path(args.ids_file).read_text().replace(",", " ").split()]
    else:
        ids = tokenizer.encode(args.prompt)
    if not ids:
        sys.exit("mlx_reference: empty prompt")

    generated = []
    if not args.no_generate:
        # Greedy: the default sampler of generate_step is argmax (temperature 0). EOS is ignored
        # so that every trace has max_tokens tokens.
        for tok, _ in generate_step(mx.array(ids), model, max_tokens=args.max_tokens):
            generated.append(int(tok))

    positions = teacher_forced_topk(model, ids + generated, args.top_k)
    out = {
        "model": str(Path(args.model).resolve()),
        "mlx": mx.__version__,
        "mlx_lm": mlx_lm.__version__,
        "prompt_ids": ids,
        "generated_ids": generated,
        "top_k": args.top_k,
        "positions": positions,
    }
    Path(args.out).write_text(json.dumps(out))
    decided = sum(1 for p in positions if len(p["logits"]) > 1 and p["logits"][0] - p["logits"][1] >= 2.0)
    print(f"mlx_reference: {len(ids)} prompt + {len(generated)} generated ids, "
          f"{decided}/{len(positions)} decided positions -> {args.out}")


if __name__ == "__main__":
    main()
