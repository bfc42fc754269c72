#include "backend/gpu/gpu_backend.h"

#include <cstdlib>
#include <string>

#include "backend/gpu/common.cuh"
#include "backend/gpu/factory.h"
#include "backend/gpu/kernels.h"
#include "core/error.h"

namespace mlxcel::gpu {

using backend::Op;
using backend::OpSignature;

namespace {
// A buffer that must grow while a step is being recorded: the recording is abandoned (the step
// then runs uncaptured, growing it) rather than allocating mid-capture.
[[noreturn]] void grow_while_capturing(const char* what) {
  throw_error(ErrorCategory::kInternal,
              std::string(what) + " must grow while a step is being recorded; run uncaptured");
}

struct GraphRecording final : backend::Recording {
  std::unique_ptr<Graph> graph;
};
}  // namespace

GpuBackend::GpuBackend(BackendKind kind, int device) : kind_(kind), device_(device) {
  // use_device validates (bad_input / unsupported with the reason) and leaves `device` current;
  // list_devices visits every device, so it runs first.
  std::string why;
  auto devs = list_devices(&why);
  use_device(device);
  name_ = std::string(backend_name(kind)) + ":" + std::to_string(device) + " " + devs[device].name +
          " (" + devs[device].arch + ")";
  stream_ = std::make_unique<Stream>(device);
  const char* e = std::getenv("MLXCEL_GPU_SYNC_OPS");
  sync_ops_ = e && *e && std::string(e) != "0";
  if (const char* pr = std::getenv("MLXCEL_GPU_PROFILE"); pr && *pr && std::string(pr) != "0")
    timer_ = std::make_unique<OpTimer>(device);
  const char* g = std::getenv("MLXCEL_GPU_GRAPHS");
  const bool graphs_on = g && *g ? std::string(g) != "0" : kind == BackendKind::kCuda;
  graphs_ = graphs_on && !timer_ && !sync_ops_;
  // MLXCEL_GPU_DISABLE=add_rms_norm,sample,...: the backend stops claiming these ops (diagnosis
  // on hardware we cannot reach). A fused op with an unfused twin in src/ops (add_rms_norm) then
  // runs as basic ops; any other disabled op makes the model refuse to load on this device.
  if (const char* d = std::getenv("MLXCEL_GPU_DISABLE")) {
    std::string list = std::string(",") + d + ",";
    for (int i = 0; i < static_cast<int>(backend::Op::kCount); ++i) {
      const auto op = static_cast<backend::Op>(i);
      if (list.find(std::string(",") + backend::op_name(op) + ",") != std::string::npos)
        disabled_[i] = true;
    }
  }
}

GpuBackend::~GpuBackend() {
  try {
    stream_->synchronize("backend shutdown");
  } catch (...) {
  }
  timer_.reset();  // prints the profile
}

// On by default since run 46 (H100; dev/NOTES.md "Session 24"): the tests gave the same bits in
// both layouts, and paired the 30B decoded +6 %, the 8B at batch 16 +5 %, its prefill +4 %, the
// SIMT qgemv (HIP's decode kernel) +25 %. MLXCEL_GPU_PAIRED_SCALES=0 keeps the checkpoint's two
// arrays.
bool GpuBackend::wants_paired_scales() const {
  static const bool on = env_int("MLXCEL_GPU_PAIRED_SCALES", 1) != 0;
  return on;
}

bool GpuBackend::supports(const OpSignature& sig) const {
  if (sig.op < Op::kCount && disabled_[static_cast<int>(sig.op)]) return false;
  if (sig.act != DType::kF32 && sig.act != DType::kBF16 && sig.act != DType::kF16) return false;
  switch (sig.op) {
    case Op::kLinear:
    case Op::kEmbed:
    case Op::kMoeExperts:
      return kernels::weight_format_supported(sig.qmode, sig.weight_dtype, sig.bits, sig.group_size,
                                              sig.weight_dtype);
    case Op::kRopeKvAppend:
    case Op::kAttention:
      return sig.head_dim <= 256;
    default:
      return sig.op < Op::kCount;
  }
}

backend::DeviceBuffer GpuBackend::allocate(backend::MemoryKind kind, std::size_t bytes) {
  ensure_device(device_);
  if (capturing_) grow_while_capturing("a device buffer");
  if (kind == backend::MemoryKind::kPinnedHost)
    return backend::DeviceBuffer(this, host_alloc(bytes), bytes, kind);
  static const char* const kWhat[] = {"weights", "KV cache", "workspace", "pinned host"};
  void* p = Allocator::for_device(device_).allocate(bytes, kWhat[static_cast<int>(kind)]);
  // Zeroed like the CPU backend's memory, so a planning bug reads zeros, never stale data.
  memset_device(p, 0, bytes, *stream_);
  return backend::DeviceBuffer(this, p, bytes, kind);
}

void GpuBackend::release(void* data, std::size_t, backend::MemoryKind kind) {
  if (kind == backend::MemoryKind::kPinnedHost) return host_free(data);
  Allocator::for_device(device_).release(data);
}

void GpuBackend::copy(void* dst, const void* src, std::size_t bytes, backend::CopyKind kind) {
  if (bytes == 0) return;
  ensure_device(device_);
  try {
    switch (kind) {
      case backend::CopyKind::kHostToDevice:
        copy_to_device(dst, src, bytes, *stream_);
        // The host source may be reused as soon as we return (step metadata, weight staging).
        stream_->synchronize("copy to device");
        break;
      case backend::CopyKind::kDeviceToHost:
        copy_to_host(dst, src, bytes, *stream_);
        break;
      case backend::CopyKind::kDeviceToDevice:
        copy_device_to_device(dst, src, bytes, *stream_);
        break;
    }
  } catch (const Error& e) {
    throw_error(e.category(), std::string(e.what()) + " (last op launched: " + last_op_ + ")");
  }
}

void GpuBackend::synchronize() {
  ensure_device(device_);
  try {
    stream_->synchronize("synchronize");
  } catch (const Error& e) {
    throw_error(e.category(), std::string(e.what()) + " (last op launched: " + last_op_ + ")");
  }
}

template <typename Fn>
void GpuBackend::run(const char* op, Fn&& fn, const char* detail) {
  ensure_device(device_);
  last_op_ = op;
  if (timer_) timer_->begin(static_cast<gpuStream_t>(stream_->handle()));
  fn();
  if (timer_) timer_->end(static_cast<gpuStream_t>(stream_->handle()), detail ? detail : op);
  if (sync_ops_) stream_->synchronize(op);
}

void GpuBackend::begin_capture() {
  MLXCEL_CHECK(graphs_ && !capturing_, ErrorCategory::kInternal,
               "gpu: graph capture is off or already recording");
  ensure_device(device_);
  gpu::begin_capture(*stream_);
  capturing_ = true;
}

std::unique_ptr<backend::Recording> GpuBackend::end_capture() {
  MLXCEL_CHECK(capturing_, ErrorCategory::kInternal, "gpu: end_capture without begin_capture");
  capturing_ = false;
  auto g = gpu::end_capture(*stream_);
  if (!g) return nullptr;
  auto r = std::make_unique<GraphRecording>();
  r->graph = std::move(g);
  return r;
}

void GpuBackend::replay(const backend::Recording& r) {
  const auto* gr = dynamic_cast<const GraphRecording*>(&r);
  MLXCEL_CHECK(gr && gr->graph, ErrorCategory::kInternal, "gpu: replay of a foreign recording");
  run("decode step graph", [&] { gr->graph->launch(*stream_); });
}

void* GpuBackend::scratch(std::size_t bytes) {
  if (scratch_.bytes() < bytes) {
    if (capturing_) grow_while_capturing("the MoE scratch buffer");
    ++epoch_;
    // The old buffer goes back to the caching allocator; work queued on our one stream that
    // still reads it runs before anything reusing it.
    scratch_ = DeviceBuffer(bytes * 2, device_, "moe scratch");
  }
  return scratch_.data();
}

void* GpuBackend::attention_workspace(std::size_t bytes, std::size_t zeroed_bytes) {
  if (attn_ws_.bytes() < bytes) {
    if (capturing_) grow_while_capturing("the attention workspace");
    ++epoch_;
    // Grows with the context (one span partial per 64 positions): headroom so a decode does not
    // reallocate every few spans. Freed memory goes back to the caching allocator after the
    // work queued on our one stream.
    attn_ws_ = DeviceBuffer(bytes + bytes / 2, device_, "attention workspace");
    memset_device(attn_ws_.data(), 0, zeroed_bytes, *stream_);
  }
  return attn_ws_.data();
}

void GpuBackend::embed(const backend::EmbedArgs& a) {
  run("embed", [&] { kernels::embed(a, *stream_); });
}
void GpuBackend::rms_norm(const backend::RmsNormArgs& a) {
  run("rms_norm", [&] { kernels::rms_norm(a, *stream_); });
}
void GpuBackend::add(const backend::AddArgs& a) {
  run("add", [&] { kernels::add(a, *stream_); });
}
void GpuBackend::add_rms_norm(const backend::AddRmsNormArgs& a) {
  run("add_rms_norm", [&] { kernels::add_rms_norm(a, *stream_); });
}
void GpuBackend::linear(const backend::LinearArgs& a) {
  std::string detail;
  if (timer_) {
    // Profiles split linear by its shape (M bucket x N x K) and format.
    const std::int64_t m = a.x.rows;
    detail = "linear M" + std::string(m == 1 ? "=1" : m <= 64 ? "<=64" : ">64") + " " +
             std::to_string(a.w.n) + "x" + std::to_string(a.w.k) + " " +
             backend::qmode_name(a.w.mode) + std::to_string(a.w.bits);
  }
  run("linear", [&] { kernels::linear(a, *stream_); }, timer_ ? detail.c_str() : nullptr);
}
void GpuBackend::rope_kv_append(const backend::RopeKvAppendArgs& a) {
  run("rope_kv_append", [&] { kernels::rope_kv_append(a, *stream_); });
}
void GpuBackend::attention(const backend::AttentionArgs& a) {
  run("attention", [&] {
    const kernels::AttentionWorkspace ws = kernels::attention_workspace(a);
    kernels::attention(a, ws.bytes ? attention_workspace(ws.bytes, ws.zeroed_bytes) : nullptr,
                       *stream_);
  });
}
void GpuBackend::gated_activation(const backend::GatedActivationArgs& a) {
  run("gated_activation", [&] { kernels::gated_activation(a, *stream_); });
}
void GpuBackend::moe_route(const backend::MoeRouteArgs& a) {
  run("moe_route", [&] { kernels::moe_route(a, *stream_); });
}
void GpuBackend::moe_experts(const backend::MoeExpertsArgs& a) {
  run("moe_experts", [&] {
    kernels::moe_experts(a, scratch(kernels::moe_experts_scratch_bytes(a)), *stream_);
  });
}
void GpuBackend::gather_rows(const backend::GatherRowsArgs& a) {
  run("gather_rows", [&] { kernels::gather_rows(a, *stream_); });
}

void GpuBackend::sample(const backend::SampleArgs& a) {
  run("sample", [&] { kernels::sample(a, *stream_); });
}

std::unique_ptr<backend::Backend> create_gpu_backend(BackendKind kind, int device) {
  if (kind != compiled_backend())
    throw_error(ErrorCategory::kUnsupported,
                "this mlxcel was built for " + std::string(backend_name(compiled_backend())) +
                    ", not " + std::string(backend_name(kind)) +
                    "; use --device gpu (the compiled GPU backend) or rebuild with the " +
                    std::string(backend_name(kind)) + " preset");
  return std::make_unique<GpuBackend>(kind, device);
}

}  // namespace mlxcel::gpu
