#pragma once
// GpuBackend: the op layer's Backend over the kernels of src/backend/gpu/ (one source for CUDA
// and HIP). One compute stream per device; activations are stored in the checkpoint's dtype and
// every op rounds its output once to it. Faults are values: launches are checked, asynchronous
// faults surface at the next copy or synchronize as device_fault naming the last op launched.
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/gpu/op_timer.h"
#include "backend/gpu/runtime.h"

namespace mlxcel::gpu {

class GpuBackend final : public backend::Backend {
 public:
  GpuBackend(BackendKind kind, int device);
  ~GpuBackend() override;

  BackendKind kind() const override { return kind_; }
  std::string name() const override { return name_; }
  bool supports(const backend::OpSignature& sig) const override;
  DType activation_storage(DType act) const override { return act; }
  bool host_memory_is_device_memory() const override { return false; }
  // Unless MLXCEL_GPU_PAIRED_SCALES=0 (the kernels read both layouts).
  bool wants_paired_scales() const override;

  backend::DeviceBuffer allocate(backend::MemoryKind kind, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes, backend::CopyKind kind) override;
  void synchronize() override;

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

  // Decode graphs: on by default for CUDA; HIP only with MLXCEL_GPU_GRAPHS=1 (no AMD GPU has run
  // them here); MLXCEL_GPU_GRAPHS=0 turns them off. Off while profiling or synchronizing per op.
  bool can_capture() const override { return graphs_; }
  bool set_capture(bool on) override {
    graphs_ = on && !timer_ && !sync_ops_;
    return graphs_;
  }
  void begin_capture() override;
  std::unique_ptr<backend::Recording> end_capture() override;
  void replay(const backend::Recording& r) override;
  std::uint64_t capture_epoch() const override { return epoch_; }

  int device() const { return device_; }

 protected:
  void release(void* data, std::size_t bytes, backend::MemoryKind kind) override;

 private:
  // Runs one op's launches; names the op in errors and, with MLXCEL_GPU_SYNC_OPS=1, synchronizes
  // after it so an asynchronous fault is pinned to the op that caused it.
  template <typename Fn>
  void run(const char* op, Fn&& fn, const char* detail = nullptr);
  void* scratch(std::size_t bytes);
  // Split-KV attention's partials; its first zeroed_bytes (counters) are zero when handed out.
  void* attention_workspace(std::size_t bytes, std::size_t zeroed_bytes);

  BackendKind kind_;
  int device_;
  std::string name_;
  std::unique_ptr<Stream> stream_;
  const char* last_op_ = "none";
  bool sync_ops_ = false;
  bool disabled_[static_cast<int>(backend::Op::kCount)] = {};  // MLXCEL_GPU_DISABLE
  DeviceBuffer scratch_;
  DeviceBuffer attn_ws_;
  std::unique_ptr<OpTimer> timer_;  // MLXCEL_GPU_PROFILE=1
  bool graphs_ = false;
  bool capturing_ = false;
  std::uint64_t epoch_ = 0;  // bumped when scratch_ or attn_ws_ is replaced
};

}  // namespace mlxcel::gpu
