"""SentencePiece vocabularies (`tokenizer.ggml.model = "llama"`: pieces, scores, token types,
byte-fallback <0xNN> pieces, U+2581 for spaces) become a tokenizer.json whose ids equal the
references we did not write:
- a SentencePiece BPE model trained here with the `sentencepiece` package (Llama 2's trainer
  settings: byte fallback, split digits, no whitespace collapsing), written to GGUF the way
  llama.cpp's _set_vocab_sentencepiece does: ids equal sentencepiece's own encoder;
- real models' published tokenizer.json files (Phi-3-mini: Llama 2's vocabulary plus chat tokens;
  Mistral 7B v0.3: 771 control tokens): ids equal HF `tokenizers` on the published file. Their
  tokenizer.model is not in the fixtures, so the GGUF's scores are SentencePiece BPE's (a piece
  scores minus the rank of the merge that makes it; pieces made by no merge come after), taken
  from the published merges.
mlxcel's own tokenizer is checked on the converted folder too (encode and decode)."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from _quant_util import CLI
from test_tokenizer_hf import CORPUS
from tok_driver import FIXTURES, Driver, driver_path

gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
TEXTS = CORPUS + [
    "In 1969, 3 astronauts flew 384400 km; pi = 3.14159.",
    "  two  spaces,   three,\tand a tab",
    "bytes for unseen characters: \u0394\u03a9 \U0001F600 \u2603 \u00e9",
    "trailing space ",
    "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>",
    "[INST] Say hi [/INST] hi</s>",
]


def write_spm_gguf(path, tokens, scores, types, add_space_prefix=None, add_bos=None, bos=1, eos=2, unk=0,
                   name=None):
    """A one-layer llama with this vocabulary; the tokenizer keys as llama.cpp writes them."""
    rng = np.random.default_rng(3)
    h, n = 32, len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    if name:
        w.add_name(name)
    for k, v in (("block_count", 1), ("context_length", 128), ("embedding_length", h),
                 ("feed_forward_length", 32), ("attention.head_count", 2), ("attention.head_count_kv", 1)):
        w.add_uint32(f"llama.{k}", v)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(unk)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    shapes = {"token_embd.weight": (n, h), "output_norm.weight": (h,), "blk.0.attn_norm.weight": (h,),
              "blk.0.ffn_norm.weight": (h,), "blk.0.attn_q.weight": (h, h), "blk.0.attn_k.weight": (16, h),
              "blk.0.attn_v.weight": (16, h), "blk.0.attn_output.weight": (h, h),
              "blk.0.ffn_gate.weight": (32, h), "blk.0.ffn_up.weight": (32, h), "blk.0.ffn_down.weight": (h, 32)}
    for name, shape in shapes.items():
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05 + (len(shape) == 1)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def convert(g, out):
    r = subprocess.run([str(CLI), "convert", "--from-gguf", str(g), str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def check_ids(out, reference, texts, add_special=False):
    """`reference(text)` -> ids; HF tokenizers and mlxcel on the converted folder must agree."""
    ours = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    bad = []
    driver_path()
    d = Driver()
    try:
        r = d.call(op="load", dir=str(out))
        assert "error" not in r, r
        for text in texts:
            want = reference(text)
            got = ours.encode(text, add_special_tokens=add_special).ids
            if got != want:
                bad.append(("hf", text, want[:12], got[:12]))
            mine = d.call(op="encode", text=text, add_special=add_special)["ids"]
            if mine != want:
                bad.append(("mlxcel", text, want[:12], mine[:12]))
            dec = d.call(op="decode", ids=want, skip_special=False)["text"]
            if dec != ours.decode(want, skip_special_tokens=False):
                bad.append(("decode", text, dec))
    finally:
        d.close()
    assert not bad, (len(bad), bad[:4])


USER_DEFINED = ["<|user|>", "<|end|>"]


@pytest.fixture(scope="module")
def trained_spm(tmp_path_factory):
    spm = pytest.importorskip("sentencepiece")
    corpus = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    d = tmp_path_factory.mktemp("spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus.splitlines()), model_prefix=str(d / "m"), model_type="bpe", vocab_size=1200,
        byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", character_coverage=0.995, minloglevel=2,
        user_defined_symbols=USER_DEFINED, control_symbols=["<|system|>"])
    return spm.SentencePieceProcessor(model_file=str(d / "m.model"))


def spm_vocab(sp):
    """llama.cpp's _set_vocab_sentencepiece: every piece with its score and its type."""
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
                     else 6 if sp.is_byte(i) else 4 if tokens[-1] in USER_DEFINED else 1)
    return tokens, scores, types


