"""Sysfs fixture trees and header-only checkpoints for tests/python/test_platform*.py.

Where each layout fact comes from (nothing here is copied from mlxcel's own output):
- KFD topology: /sys/class/kfd/kfd/topology/nodes/N/{properties,name,gpu_id}. `properties` is
  one "key value" pair per line, as the kernel's kfd_topology.c node_show() prints them
  (cpu_cores_count, simd_count, gfx_target_version, simd_per_cu, wave_front_size, vendor_id,
  device_id, drm_render_minor, fw_version, ...); a CPU node has simd_count 0. ROCm's
  documentation ("KFD Topology", sysfs-class-kfd-topology-nodes) describes the same fields.
  gfx_target_version is major*10000 + minor*100 + stepping (gfx1151 -> 110501).
- DRM memory: /sys/class/drm/renderD<minor>/device/mem_info_{vram,gtt}_{total,used}, in bytes
  (kernel Documentation/gpu/amdgpu/driver-misc.rst). On an APU "VRAM" is the BIOS carve-out.
- PCI: /sys/bus/pci/devices/<bdf>/{vendor,device,class} as "0x10de" / "0x2335" / "0x030200"
  (Documentation/ABI/testing/sysfs-bus-pci).
- /proc/meminfo in kB; /proc/sys/kernel/osrelease.
- Strix Halo (Ryzen AI MAX+ 395, Radeon 8060S): gfx1151, 40 CUs, PCI 1002:1586, wave32, 128 GB
  LPDDR5X; GTT defaults to about half of the RAM Linux sees; AMD's guidance is a 512 MB
  carve-out plus a raised ttm.pages_limit (/work/shared/ROCM_NOTES.md section 4; kyuz0 uses
  ttm.pages_limit=32505856 = 124 GiB).
- RX 7900 XTX: gfx1100 (Navi 31), 96 CUs, 24 GiB GDDR6, PCI 1002:744c.
- H200: PCI 10de:2335 (SXM, 141 GB HBM3e); its memory is known only to the CUDA runtime.

Checkpoints declare the real tensor shapes of published models in their safetensors headers;
the data section is a sparse hole (the file has the right size, but no bytes on disk), which is
what a header-only estimator may rely on and nothing more.
"""
import json
import os
import pathlib
import struct

GiB = 1 << 30
MiB = 1 << 20


def _w(path, text):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _meminfo(root, total, available):
    _w(root / "proc/meminfo",
       f"MemTotal:       {total // 1024} kB\nMemFree:        {available // 2048} kB\n"
       f"MemAvailable:   {available // 1024} kB\nBuffers:           1024 kB\n")


def _cpu_node(root, n=0):
    base = root / f"sys/class/kfd/kfd/topology/nodes/{n}"
    _w(base / "properties", "cpu_cores_count 32\nsimd_count 0\nmem_banks_count 1\n"
       "gfx_target_version 0\nvendor_id 0\ndevice_id 0\ndrm_render_minor 0\n")
    _w(base / "name", "")
    _w(base / "gpu_id", "0")


def _gpu_node(root, n, *, gfx_version, cus, device_id, minor, name, fw=0):
    base = root / f"sys/class/kfd/kfd/topology/nodes/{n}"
    _w(base / "properties",
       "cpu_cores_count 0\n"
       f"simd_count {cus * 2}\nmem_banks_count 1\ncaches_count 200\nio_links_count 1\n"
       "max_waves_per_simd 16\nlds_size_in_kb 64\ngds_size_in_kb 0\nnum_gws 64\n"
       "wave_front_size 32\narray_count 4\nsimd_arrays_per_engine 2\ncu_per_simd_array 10\n"
       "simd_per_cu 2\nmax_slots_scratch_cu 32\ngfx_target_version "
       f"{gfx_version}\nvendor_id 4098\ndevice_id {device_id}\nlocation_id 49920\ndomain 0\n"
       f"drm_render_minor {minor}\nhive_id 0\nnum_sdma_engines 2\nfw_version {fw}\n"
       "capability 671588992\nmax_engine_clk_fcompute 2900\nlocal_mem_size 0\nnum_xcc 1\n")
    _w(base / "name", name)
    _w(base / "gpu_id", str(40000 + n))


