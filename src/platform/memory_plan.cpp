#include "platform/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "platform/preflight.h"

namespace mlxcel::platform {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int dtype_bytes(const std::string& t) {
  if (t == "F64" || t == "I64" || t == "U64") return 8;
  if (t == "F32" || t == "I32" || t == "U32") return 4;
  if (t == "F16" || t == "BF16" || t == "I16" || t == "U16") return 2;
  return 1;
}

// One safetensors header: an 8-byte little-endian length and that many bytes of JSON.
json read_header(const fs::path& file) {
  // A FIFO or device would block the read: only regular files are checkpoint shards.
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw_error(ErrorCategory::kBadInput, file.string() + ": not a regular file");
  std::ifstream f(file, std::ios::binary);
  if (!f) throw_error(ErrorCategory::kBadInput, file.string() + ": cannot open");
  unsigned char len8[8];
  if (!f.read(reinterpret_cast<char*>(len8), 8))
    throw_error(ErrorCategory::kBadInput, file.string() + ": too short for a safetensors header");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  if (n == 0 || n > 100000000)
    throw_error(ErrorCategory::kBadInput,
                file.string() + ": safetensors header length " + std::to_string(n) + " is invalid");
  std::string text(n, '\0');
  if (!f.read(text.data(), static_cast<std::streamsize>(n)))
    throw_error(ErrorCategory::kBadInput, file.string() + ": truncated safetensors header");
  json h = json::parse(text, nullptr, false);
  if (!h.is_object())
    throw_error(ErrorCategory::kBadInput,
                file.string() + ": safetensors header is not a JSON object");
  return h;
}

}  // namespace

WeightInfo read_weight_info(const std::string& dir) {
  std::vector<fs::path> shards;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code rec;
  if (fs::exists(index, rec)) {
    if (!fs::is_regular_file(index, rec))
      throw_error(ErrorCategory::kBadInput, index.string() + ": not a regular file");
    std::ifstream f(index);
    json j = json::parse(f, nullptr, false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw_error(ErrorCategory::kBadInput, index.string() + ": no weight_map object");
    std::set<std::string> names;
    for (const auto& [k, v] : j["weight_map"].items())
      if (v.is_string()) names.insert(v.get<std::string>());
    for (const auto& n : names) shards.push_back(fs::path(dir) / n);
  } else {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("model", 0) == 0 && n.size() > 12 && n.substr(n.size() - 12) == ".safetensors")
        shards.push_back(e.path());
    }
    std::sort(shards.begin(), shards.end());
  }
  if (shards.empty())
    throw_error(ErrorCategory::kBadInput,
                dir +
                    ": no model*.safetensors (is it an MLX model folder? `mlxcel pull OWNER/NAME` "
                    "downloads one)");
  WeightInfo w;
  w.shards = shards.size();
  for (const auto& s : shards) {
    const json h = read_header(s);
    for (const auto& [name, t] : h.items()) {
      if (name == "__metadata__") continue;
      if (!t.is_object() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
          t["data_offsets"].size() != 2)
        throw_error(ErrorCategory::kBadInput,
                    s.string() + ": tensor '" + name + "' has no data_offsets");
      const auto b = t["data_offsets"][0].get<std::uint64_t>();
      const auto e = t["data_offsets"][1].get<std::uint64_t>();
      if (e < b)
        throw_error(ErrorCategory::kBadInput,
                    s.string() + ": tensor '" + name + "' ends before it begins");
      w.bytes += e - b;
      ++w.tensors;
      if (name == "model.norm.weight" && t.contains("dtype") && t["dtype"].is_string())
        w.activation_bytes = dtype_bytes(t["dtype"].get<std::string>());
    }
  }
  return w;
}

std::uint64_t kv_bytes_per_token(const ModelShape& s, int kv_dtype_bytes) {
  // K and V, n_kv_heads x head_dim each, per layer (backend KvLayout: v_dim = head_dim).
  return static_cast<std::uint64_t>(s.n_layers) * s.n_kv_heads * s.head_dim * 2 * kv_dtype_bytes;
}

