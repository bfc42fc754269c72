#include "platform/preflight.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "platform/arch.h"

namespace mlxcel::platform {

std::int64_t kv_pool_blocks(std::int64_t ctx, int block_size, int sequences) {
  const std::int64_t bs = std::max(1, block_size);
  return ((std::max<std::int64_t>(ctx, 1) + bs - 1) / bs) * std::max(1, sequences);
}

std::int64_t default_ctx(const ModelShape& s, std::int64_t cap) {
  return s.context_length > 0 ? std::min(s.context_length, cap) : 4096;
}

Preflight plan_model(const std::string& dir, const PlanRequest& request, const Platform& pf,
                     int device_index) {
  Preflight p;
  p.shape = read_model_shape(dir);
  p.weights = read_weight_info(dir);
  p.request = request;
  p.plan = plan_memory(p.shape, p.weights, request);
  p.budget = memory_budget(pf, request.backend, device_index);
  p.verdict = check_fit(p.plan, p.budget, pf, request.backend, device_index);
  return p;
}

std::string Preflight::report() const {
  char buf[512];
  std::string s;
  auto line = [&](const char* what, std::uint64_t v, const std::string& note) {
    std::snprintf(buf, sizeof buf, "  %-13s %12s  %s\n", what, human_bytes(v).c_str(),
                  note.c_str());
    s += buf;
  };
  std::snprintf(
      buf, sizeof buf,
      "memory plan: ctx %lld (%lld allocated in blocks of %d), %d sequence%s, backend %s\n",
      static_cast<long long>(request.ctx), static_cast<long long>(plan.ctx_allocated),
      request.block_size, request.sequences, request.sequences == 1 ? "" : "s",
      std::string(backend_name(request.backend)).c_str());
  s += buf;
  line("weights", plan.weights,
       "exact, from the safetensors headers (" + std::to_string(weights.tensors) + " tensors, " +
           std::to_string(weights.shards) + " shard" + (weights.shards == 1 ? "" : "s") + ")");
  std::snprintf(buf, sizeof buf,
                "%s/token: %lld layers x %lld KV heads x %lld head_dim x K,V; %d sliding-window "
                "layer%s counted at full context",
                human_bytes(plan.kv_bytes_per_token).c_str(),
                static_cast<long long>(shape.n_layers), static_cast<long long>(shape.n_kv_heads),
                static_cast<long long>(shape.head_dim), plan.sliding_layers,
                plan.sliding_layers == 1 ? "" : "s");
  line("kv cache", plan.kv, buf);
  line("activations", plan.activations,
       "step workspace for a " + std::to_string(request.prefill_chunk) + "-token prefill chunk");
  line("logits", plan.logits, "fp32 logits of the sampled rows");
  line("allocations", plan.allocations(),
       request.backend == BackendKind::kCpu
           ? "the CPU reads weights in place from the mapped files, so generate's \"device peak\" "
             "counts the rest"
           : "what the backend allocates (generate prints it as \"device peak\")");
  line("headroom", plan.headroom, "allocator rounding and the runtime's own memory");
  line("total", plan.total(), "");
  s += "available: " + (budget.known ? human_bytes(budget.available) : std::string("unknown")) +
       " on " + budget.device + " (" + budget.how + ")\n";
  s += verdict.message + "\n";
  for (const auto& w : verdict.warnings) s += "warning: " + w + "\n";
  return s;
}

nlohmann::json Preflight::json() const {
  nlohmann::json j = plan_json(plan, budget, verdict);
  j["ctx"] = request.ctx;
  j["sequences"] = request.sequences;
  j["block_size"] = request.block_size;
  j["backend"] = backend_name(request.backend);
  j["tensors"] = weights.tensors;
  return j;
}

void enforce(const Preflight& p, const Platform& pf, bool force, int device_index) {
  const BackendKind b = p.request.backend;
  if (b != BackendKind::kCpu) {
    const std::string vendor = b == BackendKind::kRocm ? "AMD" : "NVIDIA";
    int seen = 0;
    for (const auto& d : pf.gpus) {
      if (d.vendor != vendor || seen++ != device_index) continue;
      if (auto err = arch_coverage_error(b, d.arch, pf.compiled_targets))
        throw_error(ErrorCategory::kUnsupported, d.name + ": " + *err);
    }
  }
  // Setup problems (HSA_OVERRIDE_GFX_VERSION, a kernel too old for the GPU) matter only when the
  // GPU is about to be used.
  if (b != BackendKind::kCpu)
    for (const auto& w : pf.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const auto& w : p.verdict.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (!p.verdict.fits) {
    if (force) {
      std::fprintf(stderr, "warning: %s (continuing: --force)\n", p.verdict.message.c_str());
      return;
    }
    throw_error(
        ErrorCategory::kOutOfMemory,
        "the model " + p.verdict.message + " (`mlxcel inspect -m MODEL --ctx N` shows the budget)");
  }
}

}  // namespace mlxcel::platform