def _drm(root, minor, vram_total, vram_used, gtt_total, gtt_used):
    dev = root / f"sys/class/drm/renderD{minor}/device"
    _w(dev / "mem_info_vram_total", f"{vram_total}\n")
    _w(dev / "mem_info_vram_used", f"{vram_used}\n")
    _w(dev / "mem_info_gtt_total", f"{gtt_total}\n")
    _w(dev / "mem_info_gtt_used", f"{gtt_used}\n")


def _kernel(root, release):
    _w(root / "proc/sys/kernel/osrelease", release + "\n")


def strix_halo_96g(root):
    """128 GB board, 96 GiB BIOS carve-out: Linux sees ~31 GiB, GTT is half of that."""
    root = pathlib.Path(root)
    _meminfo(root, 31 * GiB, 28 * GiB)
    _kernel(root, "6.18.4-200.fc43.x86_64")
    _cpu_node(root)
    _gpu_node(root, 1, gfx_version=110501, cus=40, device_id=0x1586, minor=128, name="gfx1151", fw=30)
    _drm(root, 128, 96 * GiB, 512 * MiB, 15 * GiB + 512 * MiB, 64 * MiB)
    return root


def strix_halo_512m(root, gtt=124 * GiB, kernel="6.18.4-200.fc43.x86_64"):
    """128 GB board, 512 MiB carve-out, GTT raised with ttm.pages_limit (124 GiB)."""
    root = pathlib.Path(root)
    _meminfo(root, 125 * GiB, 120 * GiB)
    _kernel(root, kernel)
    _cpu_node(root)
    _gpu_node(root, 1, gfx_version=110501, cus=40, device_id=0x1586, minor=128, name="gfx1151", fw=30)
    _drm(root, 128, 512 * MiB, 100 * MiB, gtt, 200 * MiB)
    return root


def rx7900xtx(root):
    """Desktop with 64 GiB of RAM and a 24 GiB RX 7900 XTX (GTT is half the RAM)."""
    root = pathlib.Path(root)
    _meminfo(root, 62 * GiB, 55 * GiB)
    _kernel(root, "6.8.0-45-generic")
    _cpu_node(root)
    _gpu_node(root, 1, gfx_version=110000, cus=96, device_id=0x744c, minor=128, name="gfx1100", fw=2)
    _drm(root, 128, 24 * GiB, 300 * MiB, 31 * GiB, 20 * MiB)
    return root


def h200(root):
    """One H200 (no KFD; NVIDIA's driver exposes no mem_info): only PCI says it is there."""
    root = pathlib.Path(root)
    _meminfo(root, 2015 * GiB, 1900 * GiB)
    _kernel(root, "6.8.0-60-generic")
    pci = root / "sys/bus/pci/devices/0000:19:00.0"
    _w(pci / "vendor", "0x10de\n")
    _w(pci / "device", "0x2335\n")
    _w(pci / "class", "0x030200\n")
    # A non-GPU NVIDIA function (an NVSwitch bridge, class 0x068000) must not be listed.
    br = root / "sys/bus/pci/devices/0000:05:00.0"
    _w(br / "vendor", "0x10de\n")
    _w(br / "device", "0x22a3\n")
    _w(br / "class", "0x068000\n")
    _w(root / "sys/module/nvidia/version", "580.65.06\n")
    return root


def no_gpu(root):
    root = pathlib.Path(root)
    _meminfo(root, 32 * GiB, 28 * GiB)
    _kernel(root, "6.1.0-40-amd64")
    _cpu_node(root)
    return root


SYSTEMS = {"strix_halo_96g": strix_halo_96g, "strix_halo_512m": strix_halo_512m,
           "rx7900xtx": rx7900xtx, "h200": h200, "no_gpu": no_gpu}


