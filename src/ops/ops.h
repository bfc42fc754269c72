#pragma once
// The op layer (DESIGN.md "Execution"): what models call. Each op validates its arguments, asks
// the backend whether it supports the op for these dtypes / formats (refusing with a message that
// names the op and the backend when not), and runs the backend's kernel, or the unfused twin built
// from basic ops where the backend has no fused form. Models hold only the types of this header:
// device-resident weights, activation views and the Exec they run on.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "quant/quant_params.h"

namespace mlxcel::ops {

using backend::Act;
using backend::Activation;
using backend::Backend;
using backend::KvLayout;
using backend::Op;
using backend::OpSignature;
using backend::StepView;

// Debugging aid (`mlxcel trace --dump`): called with every named intermediate of a forward step
// (rows x cols fp32, one row per token; layer -1 for model-level tensors).
using Tap = std::function<void(const char* name, int layer, const float* data, std::int64_t rows,
                               std::int64_t cols)>;

// What a model runs on: the backend and the checkpoint's activation dtype (every op rounds its
// output to it).
class Exec {
 public:
  Exec(Backend& be, DType act) : be_(&be), act_(act), storage_(be.activation_storage(act)) {}
  Backend& backend() const { return *be_; }
  DType act() const { return act_; }
  DType storage() const { return storage_; }

  Tap tap;
  void emit(const char* name, int layer, const Act& a) const;  // no-op without a tap
  // Refuses (unsupported, naming the op, the formats and the backend) what the backend lacks.
  void require(const backend::OpSignature& sig) const;

 private:
  Backend* be_;
  DType act_;
  DType storage_;
};

// A weight matrix y = x · Wᵀ (+ bias) on the device, dense or MLX-quantized; stacked experts too.
class LinearWeight {
 public:
  LinearWeight() = default;
  // Uploads (or, where host memory is device memory, uses in place) the checkpoint's tensors.
  // `weight` [out, in] dense or packed; `bias` may be undefined.
  static LinearWeight upload(Backend& be, std::string name, const Tensor& weight,
                             const Tensor& scales, const Tensor& biases,
                             const std::optional<QuantParams>& quant, std::int64_t in,
                             std::int64_t out, const Tensor& bias = Tensor());
  // A SwitchLinear: weight [E, out, packed_in], scales / biases [E, out, groups].
  static LinearWeight upload_stacked(Backend& be, std::string name, const Tensor& weight,
                                     const Tensor& scales, const Tensor& biases,
                                     const std::optional<QuantParams>& quant, std::int64_t in,
                                     std::int64_t out);
  // The rows of `parts` stacked into one matrix (q/k/v, gate/up), so one kernel reads them in one
  // pass; nullopt when their formats differ (then they stay separate).
  static std::optional<LinearWeight> concat(Backend& be, std::string name,
                                            std::span<const LinearWeight* const> parts);

  bool defined() const { return m_.n > 0; }
  std::int64_t in() const { return m_.k; }
  std::int64_t out() const { return m_.n; }
  const backend::Matrix& matrix() const { return m_; }
  const float* bias() const { return bias_; }
  bool quantized() const { return quant_.has_value(); }
  const std::optional<QuantParams>& quant() const { return quant_; }
  std::size_t weight_bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  backend::OpSignature signature(backend::Op op, DType act) const;

 private:
  std::string name_;
  backend::Matrix m_;
  const float* bias_ = nullptr;
  std::optional<QuantParams> quant_;
  std::size_t bytes_ = 0;
  // Host sources (kept for concat and, on the CPU, used in place) and device copies.
  Tensor weight_, scales_, biases_, bias_host_;
  std::vector<std::shared_ptr<backend::DeviceBuffer>> device_;
};

// RMSNorm weight as fp32 on the device (gemma's 1 + w applied at load, in the weight's dtype).
class NormWeight {
 public:
  NormWeight() = default;
  static NormWeight upload(Backend& be, std::vector<float> weight, float eps);
  const float* data() const { return data_; }
  float eps() const { return eps_; }
  std::int64_t dim() const { return host_ ? static_cast<std::int64_t>(host_->size()) : 0; }

 private:
  std::shared_ptr<const std::vector<float>> host_;  // shared: copies stay valid
  std::shared_ptr<backend::DeviceBuffer> device_;
  const float* data_ = nullptr;
  float eps_ = 1e-5f;
};

// A layer's rotary table (frequencies uploaded once).
class Rope {
 public:
  Rope() = default;
  // `freqs` empty: the base form.
  static Rope upload(Backend& be, std::int64_t dims, bool traditional, float base, float scale,
                     float input_scale, std::vector<float> freqs);
  const backend::RopeTable& table() const { return t_; }

