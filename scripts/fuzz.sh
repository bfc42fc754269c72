#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang-19, ASan + UBSan) into build/fuzz and runs each for
# a bounded time from a generated seed corpus: safetensors, config.json, the OpenAI request layer,
# tokenizer.json loading and chat-template parse + render. Fails if a run finds a crash, leak, timeout or
# sanitizer report; every target runs even after a failure, and each failure prints libFuzzer's report,
# the saved input (base64) and the command that replays it.
#   FUZZ_SECONDS=60 (total, split between targets)
#   FUZZ_SEED=1 (fixed per target: CI replays the same input sequence, so a clean clone that passes
#               here passes there; FUZZ_SEED=0 draws a fresh seed per run, for exploratory runs)
#   scripts/fuzz.sh [--build-only]
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${FUZZ_CXX:-clang++-19}
if ! command -v "$CXX" >/dev/null; then echo "fuzz: $CXX not found (scripts/setup.sh installs clang-19)"; exit 1; fi
out=build/fuzz
mkdir -p "$out"
total=${FUZZ_SECONDS:-60}
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc
       -I/usr/include)
core=(src/core/error.cpp src/core/log.cpp src/core/dtype.cpp src/core/device.cpp src/core/tensor.cpp)

# Builds a target unless its binary is newer than every source and header it could use.
build() {
  local name=$1
  shift
  if [ -x "$out/$name" ] && [ -z "$(find src fuzz -newer "$out/$name" -print -quit)" ]; then return; fi
  echo "fuzz: building $name"
  "$CXX" "${flags[@]}" "$@" -o "$out/$name"
}
tokenizer=(src/tokenizer/*.cpp src/tokenizer/jinja/*.cpp -DPCRE2_CODE_UNIT_WIDTH=8)
build fuzz_safetensors fuzz/fuzz_safetensors.cpp src/io/safetensors.cpp "${core[@]}"
build fuzz_model_config fuzz/fuzz_model_config.cpp src/io/model_config.cpp src/quant/quant_params.cpp "${core[@]}"
build fuzz_gguf fuzz/fuzz_gguf.cpp src/io/gguf.cpp src/io/gguf_tokenizer.cpp "${core[@]}"
build fuzz_openai_request fuzz/fuzz_openai_request.cpp src/server/openai_protocol.cpp src/server/api_error.cpp \
  src/runtime/sampler.cpp src/backend/cpu/sample.cpp "${core[@]}"
build fuzz_tokenizer_json fuzz/fuzz_tokenizer_json.cpp "${tokenizer[@]}" "${core[@]}" -lpcre2-8 -lutf8proc
build fuzz_chat_template fuzz/fuzz_chat_template.cpp "${tokenizer[@]}" "${core[@]}" -lpcre2-8 -lutf8proc
[ "${1:-}" = "--build-only" ] && exit 0

# Seed corpora: valid files in the layouts MLX and the reference writer produce, and configs.
seeds="$out/seeds"
rm -rf "$seeds"
mkdir -p "$seeds/safetensors" "$seeds/config" "$seeds/gguf" "$seeds/request" "$seeds/tokenizer" "$seeds/template"
python3 - "$seeds" <<'PY'
import json, struct, sys, pathlib
root = pathlib.Path(sys.argv[1])
def st(name, tensors, meta=None, pad=True):
    header, data, off = {}, b"", 0
    if meta is not None:
        header["__metadata__"] = meta
    for k, (dt, shape, raw) in tensors.items():
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw; off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    (root / "safetensors" / name).write_bytes(struct.pack("<Q", len(h)) + h + data)
st("one.st", {"w": ("F32", [2, 2], bytes(16))})
st("mlx_unaligned.st", {"l.weight": ("U32", [2, 1], bytes(8)), "l.scales": ("BF16", [2, 1], bytes(4)),
                        "l.biases": ("BF16", [2, 1], bytes(4))}, {"format": "mlx"}, pad=False)
st("dtypes.st", {d: (d, [3], bytes(3 * s)) for d, s in [("BF16", 2), ("F16", 2), ("U8", 1), ("I32", 4), ("I64", 8),
                                                       ("F8_E4M3", 1), ("F8_E8M0", 1), ("BOOL", 1)]})
st("empty.st", {"z": ("F32", [0, 4], b""), "s": ("F32", [], bytes(4))}, None)
cfgs = [{"quantization": {"group_size": 64, "bits": 4, "model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
                          "lm_head": False}},
        {"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}, "quantize_activations": True},
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
        {"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}},
        {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}},
        {"text_config": {"quantization_config": {"quant_method": "mxfp4"}}}]
for i, c in enumerate(cfgs):
    (root / "config" / f"c{i}.json").write_text(json.dumps(c))
# GGUF v3: a tiny llama-style file with a byte-level vocabulary and one Q4_0 and one F32 tensor.
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b
def gkv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload
def garr(etype, items):
    return struct.pack("<IQ", etype, len(items)) + b"".join(items)
kvs = [gkv("general.architecture", 8, gstr("llama")),
       gkv("llama.block_count", 4, struct.pack("<I", 1)),
       gkv("tokenizer.ggml.model", 8, gstr("gpt2")),
       gkv("tokenizer.ggml.pre", 8, gstr("smollm")),
       gkv("tokenizer.ggml.tokens", 9, garr(8, [gstr(t) for t in ["<s>", "a", "b", "ab", "\u0120"]])),
       gkv("tokenizer.ggml.token_type", 9, garr(5, [struct.pack("<i", t) for t in [3, 1, 1, 1, 1]])),
       gkv("tokenizer.ggml.merges", 9, garr(8, [gstr("a b")])),
       gkv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 0)),
       gkv("tokenizer.chat_template", 8, gstr("{{ messages }}"))]
infos = [gstr("blk.0.attn_q.weight") + struct.pack("<IQQIQ", 2, 32, 2, 2, 0),
         gstr("output_norm.weight") + struct.pack("<IQIQ", 1, 8, 0, 64)]
head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kvs)) + b"".join(kvs) + b"".join(infos)
head += bytes((32 - len(head) % 32) % 32)
(root / "gguf" / "tiny.gguf").write_bytes(head + bytes(range(36)) + bytes(28) + bytes(32))
reqs = [{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0.5,
         "stop": ["x"], "stream": True, "stream_options": {"include_usage": True}, "logit_bias": {"5": 1}},
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f",
          "arguments": "{\"a\": [1]}"}}]}], "tools": [{"type": "function"}], "chat_template_kwargs": {"k": 1},
         "response_format": {"type": "json_object"}, "logprobs": True, "top_logprobs": 2},
        {"prompt": [1, 2, 3], "echo": True, "logprobs": 2, "seed": -1, "top_k": 5, "min_p": 0.1},
        {"prompt": "text", "max_completion_tokens": 9223372036854775807, "presence_penalty": -2}]
for i, r in enumerate(reqs):
    (root / "request" / f"r{i}.json").write_text(json.dumps(r))
toks = [{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False}, "decoder": {"type": "ByteLevel"},
         "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
         "added_tokens": [{"id": 3, "content": "<|im_start|>", "special": True}]},
        {"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "he": 1, "##llo": 2}, "unk_token": "[UNK]"},
         "pre_tokenizer": {"type": "Whitespace"}, "decoder": {"type": "WordPiece"}},
        {"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["\u2581a", -1.0], ["b", -2.0]], "unk_id": 0},
         "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
         "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                                       "content": " "}, {"type": "Fuse"}]}}]
for i, t in enumerate(toks):
    (root / "tokenizer" / f"t{i}.json").write_text(json.dumps(t))
tpls = ["{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages if m.role != 'system' %}"
        "{% set ns.n = ns.n + 1 %}{{ m.content|trim|indent(2) }}{{ loop.index // 2 }}{% endfor %}{{ ns.n }}",
        "{{ tools|tojson(indent=2) }}{{ messages[2].tool_calls[0].function.arguments|items|list }}"
        "{{ 'a,b'.split(',')|join('-')|center(9) }}{{ (7 // -2, 7 % -3, 2 ** 10) }}",
        "{% macro f(x, d=1) %}{{ x * d }}{% if d < 3 %}{{ f(x, d + 1) }}{% endif %}{% endmacro %}{{ f('ab') }}"
        "{{ raise_exception('no') if false }}{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"]
for i, t in enumerate(tpls):
    (root / "template" / f"t{i}.jinja").write_text(t)
PY

seed_base=${FUZZ_SEED:-1}
# Function names and a stack in sanitizer reports.
sym=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer || true)
[ -n "$sym" ] && export ASAN_SYMBOLIZER_PATH="$sym" UBSAN_SYMBOLIZER_PATH="$sym"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
failures=()
run() {
  local target=$1 seconds=$2 seed_dir=$3 index=$4
  local corpus="$out/corpus_$target" log="$out/$target.log" seed=0
  [ "$seed_base" != 0 ] && seed=$((seed_base + index))
  mkdir -p "$corpus" "$out/artifacts"
  rm -f "$out/artifacts/$target-"*
  echo "fuzz: $target for ${seconds}s (seed $seed)"
  local rc=0
  (cd "$out" && "./$target" -seed="$seed" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="artifacts/$target-" \
      "corpus_$target" "seeds/$seed_dir") >"$log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    grep -E "^Done|stat::(slowest_unit_time_sec|peak_rss_mb)" "$log" | sed 's/^/  /' || true
    return 0
  fi
  failures+=("$target")
  echo "fuzz: $target FAILED (exit $rc); libFuzzer's report:"
  grep -vE "^(#[0-9]+|INFO:)" "$log" | tail -n 60 | sed 's/^/  | /' || true
  local a
  for a in "$out/artifacts/$target-"*; do
    [ -f "$a" ] || continue
    echo "  input $a ($(stat -c %s "$a") bytes), base64:"
    head -c 4096 "$a" | base64 -w 100 | sed 's/^/    /'
    echo "  replay: (cd $out && ./$target $(basename "$(dirname "$a")")/$(basename "$a"))"
  done
}
share=$((total / 6))
run fuzz_safetensors "$share" safetensors 0
run fuzz_model_config "$share" config 1
run fuzz_gguf "$share" gguf 2
run fuzz_openai_request "$share" request 3
run fuzz_tokenizer_json "$share" tokenizer 4
run fuzz_chat_template $((total - 5 * share)) template 5
if [ ${#failures[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failures[*]}"
  exit 1
fi
echo "fuzz: no crashes"