MemoryPlan plan_memory(const ModelShape& s, const WeightInfo& w, const PlanRequest& r) {
  MemoryPlan p;
  p.weights = w.bytes;
  const std::int64_t bs = std::max(1, r.block_size);
  p.kv_blocks = kv_pool_blocks(r.ctx, r.block_size, r.sequences);
  p.ctx_allocated = kv_pool_blocks(r.ctx, r.block_size, 1) * bs;
  // The KV cache is stored in the checkpoint's activation dtype on every backend.
  const int kv_b = w.activation_bytes;
  p.kv_bytes_per_token = kv_bytes_per_token(s, kv_b);
  p.kv = p.kv_bytes_per_token * static_cast<std::uint64_t>(p.kv_blocks * bs);
  for (auto win : s.layer_window) p.sliding_layers += win > 0 ? 1 : 0;
  // The CPU backend keeps activations in fp32 containers, a GPU in the activation dtype.
  const std::uint64_t act_b =
      r.backend == BackendKind::kCpu ? 4 : static_cast<std::uint64_t>(w.activation_bytes);
  // Per token of a step, as Decoder::plan carves it: h, xn, tmp (hidden); qkv and q, k, v;
  // attention output; gate|up, gate, up, product (5 x the FFN width; an MoE model's expert FFN
  // runs per picked expert, so K x moe_intermediate_size); MoE gate logits and the picks.
  const std::int64_t ffn =
      s.n_experts > 0 ? s.moe_intermediate_size * std::max<std::int64_t>(s.experts_per_tok, 1)
                      : s.intermediate_size;
  const std::int64_t q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
  const std::uint64_t per_row =
      static_cast<std::uint64_t>(3 * s.hidden_size + 3 * q + 4 * kv + 5 * ffn + s.n_experts) *
          act_b +
      static_cast<std::uint64_t>(s.experts_per_tok) * 8;
  const std::int64_t rows =
      std::min<std::int64_t>(r.prefill_chunk, p.ctx_allocated) * std::max(1, r.sequences);
  p.activations = per_row * static_cast<std::uint64_t>(rows);
  // The sampled rows' normed hidden state and logits in the workspace, plus the sampler's fp32
  // copy of the logits.
  p.logits = (static_cast<std::uint64_t>(s.vocab_size + 2 * s.hidden_size) * act_b +
              static_cast<std::uint64_t>(s.vocab_size) * 4) *
             std::max(1, r.sequences);
  // Allocator size classes round up (<= 1/16 on large blocks) and a GPU context holds its own
  // memory (CUDA/HIP contexts, kernels, library workspaces: a few hundred MiB).
  const std::uint64_t ctx_overhead =
      r.backend == BackendKind::kCpu ? (256ull << 20) : (768ull << 20);
  p.headroom = p.allocations() / 16 + ctx_overhead;
  return p;
}

std::uint64_t parse_size(const std::string& text, const std::string& what) {
  std::string t = text;
  while (!t.empty() && (t.back() == ' ' || t.back() == 'B' || t.back() == 'b' || t.back() == 'i'))
    t.pop_back();
  const auto bad = [&]() {
    throw_error(ErrorCategory::kBadInput, what + "='" + text +
                                              "' is not a size: give bytes or a number with "
                                              "K, M, G or T (binary units), e.g. 96G or 1536M");
  };
  if (t.empty()) bad();
  double mult = 1;
  switch (t.back()) {
    case 'K':
    case 'k':
      mult = 1024.0;
      break;
    case 'M':
    case 'm':
      mult = 1048576.0;
      break;
    case 'G':
    case 'g':
      mult = 1073741824.0;
      break;
    case 'T':
    case 't':
      mult = 1099511627776.0;
      break;
    default:
      break;
  }
  if (mult != 1) t.pop_back();
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v) || v * mult > 1.8e19) bad();
  return static_cast<std::uint64_t>(v * mult);
}

std::string human_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

namespace {
const GpuDevice* pick(const Platform& pf, BackendKind backend, int index) {
  const std::string vendor = backend == BackendKind::kRocm ? "AMD" : "NVIDIA";
  int seen = 0;
  for (const auto& d : pf.gpus)
    if (d.vendor == vendor && seen++ == index) return &d;
  return nullptr;
}
}  // namespace