# ---- header-only checkpoints -------------------------------------------------------------

def _write_sparse_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape). Writes a valid safetensors header; the data is a
    hole of the declared size."""
    size = {"BF16": 2, "F16": 2, "F32": 4, "U32": 4}
    header, off = {}, 0
    for name, dt, shape in tensors:
        n = size[dt]
        for d in shape:
            n *= d
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.truncate(8 + len(blob) + off)
    return off


def _linear(prefix, out_f, in_f, bits, group=64, experts=None):
    lead = [experts] if experts else []
    if bits is None:
        return [(prefix + ".weight", "BF16", lead + [out_f, in_f])]
    return [(prefix + ".weight", "U32", lead + [out_f, in_f * bits // 32]),
            (prefix + ".scales", "BF16", lead + [out_f, in_f // group]),
            (prefix + ".biases", "BF16", lead + [out_f, in_f // group])]


def llama31_8b_config():
    # meta-llama/Llama-3.1-8B-Instruct config.json
    return {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False}


def qwen3_30b_a3b_config():
    # Qwen/Qwen3-30B-A3B config.json
    return {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
            "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "tie_word_embeddings": False, "norm_topk_prob": True}


def make_checkpoint(folder, kind, bits=None):
    """kind: 'llama-8b' or 'qwen3-30b-a3b'; bits None = bf16, 4 = MLX affine 4-bit, group 64
    (mlx-lm's default; the MoE router stays 8-bit as mlx-community's conversions keep it).
    Returns the declared tensor bytes."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = llama31_8b_config() if kind == "llama-8b" else qwen3_30b_a3b_config()
    if bits:
        cfg["quantization"] = {"group_size": 64, "bits": bits}
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    t = _linear("model.embed_tokens", v, h, bits)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        t += [(p + ".input_layernorm.weight", "BF16", [h]),
              (p + ".post_attention_layernorm.weight", "BF16", [h])]
        t += _linear(p + ".self_attn.q_proj", nh * hd, h, bits)
        t += _linear(p + ".self_attn.k_proj", nkv * hd, h, bits)
        t += _linear(p + ".self_attn.v_proj", nkv * hd, h, bits)
        t += _linear(p + ".self_attn.o_proj", h, nh * hd, bits)
        if kind == "llama-8b":
            f = cfg["intermediate_size"]
            t += _linear(p + ".mlp.gate_proj", f, h, bits)
            t += _linear(p + ".mlp.up_proj", f, h, bits)
            t += _linear(p + ".mlp.down_proj", h, f, bits)
        else:
            t += [(p + ".self_attn.q_norm.weight", "BF16", [hd]),
                  (p + ".self_attn.k_norm.weight", "BF16", [hd])]
            e, f = cfg["num_experts"], cfg["moe_intermediate_size"]
            t += _linear(p + ".mlp.gate", e, h, 8 if bits else None)
            t += _linear(p + ".mlp.switch_mlp.gate_proj", f, h, bits, experts=e)
            t += _linear(p + ".mlp.switch_mlp.up_proj", f, h, bits, experts=e)
            t += _linear(p + ".mlp.switch_mlp.down_proj", h, f, bits, experts=e)
    t += [("model.norm.weight", "BF16", [h])]
    t += _linear("lm_head", v, h, bits)
    if bits and kind != "llama-8b":
        cfg["quantization"].update({f"model.layers.{i}.mlp.gate": {"group_size": 64, "bits": 8}
                                    for i in range(cfg["num_hidden_layers"])})
    # Two shards with an index, as the hub's multi-GB repos are laid out.
    half = len(t) // 2
    shards = [("model-00001-of-00002.safetensors", t[:half]),
              ("model-00002-of-00002.safetensors", t[half:])]
    total, weight_map = 0, {}
    for fname, part in shards:
        total += _write_sparse_safetensors(folder / fname, part)
        weight_map.update({name: fname for name, _, _ in part})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(cfg))
    return total
