#pragma once
// The CPU backend: the Backend interface over the CPU kernels of this folder. Activations are
// stored as fp32 holding values already rounded to the checkpoint's activation dtype (the kernels
// read fp32; the values are exactly those an MLX array of that dtype holds). The numerics policy
// (fast: fp32 accumulation; mlx: MLX's CPU arithmetic bit for bit) is read here and nowhere above.
#include <memory>

#include "backend/backend.h"

namespace mlxcel::cpu {

class CpuBackend : public backend::Backend {
 public:
  explicit CpuBackend(backend::Numerics numerics = backend::Numerics::kFast);

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::string name() const override;
  bool supports(const backend::OpSignature& sig) const override;
  DType activation_storage(DType) const override { return DType::kF32; }
  bool host_memory_is_device_memory() const override { return true; }
  backend::Numerics numerics() const { return numerics_; }

  backend::DeviceBuffer allocate(backend::MemoryKind kind, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes, backend::CopyKind kind) override;
  void synchronize() override {}

  void embed(const backend::EmbedArgs& a) override;
  void rms_norm(const backend::RmsNormArgs& a) override;
  void add(const backend::AddArgs& a) override;
  void add_rms_norm(const backend::AddRmsNormArgs& a) override;
  void linear(const backend::LinearArgs& a) override;
  void rope_kv_append(const backend::RopeKvAppendArgs& a) override;
  void attention(const backend::AttentionArgs& a) override;
  void gated_activation(const backend::GatedActivationArgs& a) override;
  void moe_route(const backend::MoeRouteArgs& a) override;
  void moe_experts(const backend::MoeExpertsArgs& a) override;
  void gather_rows(const backend::GatherRowsArgs& a) override;
  void sample(const backend::SampleArgs& a) override;

  bool wants_window_order() const override { return numerics_ == backend::Numerics::kMlx; }

 protected:
  void release(void* data, std::size_t bytes, backend::MemoryKind kind) override;

 private:
  backend::Numerics numerics_;
};

}  // namespace mlxcel::cpu