MemoryBudget memory_budget(const Platform& pf, BackendKind backend, int device_index) {
  MemoryBudget b;
  if (backend == BackendKind::kCpu) {
    b.device = "cpu";
    b.available = pf.host.available;
    b.how = "host MemAvailable (/proc/meminfo)";
  } else if (const GpuDevice* d = pick(pf, backend, device_index)) {
    b.device = d->name + " (" + (d->arch.empty() ? "?" : d->arch) +
               (d->integrated ? ", integrated" : "") + ")";
    if (!d->has_memory_info) {
      b.known = false;
      b.how = "unknown: the device is seen only on the PCI bus (no " +
              std::string(backend == BackendKind::kCuda ? "CUDA" : "HIP") +
              " runtime in this build)";
    } else if (d->integrated) {
      // GTT is system RAM mapped for the GPU: beyond MemAvailable it would only swap or fail.
      const std::uint64_t gtt = std::min(d->gtt_free, pf.host.available);
      b.available = d->vram_free + gtt;
      b.how = "APU: free carve-out " + human_bytes(d->vram_free) + " + usable GTT " +
              human_bytes(gtt) + " (GTT free " + human_bytes(d->gtt_free) + ", host MemAvailable " +
              human_bytes(pf.host.available) + ")";
    } else {
      b.available = d->vram_free;
      b.how = "discrete GPU: free device memory (" + d->source + ")";
    }
  } else {
    b.known = false;
    b.device = std::string(backend_name(backend)) + " device " + std::to_string(device_index);
    b.how = "no such GPU is visible (mlxcel devices lists what is)";
  }
  if (const char* lim = std::getenv("MLXCEL_MEMORY_LIMIT"); lim && *lim) {
    b.available = parse_size(lim, "MLXCEL_MEMORY_LIMIT");
    b.known = true;
    b.how = std::string("MLXCEL_MEMORY_LIMIT=") + lim;
  }
  return b;
}

FitVerdict check_fit(const MemoryPlan& p, const MemoryBudget& b, const Platform& pf,
                     BackendKind backend, int device_index) {
  FitVerdict v;
  if (!b.known) {
    v.fits = true;  // nothing to decide on: do not refuse what we cannot measure
    v.message = "cannot tell whether it fits: " + b.how;
  } else {
    v.fits = p.total() <= b.available;
    v.message = std::string(v.fits ? "fits" : "does not fit") + ": needs " +
                human_bytes(p.total()) + " (with headroom) of " + human_bytes(b.available) +
                " available on " + b.device;
    if (!v.fits)
      v.message +=
          "; use a smaller --ctx-size, a more quantized checkpoint, or another device "
          "(--force runs anyway)";
  }
  if (const GpuDevice* d = backend == BackendKind::kCpu ? nullptr : pick(pf, backend, device_index);
      d && d->integrated && d->has_memory_info && d->gtt_total > 0 && p.weights > d->vram_total &&
      d->gtt_total < p.weights) {
    v.warnings.push_back("GTT is " + human_bytes(d->gtt_total) + ", smaller than the model's " +
                         human_bytes(p.weights) + " of weights, and the carve-out is " +
                         human_bytes(d->vram_total) +
                         ": raise the GTT limit with the kernel parameter ttm.pages_limit "
                         "(4 KiB pages: GiB x 262144) or a larger BIOS carve-out "
                         "(docs/installation.md, Strix Halo setup)");
  }
  return v;
}

json plan_json(const MemoryPlan& p, const MemoryBudget& b, const FitVerdict& v) {
  return json{{"weights", p.weights},
              {"kv_cache", p.kv},
              {"kv_bytes_per_token", p.kv_bytes_per_token},
              {"kv_blocks", p.kv_blocks},
              {"ctx_allocated", p.ctx_allocated},
              {"sliding_window_layers", p.sliding_layers},
              {"activations", p.activations},
              {"logits", p.logits},
              {"allocations", p.allocations()},
              {"headroom", p.headroom},
              {"total", p.total()},
              {"device", b.device},
              {"available", b.available},
              {"available_known", b.known},
              {"available_from", b.how},
              {"fits", v.fits},
              {"verdict", v.message},
              {"warnings", v.warnings}};
}

}  // namespace mlxcel::platform
