"""A tiny random qwen3 checkpoint for the server tests, written by mlx-lm (save_model /
save_config) with the real Qwen2.5 BPE vocabulary and Qwen3's tokenizer_config (chat template
with <think>), so prompts, chat templates, stop strings and reasoning splitting behave as with a
real model while a forward step costs microseconds.

A freshly initialised model tends to repeat one token forever: the residual stream is dominated
by the current token's embedding and a tied LM head maps it back to itself. An untied head and
larger attention / MLP output projections make the next token depend on the context, so greedy
output varies (make() checks this with mlx-lm's own forward).
"""
import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx_lm.utils as lm_utils

TOK = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "tokenizers" / "qwen2.5"

QWEN3_TINY = dict(model_type="qwen3", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                  vocab_size=151936, rope_theta=1000000.0, max_position_embeddings=4096,
                  tie_word_embeddings=False, bos_token_id=151643, eos_token_id=151645)

# Qwen3's template closes the reasoning block when enable_thinking is false. The fixture adds the
# opposite, as reasoning models' templates do (Qwen3-*-Thinking-2507, DeepSeek-R1: the generation
# prompt ends with "<think>\n"), when a client sends enable_thinking: true, so tests can put the
# model inside a reasoning block through chat_template_kwargs.
THINK_OFF = """    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
"""
THINK_ON = """    {%- if enable_thinking is defined and enable_thinking is true %}
        {{- '<think>\\n' }}
    {%- endif %}
"""


def tokenizer_dir() -> Path:
    for cand in (TOK, Path("/work/shared/fixtures/tokenizers/qwen2.5")):
        if (cand / "vocab.json").exists():
            return cand
    raise FileNotFoundError("the Qwen2.5 tokenizer fixture (shared/fixtures/tokenizers/qwen2.5) is missing")


def _greedy(model, ids, n):
    out = []
    x = mx.array([ids])
    for _ in range(n):
        logits = model(x)[0, -1]
        t = int(mx.argmax(logits).item())
        out.append(t)
        ids = ids + [t]
        x = mx.array([ids])
    return out


def make(out: Path, seed: int = 7, dtype: str = "float32", quantize: dict = None) -> Path:
    """Writes the checkpoint folder `out` and returns it. dtype "bfloat16" and quantize (e.g.
    {"group_size": 64, "bits": 4}) give the variants the batching tests run on."""
    mx.random.seed(seed)
    model_cls, args_cls = lm_utils._get_classes(QWEN3_TINY)
    model = model_cls(args_cls.from_dict(QWEN3_TINY))
    params = dict(model.parameters())
    # Larger residual updates and embeddings: context-dependent greedy output (see the docstring).
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight = layer.self_attn.o_proj.weight * 6.0
        layer.mlp.down_proj.weight = layer.mlp.down_proj.weight * 6.0
        layer.self_attn.q_proj.weight = layer.self_attn.q_proj.weight * 3.0
        layer.self_attn.k_proj.weight = layer.self_attn.k_proj.weight * 3.0
    del params
    model.set_dtype(mx.float32)  # f32: greedy tokens match mlx-lm exactly
    mx.eval(model.parameters())

    a = _greedy(model, [9707, 11, 1879, 0], 24)     # "Hello, world!"
    b = _greedy(model, [785, 6722, 315, 9625], 24)  # "The capital of France"
    if len(set(a)) < 6 or len(set(b)) < 6 or a == b:
        raise RuntimeError(f"the tiny model's greedy output does not vary enough: {a} / {b}")

    config = dict(QWEN3_TINY)
    if dtype != "float32":
        model.set_dtype(getattr(mx, dtype))
    if quantize:
        model, config = lm_utils.quantize_model(model, config, quantize["group_size"], quantize["bits"])
    out.mkdir(parents=True, exist_ok=True)
    lm_utils.save_model(out, model)
    lm_utils.save_config(config, out / "config.json")
    tok = tokenizer_dir()
    shutil.copyfile(tok / "vocab.json", out / "vocab.json")
    shutil.copyfile(tok / "merges.txt", out / "merges.txt")
    cfg = json.loads((tok / "tokenizer_config.Qwen3-0.6B.json").read_text(encoding="utf-8"))
    cfg["chat_template"] = cfg["chat_template"].replace(THINK_OFF, THINK_OFF + THINK_ON)
    assert THINK_ON in cfg["chat_template"]
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2), encoding="utf-8")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    return out


if __name__ == "__main__":
    import sys
    print(make(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/mlxcel-server-model")))
