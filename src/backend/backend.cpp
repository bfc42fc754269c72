#include "backend/backend.h"

#include <cstdint>
#include <cstring>
#include <sstream>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/gpu/factory.h"
#include "core/error.h"

namespace mlxcel::backend {

const char* numerics_name(Numerics n) { return n == Numerics::kMlx ? "mlx" : "fast"; }

bool parse_numerics(const std::string& s, Numerics* out) {
  if (s == "fast") *out = Numerics::kFast;
  else if (s == "mlx") *out = Numerics::kMlx;
  else return false;
  return true;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kEmbed: return "embed";
    case Op::kRmsNorm: return "rms_norm";
    case Op::kAdd: return "add";
    case Op::kAddRmsNorm: return "add_rms_norm";
    case Op::kLinear: return "linear";
    case Op::kRopeKvAppend: return "rope_kv_append";
    case Op::kAttention: return "attention";
    case Op::kGatedActivation: return "gated_activation";
    case Op::kMoeRoute: return "moe_route";
    case Op::kMoeExperts: return "moe_experts";
    case Op::kGatherRows: return "gather_rows";
    case Op::kSample: return "sample";
    case Op::kCount: break;
  }
  return "?";
}

const char* qmode_name(QMode m) {
  switch (m) {
    case QMode::kNone: return "dense";
    case QMode::kAffine: return "affine";
    case QMode::kMxfp4: return "mxfp4";
    case QMode::kMxfp8: return "mxfp8";
    case QMode::kNvfp4: return "nvfp4";
  }
  return "?";
}

std::string OpSignature::str() const {
  std::ostringstream s;
  s << op_name(op) << " act=" << dtype_name(act);
  if (op == Op::kLinear || op == Op::kEmbed || op == Op::kMoeExperts) {
    s << " weight=" << qmode_name(qmode);
    if (qmode == QMode::kNone) s << " " << dtype_name(weight_dtype);
    else s << " " << bits << "-bit gs " << group_size << " scales " << dtype_name(weight_dtype);
  }
  if (head_dim > 0) s << " head_dim=" << head_dim;
  return s.str();
}

Act Act::sub(std::int64_t col0, std::int64_t ncols) const {
  Act a = *this;
  a.data = static_cast<char*>(data) + static_cast<std::size_t>(col0) * dtype_size(dtype);
  a.cols = ncols;
  return a;
}

Act Act::head_rows(std::int64_t heads) const {
  Act a = *this;
  a.rows = rows * heads;
  a.cols = cols / heads;
  a.stride = a.cols;
  return a;
}

Matrix Matrix::expert(std::int64_t e) const {
  Matrix m = *this;
  m.w = static_cast<const char*>(w) + static_cast<std::size_t>(e) * expert_stride_w;
  if (scales) m.scales = static_cast<const char*>(scales) + static_cast<std::size_t>(e) * expert_stride_s;
  if (biases) m.biases = static_cast<const char*>(biases) + static_cast<std::size_t>(e) * expert_stride_s;
  m.expert_stride_w = m.expert_stride_s = 0;
  return m;
}

void pair_scales(const void* scales, const void* biases, std::size_t groups, std::size_t elem_bytes,
                 void* out) {
  const auto* s = static_cast<const std::uint8_t*>(scales);
  const auto* b = static_cast<const std::uint8_t*>(biases);
  auto* o = static_cast<std::uint8_t*>(out);
  for (std::size_t g = 0; g < groups; ++g) {
    std::memcpy(o + 2 * g * elem_bytes, s + g * elem_bytes, elem_bytes);
    std::memcpy(o + (2 * g + 1) * elem_bytes, b + g * elem_bytes, elem_bytes);
  }
}

std::size_t KvLayout::k_block_bytes() const {
  return static_cast<std::size_t>(n_kv_heads) * block_size * head_dim * dtype_size(dtype);
}
std::size_t KvLayout::v_block_bytes() const {
  return static_cast<std::size_t>(n_kv_heads) * block_size * v_dim * dtype_size(dtype);
}
std::size_t KvLayout::block_bytes() const {
  return static_cast<std::size_t>(n_layers) * block_stride();
}
std::size_t KvLayout::block_stride() const { return k_block_bytes() + v_block_bytes(); }
std::size_t KvLayout::layer_stride() const {
  return static_cast<std::size_t>(num_blocks) * block_stride();
}
void* KvLayout::k_block(int layer, std::int32_t block) const {
  return static_cast<char*>(base) + static_cast<std::size_t>(layer) * layer_stride() +
         static_cast<std::size_t>(block) * block_stride();
}
void* KvLayout::v_block(int layer, std::int32_t block) const {
  return static_cast<char*>(k_block(layer, block)) + k_block_bytes();
}

DeviceBuffer::DeviceBuffer(Backend* owner, void* data, std::size_t bytes, MemoryKind kind)
    : owner_(owner), data_(data), bytes_(bytes), kind_(kind) {
  if (owner_ && data_) owner_->account(kind_, bytes_, true);
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    kind_ = o.kind_;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (owner_ && data_) {
    owner_->account(kind_, bytes_, false);
    owner_->release(data_, bytes_, kind_);
  }
  owner_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

MemoryStats Backend::memory_stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Backend::account(MemoryKind kind, std::size_t bytes, bool add) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  auto& cur = stats_.current[static_cast<int>(kind)];
  if (add) {
    cur += bytes;
    stats_.total += bytes;
    if (stats_.total > stats_.peak) stats_.peak = stats_.total;
  } else {
    cur -= bytes;
    stats_.total -= bytes;
  }
}

// A backend without graph capture is never asked to capture (can_capture is false).
void Backend::begin_capture() {
  throw_error(ErrorCategory::kInternal, name() + ": no graph capture on this backend");
}
std::unique_ptr<Recording> Backend::end_capture() { return nullptr; }
void Backend::replay(const Recording&) {
  throw_error(ErrorCategory::kInternal, name() + ": no graph capture on this backend");
}

std::unique_ptr<Backend> create_backend(BackendKind kind, Numerics numerics) {
  if (kind == BackendKind::kCpu) return std::make_unique<cpu::CpuBackend>(numerics);
  if (numerics == Numerics::kMlx)
    throw_error(ErrorCategory::kUnsupported,
                "--numerics mlx reproduces MLX's CPU arithmetic and runs only on the CPU; use "
                "--device cpu with it, or drop --numerics on the GPU");
  return gpu::create_gpu_backend(kind);
}

}  // namespace mlxcel::backend