 private:
  backend::RopeTable t_;
  std::shared_ptr<const std::vector<float>> host_;  // shared: copies stay valid
  std::shared_ptr<backend::DeviceBuffer> device_;
};

// Activation memory planned once and reused: views keep their addresses while the capacity holds
// (DESIGN.md: stable addresses for graph capture).
class Workspace {
 public:
  // Starts a plan; `carve` hands out aligned slices; `commit` (re)allocates when the plan grew.
  void begin() { used_ = 0; }
  Act carve(DType storage, std::int64_t rows, std::int64_t cols);
  void* carve_bytes(std::size_t bytes);
  // True when the last plan fit; false: call commit and plan again (addresses changed).
  bool fits() const { return used_ <= capacity_; }
  void commit(Backend& be);
  std::size_t capacity() const { return capacity_; }
  const void* data() const { return buf_ ? buf_->data() : nullptr; }

 private:
  std::shared_ptr<backend::DeviceBuffer> buf_;
  std::size_t capacity_ = 0, used_ = 0;
};

// An op signature without a weight format (norms, attention, sampling, ...).
OpSignature op_signature(Op op, DType act, int head_dim = 0);

// --- The ops ---
// Refuses (bad_input, naming the id) a token id outside the table's rows. embed calls it; a
// replayed step (StepGraphs), which runs no host code of its ops, calls it first.
void check_token_ids(const LinearWeight& table, const StepView& step);
void embed(const Exec& e, const LinearWeight& table, const StepView& step, Act out, float scale);
void rms_norm(const Exec& e, Act x, const NormWeight& w, Act y);
void add(const Exec& e, Act a, Act b, Act y);
// h = h + delta; y = rms_norm(h).
void add_rms_norm(const Exec& e, Act h, Act delta, const NormWeight& w, Act y);
void linear(const Exec& e, const LinearWeight& w, Act x, Act y);
// x = rms_norm(src), then y = x · Wᵀ: exactly rms_norm then linear (x is written), in one
// backend call that a GPU can run as one kernel at decode.
void norm_linear(const Exec& e, const NormWeight& norm, Act src, Act x, const LinearWeight& w,
                 Act y);
// h = h + x · Wᵀ (the product rounded first): exactly linear into a temporary then add.
void linear_add(const Exec& e, const LinearWeight& w, Act x, Act h);
// x = gated_activation(act, gu's halves) (gu [T, 2K]: the fused gate_up's output), then
// h = h + x · Wᵀ: exactly gated_activation then linear_add (x is written), in one backend call
// that a GPU can run as one kernel at decode (the down GEMV computes its own input).
void gated_linear_add(const Exec& e, Activation act, Act gu, Act x, const LinearWeight& w, Act h);
// RoPE on q and k, then K and V appended at each token's slot of the cache. With q_norm and
// k_norm (qk-norm), each head of q and k is RMS-normalized first, in the same op.
void rope_kv_append(const Exec& e, Act q, Act k, Act v, int n_heads, int n_kv_heads, int head_dim,
                    const Rope& rope, const KvLayout& kv, int layer, const StepView& step,
                    const NormWeight* q_norm = nullptr, const NormWeight* k_norm = nullptr);
void attention(const Exec& e, Act q, int n_heads, const KvLayout& kv, int layer,
               std::int64_t window, float scale, const StepView& step, Act out);
void gated_activation(const Exec& e, Activation act, Act g, Act u, Act out);
// Router softmax + top-k (experts / weights are device arrays [T, top_k]), then the experts;
// accumulate: out += the combined output (the residual add, exactly as moe then add). With
// `norm`, x = rms_norm(norm_src) first, inside the router's projection (norm_linear).
struct MoeFusion {
  bool accumulate = false;
  const NormWeight* norm = nullptr;
  Act norm_src;
};
void moe(const Exec& e, const LinearWeight& router, const LinearWeight& gate,
         const LinearWeight& up, const LinearWeight& down, int top_k, bool norm_topk_prob,
         Act x, Act gates, std::int32_t* experts, float* weights, Act out,
         const MoeFusion& fusion = {});
void gather_rows(const Exec& e, Act src, const std::int32_t* rows, const std::int32_t* host_rows,
                 std::int64_t n, Act dst);
// Copies an activation view to host fp32 rows (logits, traces).
void to_host(const Exec& e, Act a, float* dst);

}  // namespace mlxcel::ops
