"""`mlxcel convert --from-gguf` on small GGUF files written by the `gguf` package's own writer and
quantizers: every exactly-mapped ggml type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16, F32)
dequantizes, through mx.dequantize, to exactly what gguf.quants.dequantize gives; qwen2 (no q/k
permutation, attention biases) loads in mlxcel and mlx-lm alike; and damaged or unsupported
files are refused with one clear line."""
import json
import struct
import subprocess

import numpy as np
import pytest

from _quant_util import CLI

gguf = pytest.importorskip("gguf")
T = gguf.GGMLQuantizationType

TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [
    "\u0120", "\u0120t", "he", "\u0120the", "in", "er", "on", "\u0120a"]
MERGES = ["\u0120 t", "h e", "\u0120t he", "i n", "e r", "o n", "\u0120 a"]
HIDDEN, FF, HEADS, KV, LAYERS = 64, 128, 4, 2, 2


def run(*args, timeout=120):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=timeout)


K_QUANTS = {T.Q4_K: (144, [0, 2]), T.Q5_K: (176, [0, 2]), T.Q6_K: (210, [208])}


def random_k_blocks(rng, rows, cols, t):
    """Random super-blocks (the gguf package has no K-quant quantizer): any bytes are valid
    levels and scales; the fp16 d (and dmin) fields get small finite values."""
    size, halves = K_QUANTS[t]
    q = rng.integers(0, 256, (rows, cols // 256, size), dtype=np.uint8)
    for at in halves:
        h = (rng.random((rows, cols // 256)) * 0.01).astype(np.float16)
        q[:, :, at:at + 2] = h.view(np.uint8).reshape(rows, cols // 256, 2)
    return q.reshape(rows, -1)


def write_gguf(path, arch="llama", qtype=T.Q4_0, types=None, pre="smollm", extra=None, skip=(), ff=FF):
    """A tiny model whose weights are random and quantized by the gguf package."""
    FF = ff
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(LAYERS)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(TOKENS)
    w.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    for k, v in (extra or {}).items():
        w.add_string(k, v)
    hd = HIDDEN // HEADS
    shapes = {"token_embd.weight": (len(TOKENS), HIDDEN), "output_norm.weight": (HIDDEN,)}
    for i in range(LAYERS):
        shapes |= {f"blk.{i}.attn_norm.weight": (HIDDEN,), f"blk.{i}.ffn_norm.weight": (HIDDEN,),
                   f"blk.{i}.attn_q.weight": (HEADS * hd, HIDDEN), f"blk.{i}.attn_k.weight": (KV * hd, HIDDEN),
                   f"blk.{i}.attn_v.weight": (KV * hd, HIDDEN), f"blk.{i}.attn_output.weight": (HIDDEN, HEADS * hd),
                   f"blk.{i}.ffn_gate.weight": (FF, HIDDEN), f"blk.{i}.ffn_up.weight": (FF, HIDDEN),
                   f"blk.{i}.ffn_down.weight": (HIDDEN, FF)}
        if arch == "qwen2":
            shapes |= {f"blk.{i}.attn_q.bias": (HEADS * hd,), f"blk.{i}.attn_k.bias": (KV * hd,),
                       f"blk.{i}.attn_v.bias": (KV * hd,)}
        if arch == "qwen3":
            shapes |= {f"blk.{i}.attn_q_norm.weight": (hd,), f"blk.{i}.attn_k_norm.weight": (hd,)}
    for name, shape in shapes.items():
        if name in skip:
            continue
        x = (rng.standard_normal(shape) * (0.02 if len(shape) == 2 else 0.1)).astype(np.float32)
        if len(shape) == 1:
            x += 1.0 if "norm" in name else 0.0
            w.add_tensor(name, x)
            continue
        t = (types or {}).get(name, qtype)
        if t == T.F32:
            w.add_tensor(name, x)
        elif t == T.F16:
            w.add_tensor(name, x.astype(np.float16))
        elif t in K_QUANTS:
            q = random_k_blocks(rng, shape[0], shape[1], t)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
        elif t == T.IQ4_NL:  # no quantizer in the gguf package; any bytes will do for a refusal
            q = np.zeros((shape[0], shape[1] // 32 * 18), np.uint8)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
        else:
            q = gguf.quants.quantize(x, t)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def unpermute(w, n_head):
    """Inverse of llama.cpp convert_hf_to_gguf.py LlamaModel.permute."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def assert_same_bits(got, ref, name):
    """Bit for bit, except one case, allowed in one direction only: where the value is zero, ggml's
    d*(q-8) (Q4_0; q-16 for Q5_0, d*q for Q8_0) is -0.0 when d < 0 (or d = +0 and q < 8), while
    MLX's scale*q + bias adds x and -x, which rounds to +0.0. So a differing bit pattern must be
    our +0.0 against the reference's -0.0; any other difference, including our -0.0 against
    +0.0, fails. Returns how many such zeros there were."""
    assert got.shape == ref.shape, name
    g = np.ascontiguousarray(got, dtype=np.float32).view(np.uint32)
    r = np.ascontiguousarray(ref, dtype=np.float32).view(np.uint32)
    differ = g != r
    signed_zero = (g == 0x00000000) & (r == 0x80000000)
    bad = np.flatnonzero(differ & ~signed_zero)
    assert bad.size == 0, f"{name}: {bad.size} values differ, first at {bad[0]}: {got.flat[bad[0]]!r} vs {ref.flat[bad[0]]!r}"
    return int(np.count_nonzero(differ))


def check_exact(gguf_path, out, arch="llama", dense_dtype=np.float16):
    import mlx.core as mx
    mx.set_default_device(mx.cpu)
    ours = mx.load(str(out / "model.safetensors"))
    report = {t["gguf_name"]: t for t in json.loads((out / "mlxcel_convert.json").read_text())["tensors"]}
    signed_zeros = {}  # ggml type name -> values where only the sign of a zero differs
    for t in gguf.GGUFReader(str(gguf_path)).tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        ref = ref.reshape([int(d) for d in reversed(t.shape.tolist())])
        if arch == "llama" and ".attn_q." in t.name:
            ref = unpermute(ref, HEADS)
        elif arch == "llama" and ".attn_k." in t.name:
            ref = unpermute(ref, KV)
        e = report[t.name]
        if e["mapping"] == "requantized":  # Q6_K: affine 8-bit, error as reported and small
            got = np.array(mx.dequantize(ours[e["mlx_name"] + ".weight"], ours[e["mlx_name"] + ".scales"].astype(mx.float32),
                                         ours[e["mlx_name"] + ".biases"].astype(mx.float32), group_size=32, bits=8))
            err = float(np.abs(got - ref).max())
            assert err <= e["max_abs_error"] * 1.0001 + 1e-12, (t.name, err, e["max_abs_error"])
            # Our dequantization equals ggml's and our quantizer is MLX's: the tensors equal what
            # mx.quantize makes of the gguf package's dequantized values, bit for bit.
            wq, sq, bq = mx.quantize(mx.array(ref), group_size=32, bits=8)
            assert np.array_equal(np.array(ours[e["mlx_name"] + ".weight"]), np.array(wq)), t.name
            assert np.array_equal(np.array(ours[e["mlx_name"] + ".scales"]), np.array(sq)), t.name
            assert np.array_equal(np.array(ours[e["mlx_name"] + ".biases"]), np.array(bq)), t.name
        elif "bits" in e:
            got = np.array(mx.dequantize(ours[e["mlx_name"] + ".weight"], ours[e["mlx_name"] + ".scales"].astype(mx.float32),
                                         ours[e["mlx_name"] + ".biases"].astype(mx.float32), group_size=32,
                                         bits=e["bits"]))
            assert e["mapping"] == "exact affine", e
            n = assert_same_bits(got, ref, t.name)
            signed_zeros[e["gguf_type"]] = signed_zeros.get(e["gguf_type"], 0) + n
        else:
            got = np.array(ours[e["mlx_name"]].astype(mx.float32))
            assert np.array_equal(got, ref.astype(dense_dtype).astype(np.float32)), t.name
    return signed_zeros


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0])
def test_exact_types_dequantize_like_gguf(tmp_path, qtype):
    g = write_gguf(tmp_path / "m.gguf", qtype=qtype, types={"blk.1.ffn_down.weight": T.Q8_0,
                                                            "blk.0.ffn_up.weight": T.F16})
    r = run("convert", "--from-gguf", g, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    zeros = check_exact(g, tmp_path / "out")
    # The sign-of-zero exception is real where ggml's quantizer writes d < 0 (Q4_0/Q5_0 take d
    # from the signed extreme) and absent where the formulas agree (Q4_1/Q5_1: d*q + m) or d >= 0
    # (Q8_0: d = amax/127).
    name = {T.Q4_0: "Q4_0", T.Q4_1: "Q4_1", T.Q5_0: "Q5_0", T.Q5_1: "Q5_1", T.Q8_0: "Q8_0"}[qtype]
    assert (zeros[name] > 0) == (qtype in (T.Q4_0, T.Q5_0)), zeros
    assert zeros["Q8_0"] == 0, zeros
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    bits = {T.Q4_0: 4, T.Q4_1: 4, T.Q5_0: 5, T.Q5_1: 5, T.Q8_0: 8}[qtype]
    assert cfg["quantization"]["bits"] == bits
    if bits != 8:
        assert cfg["quantization"]["model.layers.1.mlp.down_proj"] == {"group_size": 32, "bits": 8}
    # mlxcel loads it and generates; inspect says the tensors were mapped exactly.
    r = run("generate", tmp_path / "out", "-p", "the", "-n", "4", "--ignore-eos", "-q")
    assert r.returncode == 0, r.stderr
    r = run("inspect", tmp_path / "out")
    assert r.returncode == 0 and "quantized tensors exact" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q5_K])
def test_k_quants(tmp_path, qtype):
    """Q4_K/Q5_K are exact with float32 scales; Q6_K is requantized with its error reported."""
    g = write_gguf(tmp_path / "k.gguf", qtype=T.Q8_0, ff=256,
                   types={"blk.0.ffn_down.weight": qtype, "blk.1.ffn_down.weight": T.Q6_K})
    r = run("convert", "--from-gguf", g, tmp_path / "out", "--dtype", "float32")
    assert r.returncode == 0, r.stderr
    assert "requantized 1 Q6_K tensors" in r.stderr, r.stderr
    check_exact(g, tmp_path / "out", dense_dtype=np.float32)
    r = run("generate", tmp_path / "out", "-p", "the", "-n", "4", "--ignore-eos", "-q")
    assert r.returncode == 0, r.stderr
    # float16 scales round d*sc: reported, not called exact.
    r = run("convert", "--from-gguf", g, tmp_path / "out16")
    assert r.returncode == 0 and "1 with rounded scales" in r.stderr, r.stderr


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_matches_mlx_lm(tmp_path, arch):
    """qwen2 (attention biases) and qwen3 (q/k norms): no q/k permutation, same tokens as mlx-lm."""
    import mlx.core as mx
    from mlx_lm.utils import load_model
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from model_conformance import mlx_greedy
    g = write_gguf(tmp_path / "q.gguf", arch=arch, qtype=T.Q8_0, pre="qwen2")
    out = tmp_path / "out"
    r = run("convert", "--from-gguf", g, out)
    assert r.returncode == 0, r.stderr
    check_exact(g, out, arch=arch)
    assert json.loads((out / "config.json").read_text())["model_type"] == arch
    mx.set_default_device(mx.cpu)
    model, _ = load_model(out)
    prompt = [5, 9, 12, 3, 30]
    want = mlx_greedy(model, prompt, n=16)
    (tmp_path / "p.json").write_text(json.dumps(prompt))
    r = run("generate", "-m", out, "--prompt-ids", tmp_path / "p.json", "-n", "16", "--ignore-eos", "-q",
            "--numerics", "mlx", "--output-ids", tmp_path / "o.json")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "o.json").read_text())["tokens"] == want


def assert_one_error(r, code, *needles):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("mlxcel convert: error"), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture()
def good(tmp_path):
    return write_gguf(tmp_path / "good.gguf").read_bytes()


def test_bad_files_give_one_line(tmp_path, good):
    def conv(data, name="bad.gguf"):
        p = tmp_path / name
        p.write_bytes(data)
        return run("convert", "--from-gguf", p, tmp_path / "out")
    assert_one_error(conv(b"GGML" + good[4:]), 2, "not a GGUF file")
    assert_one_error(conv(good[:10]), 2, "truncated")
    assert_one_error(conv(good[:len(good) // 2]), 2, "truncated")
    assert_one_error(conv(good[:-1]), 2, "truncated", "ends past the end of the file")
    assert_one_error(conv(good[:4] + struct.pack("<I", 7) + good[8:]), 2, "version 7")
    assert_one_error(conv(good[:8] + struct.pack("<Q", 1 << 60) + good[16:]), 2, "tensor count")
    assert_one_error(conv(good[:16] + struct.pack("<Q", 1 << 40) + good[24:]), 2, "metadata count")
    # The first key's value type (after "GGUF", version, counts, key length and key).
    klen = struct.unpack("<Q", good[24:32])[0]
    at = 32 + klen
    assert_one_error(conv(good[:at] + struct.pack("<I", 99) + good[at + 4:]), 2, "unknown value type 99")
    # An unknown ggml tensor type: the type field of the first tensor info.
    r = gguf.GGUFReader(str(tmp_path / "good.gguf"))
    f = r.tensors[0].field
    type_off = int(f.offset) + sum(int(p.nbytes) for p in f.parts[:-2])
    assert_one_error(conv(good[:type_off] + struct.pack("<I", 77) + good[type_off + 4:]), 2, "unknown ggml type id 77")
    assert_one_error(run("convert", "--from-gguf", tmp_path / "missing.gguf", tmp_path / "o"), 2, "cannot open")


def test_unsupported_models_are_refused_naming_what_is_missing(tmp_path):
    g = write_gguf(tmp_path / "k.gguf")
    # An architecture the converter does not know.
    (tmp_path / "arch.gguf").write_bytes(g.read_bytes().replace(b"llama", b"mamba", 1))
    assert_one_error(run("convert", "--from-gguf", tmp_path / "arch.gguf", tmp_path / "o"), 3, "mamba", "llama")
    # A pre-tokenizer it does not know.
    g2 = write_gguf(tmp_path / "pre.gguf", pre="falcon")
    assert_one_error(run("convert", "--from-gguf", g2, tmp_path / "o2"), 3, "falcon", "smollm")
    # A tensor type with no exact MLX form.
    g3 = write_gguf(tmp_path / "iq.gguf", types={"blk.1.ffn_up.weight": T.IQ4_NL})
    assert_one_error(run("convert", "--from-gguf", g3, tmp_path / "o3"), 3, "blk.1.ffn_up.weight", "IQ4_NL")


def test_gguf_model_path_suggests_convert(tmp_path):
    g = write_gguf(tmp_path / "m.gguf")
    for cmd in (["generate", "-m", g, "-p", "hi"], ["run", g], ["inspect", "-m", g], ["bench", g]):
        r = run(*cmd)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1, (cmd, r.stderr)
        assert "mlxcel convert --from-gguf" in lines[0], lines[0]