def test_trained_sentencepiece_ids_equal_sentencepiece(tmp_path, trained_spm):
    sp = trained_spm
    tokens, scores, types = spm_vocab(sp)
    assert any(t == 6 for t in types) and any(t == 4 for t in types)
    out = convert(write_spm_gguf(tmp_path / "t.gguf", tokens, scores, types,
                                 bos=sp.bos_id(), eos=sp.eos_id(), unk=sp.unk_id()), tmp_path / "out")
    tj = json.loads((out / "tokenizer.json").read_text())
    assert tj["model"]["byte_fallback"] and tj["model"]["merges"]
    # Texts with control or user-defined pieces in them are left to the published-tokenizer test:
    # sentencepiece normalizes the whole text before matching user-defined pieces ("<|user|> hi"
    # -> "▁", "<|user|>", "▁hi"), HF and llama.cpp split at them first and prefix each segment.
    specials = [t for t, ty in zip(tokens, types) if ty in (3, 4)]
    texts = [t for t in TEXTS if not any(s in t for s in specials)]
    assert len(texts) > 30
    check_ids(out, lambda text: sp.encode(text), texts)
    # add_bos defaults to true for SentencePiece vocabularies, as in llama.cpp.
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    assert hf.encode("hi there", add_special_tokens=True).ids == [sp.bos_id()] + sp.encode("hi there")
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert cfg["add_bos_token"] is True


def published_vocab(folder):
    """A published SentencePiece-BPE tokenizer.json as llama.cpp's GGUF would carry it (see the
    module docstring for the scores)."""
    j = json.loads((FIXTURES / "tokenizers" / folder / "tokenizer.json").read_text())
    vocab = j["model"]["vocab"]
    added = {a["id"]: a for a in j["added_tokens"]}
    n = max(max(vocab.values()), max(added)) + 1
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    for i, a in added.items():
        tokens[i] = a["content"]
    rank = {}
    for k, m in enumerate(j["model"]["merges"]):
        merged = "".join(m) if isinstance(m, list) else m.replace(" ", "", 1)
        rank.setdefault(merged, k)
    big = len(j["model"]["merges"])
    scores, types = [], []
    for i, t in enumerate(tokens):
        if i in added:
            a = added[i]
            types.append(2 if t == j["model"]["unk_token"] else 3 if a["special"] or i < 3 else 4)
            scores.append(0.0 if i < len(vocab) else -1000.0)
        elif t.startswith("<0x") and len(t) == 6:
            types.append(6)
            scores.append(0.0)
        else:
            types.append(1)
            scores.append(-float(rank.get(t, big + i)))
    return j, tokens, scores, types


@pytest.mark.parametrize("folder", ["phi-3-mini", "mistral-7b-v0.3-metaspace"])
def test_published_tokenizer_ids_equal_hf(tmp_path, folder):
    j, tokens, scores, types = published_vocab(folder)
    name = {"phi-3-mini": "Phi-3-mini-4k-instruct", "mistral-7b-v0.3-metaspace": "Mistral-7B-v0.3"}[folder]
    add_bos = json.loads((FIXTURES / "tokenizers" / folder / "tokenizer_config.json").read_text()).get("add_bos_token", True)
    out = convert(write_spm_gguf(tmp_path / "p.gguf", tokens, scores, types, add_bos=add_bos, name=name),
                  tmp_path / "out")
    ref = tokenizers.Tokenizer.from_file(str(FIXTURES / "tokenizers" / folder / "tokenizer.json"))
    texts = TEXTS
    if folder == "mistral-7b-v0.3-metaspace":
        # Its Metaspace(prepend_scheme "first") adds no U+2581 where the text already starts with
        # a space, and none after a special token; SentencePiece and llama.cpp do, and so do we
        # (the trained-model test above holds us to sentencepiece): those texts are left out.
        specials = [t for t, ty in zip(tokens, types) if ty in (3, 4)]
        texts = [t for t in TEXTS if not t[:1].isspace() and not any(s in t for s in specials)]
        assert len(texts) > 30
    check_ids(out, lambda text: ref.encode(text, add_special_tokens=False).ids, texts)
    assert tokenizers.Tokenizer.from_file(str(out / "tokenizer.json")).encode("Hi", add_special_tokens=True).ids == \
        ref.encode("Hi", add_special_tokens=True).ids


def test_gemma_style_no_space_prefix(tmp_path, trained_spm):
    """add_space_prefix = false (llama.cpp writes it for Gemma): no U+2581 is prepended."""
    sp = trained_spm
    tokens, scores, types = spm_vocab(sp)
    out = convert(write_spm_gguf(tmp_path / "g.gguf", tokens, scores, types, add_space_prefix=False,
                                 bos=sp.bos_id(), eos=sp.eos_id(), unk=sp.unk_id()), tmp_path / "out")
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in ("Hello world", "x  y", "models/qwen3.cpp", "1969 tokens"):
        # sentencepiece prepends its dummy "▁"; without the prefix the same ids need a space.
        assert hf.encode(" " + text, add_special_tokens=False).ids == sp.encode(text), text
        assert hf.encode(text, add_special_tokens=False).tokens[0][0] != "\u2581", text
        assert hf.decode(hf.encode(text, add_special_tokens=False).ids) == text


def test_spm_without_scores_is_refused(tmp_path, trained_spm):
    tokens, scores, types = spm_vocab(trained_spm)
    g = tmp_path / "n.gguf"
    write_spm_gguf(g, tokens, scores[:10], types)
    r = subprocess.run([str(CLI), "convert", "--from-gguf", str(g), str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "tokenizer.ggml.scores" in lines[0], r.stderr
