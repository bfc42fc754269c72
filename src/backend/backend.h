#pragma once
// The Backend interface (DESIGN.md "Execution"): what a device must offer for the forward pass.
// Models never see it directly; src/ops validates arguments, asks `supports`, and calls one entry
// per op family with a plain argument struct whose pointers are device addresses (host memory on
// the CPU). A backend owns its memory kinds, copies, synchronization and (optionally) graph capture.
//
// Activations travel as `Act` views: rows x cols with a row stride, stored in the backend's
// activation storage dtype. Every op rounds its output once to the activation dtype of the
// checkpoint (`round`): an op boundary is exactly a point where MLX materializes an array, so the
// rounding rules of mlx-lm hold without the model knowing about dtypes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "backend/sample_math.h"

namespace mlxcel::backend {

// How the CPU backend does its arithmetic. kFast accumulates in fp32 (what MLX's Metal and CUDA
// backends do); kMlx reproduces MLX's CPU backend bit for bit (docs/numerics.md). Only the CPU
// backend reads it: a GPU backend refuses kMlx.
enum class Numerics : std::uint8_t { kFast = 0, kMlx = 1 };
const char* numerics_name(Numerics n);
bool parse_numerics(const std::string& s, Numerics* out);

enum class MemoryKind : std::uint8_t { kWeights = 0, kKvCache = 1, kWorkspace = 2, kPinnedHost = 3 };

enum class Op : std::uint8_t {
  kEmbed = 0,
  kRmsNorm,
  kAdd,
  kAddRmsNorm,
  kLinear,
  kRopeKvAppend,
  kAttention,
  kGatedActivation,
  kMoeRoute,
  kMoeExperts,
  kGatherRows,
  kSample,
  kCount
};
const char* op_name(Op op);

// Weight formats, as MLX names them (MLX_FORMATS.md). kNone: a dense float matrix.
enum class QMode : std::uint8_t { kNone = 0, kAffine = 1, kMxfp4 = 2, kMxfp8 = 3, kNvfp4 = 4 };
const char* qmode_name(QMode m);

enum class Activation : std::uint8_t { kSilu = 0, kGeluApprox = 1 };

// What `supports` is asked: the op, the activation dtype and, for weight ops, the weight format.
struct OpSignature {
  Op op = Op::kEmbed;
  DType act = DType::kF32;
  QMode qmode = QMode::kNone;
  DType weight_dtype = DType::kF32;  // dense weights; scales dtype when quantized
  int bits = 0;
  int group_size = 0;
  int head_dim = 0;
  std::string str() const;
};

// A 2-D activation view on the device. Element (r, c) is at data + (r * stride + c) * size(dtype).
struct Act {
  void* data = nullptr;
  DType dtype = DType::kF32;  // storage dtype
  std::int64_t rows = 0, cols = 0, stride = 0;
  Act sub(std::int64_t col0, std::int64_t ncols) const;  // columns [col0, col0 + ncols)
  Act head_rows(std::int64_t heads) const;               // [rows * heads, cols / heads]
};

// A weight matrix [n, k] (y = x · Wᵀ) as uploaded: dense (w in a float dtype) or MLX-quantized
// (w packed U32 [n, k * bits / 32], scales [n, k / gs], biases for affine). Experts of a
// SwitchLinear are stacked: expert e starts `expert_stride_*` bytes after expert 0.
struct Matrix {
  const void* w = nullptr;
  DType w_dtype = DType::kF32;
  const void* scales = nullptr;
  const void* biases = nullptr;
  DType scales_dtype = DType::kF32;
  QMode mode = QMode::kNone;
  int bits = 0;
  int group_size = 0;
  std::int64_t n = 0, k = 0;
  std::size_t expert_stride_w = 0, expert_stride_s = 0;  // bytes; stacked experts only
  // Affine only: elements from one group's scale to the next group's (and bias to bias). 1: the
  // checkpoint's two arrays [n, k / gs]; 2: one array of (scale, bias) pairs [n, k / gs, 2],
  // `scales` at its first element and `biases` one element on (the upload layout of backends
  // whose wants_paired_scales() is true; expert_stride_s then counts the pairs' bytes).
  int scale_step = 1;
  Matrix expert(std::int64_t e) const;
};

// Writes `groups` (scale, bias) pairs of `elem_bytes`-byte elements to `out` (2 * groups
// elements): pair g = (scales[g], biases[g]), the paired layout of Matrix::scale_step 2.
void pair_scales(const void* scales, const void* biases, std::size_t groups, std::size_t elem_bytes,
                 void* out);

// The paged KV pool of one model (runtime/kv_cache.h): one allocation of num_blocks blocks; per
// block and layer, K [n_kv_heads, block_size, head_dim] then V [n_kv_heads, block_size, v_dim].
// Layer-major: layer l's blocks fill one region (block b at l * layer_stride() + b *
// block_stride()), so a sequence's keys for one layer, in consecutively allocated blocks, sit
// together in a few memory pages rather than one block (all layers of it) per page.
struct KvLayout {
  void* base = nullptr;
  int n_layers = 0, n_kv_heads = 0, head_dim = 0, v_dim = 0, block_size = 0;
  DType dtype = DType::kF32;
  std::int64_t num_blocks = 0;
  std::size_t k_block_bytes() const;
  std::size_t v_block_bytes() const;
  std::size_t block_bytes() const;   // one block, all layers (capacity accounting)
  std::size_t block_stride() const;  // from block b to b + 1 within a layer
  std::size_t layer_stride() const;  // from layer l to l + 1
  std::size_t bytes() const { return block_bytes() * static_cast<std::size_t>(num_blocks); }
  void* k_block(int layer, std::int32_t block) const;
  void* v_block(int layer, std::int32_t block) const;
};

// The per-step metadata block as the device sees it (ops/step.h builds and uploads it): int32
// arrays of one allocation. Token t belongs to sequence seq_of_token[t] and sits at absolute
// position positions[t]; block_tables is [n_seqs, max_blocks].
struct StepView {
  std::int64_t n_tokens = 0, n_seqs = 0, max_blocks = 0;
  const std::int32_t* tokens = nullptr;
  const std::int32_t* positions = nullptr;
  const std::int32_t* seq_of_token = nullptr;
  const std::int32_t* block_tables = nullptr;
  const std::int32_t* seq_lens = nullptr;  // length after this step
  // Host copies of the same arrays (the CPU backend reads these; GPU kernels the device ones).
  const std::int32_t* host_tokens = nullptr;
  const std::int32_t* host_positions = nullptr;
  const std::int32_t* host_seq_of_token = nullptr;
  const std::int32_t* host_block_tables = nullptr;
  // CPU `--numerics mlx` only: per sequence, key positions in mlx-lm's rotating-cache slot order
  // (null/0 = position order). See runtime/rotating_order.h.
  const std::vector<std::vector<std::int64_t>>* window_order = nullptr;
};

struct EmbedArgs {
  Matrix table;                        // [vocab, dim]
  const std::int32_t* ids = nullptr;   // device, [n]
  const std::int32_t* host_ids = nullptr;
  std::int64_t n = 0;
  float scale = 1.0f;  // gemma: sqrt(hidden) rounded to bf16; 1 = none
  Act out;
  DType round = DType::kF32;
};

struct RmsNormArgs {
  Act x;           // normalized per row (per head slice when heads > 1); x and y may alias
  const float* weight = nullptr;  // device fp32 [cols] (gemma's 1 + w already applied)
  float eps = 1e-5f;
  Act y;
  DType round = DType::kF32;
  std::int64_t heads = 1;  // each row holds `heads` vectors of cols / heads (qk-norm)
};

struct AddArgs {  // y = round(a + b); y may alias a
  Act a, b, y;
  DType round = DType::kF32;
};

struct AddRmsNormArgs {  // h = round(h + delta); y = rms_norm(h)
  Act h, delta;
  const float* weight = nullptr;
  float eps = 1e-5f;
  Act y;
  DType round = DType::kF32;
};

struct LinearArgs {  // y = round(x · Wᵀ + bias)
  LinearArgs() = default;
  LinearArgs(Act x_, Matrix w_, const float* bias_, Act y_, DType round_)
      : x(x_), w(w_), bias(bias_), y(y_), round(round_) {}
  Act x;
  Matrix w;
  const float* bias = nullptr;  // device fp32 [n] or null
  Act y;
  DType round = DType::kF32;
  // Fusions every backend honours, with exactly the unfused ops' results (a GPU runs them
  // inside the decode GEMV where it can, saving a launch and a pass over the activations):
  // accumulate: y = round(y + round(x · Wᵀ + bias)), the residual add of an output projection
  // (linear into a temporary, then add).
  bool accumulate = false;
  // norm_weight set: x = rms_norm(norm_src) with norm_weight / norm_eps first (x is written:
  // later ops may read it), then the product (rms_norm, then linear).
  const float* norm_weight = nullptr;
  float norm_eps = 1e-5f;
  Act norm_src;
  // gated_in: x = round(round(act(g)) * u) over gated_src's halves g, u (gated_src [rows, 2K]:
  // the fused gate_up's output) first, then the product (gated_activation into x, then linear;
  // x is written). The down projection's input, so that a GPU computes it inside the GEMV.
  bool gated_in = false;
  Activation gated_act = Activation::kSilu;
  Act gated_src;
};

// The rotary table of a layer, as mlx-lm builds it (backend/cpu/rope.h has the semantics).
struct RopeTable {
  std::int64_t dims = 0;
  bool traditional = false;
  float base = 10000.0f;
  float scale = 1.0f;
  float input_scale = 1.0f;
  const float* freqs = nullptr;  // device [dims/2] or null (base form)
  const float* host_freqs = nullptr;
};

// RoPE on q [T, n_heads*hd] and k [T, n_kv_heads*hd] in place (rounded), then K and V of every
// token written to its slot in layer `layer` of the cache.
struct RopeKvAppendArgs {
  Act q, k, v;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  RopeTable rope;
  KvLayout kv;
  int layer = 0;
  StepView step;
  DType round = DType::kF32;
  // qk-norm (qwen3, gemma3): when set, each head of q (k) is first RMS-normalized in place with
  // this device fp32 [head_dim] weight, exactly as RmsNormArgs with heads = n_heads (n_kv_heads).
  // One op instead of three lets a GPU normalize, rotate and append a head in one kernel.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float q_norm_eps = 1e-6f, k_norm_eps = 1e-6f;
};

// Causal attention of every token's q against its sequence's cache (keys at positions <= its
// own, and within `window` when > 0), GQA, output [T, n_heads*v_dim] rounded.
struct AttentionArgs {
  Act q;
  int n_heads = 0;
  KvLayout kv;
  int layer = 0;
  std::int64_t window = 0;
  float scale = 1.0f;
  StepView step;
  Act out;
  DType round = DType::kF32;
};

struct GatedActivationArgs {  // out = round(act(g) * u), with MLX's op-by-op rounding
  Activation act = Activation::kSilu;
  Act g, u, out;
  DType round = DType::kF32;
};

// mlx-lm's SwitchGLU routing: softmax over the router logits (fp32, rounded), the top k experts
// in mx.argpartition's order, optionally renormalized.
struct MoeRouteArgs {
  Act gates;  // [T, E] router logits (rounded)
  int top_k = 0;
  bool norm_topk_prob = false;
  std::int32_t* experts = nullptr;  // device [T, top_k]
  float* weights = nullptr;         // device [T, top_k] (rounded values)
  DType round = DType::kF32;
  // with_router: gates are the product `router` (router.y is gates) computed first, with its
  // fusions (a fused input norm), as linear then moe_route would; a backend may run both as one
  // kernel (a decode step's router GEMV and its top-k). Held by value: a recorded step keeps it.
  bool with_router = false;
  LinearArgs router;
};

// The chosen experts' SwiGLU over each token and the weighted sum (fp32 accumulation of the
// rounded products, as mlx-lm's (y * scores).sum(-2)).
struct MoeExpertsArgs {
  Act x;  // [T, H]
  Matrix gate, up, down;  // stacked [E, I, H], [E, I, H], [E, H, I]
  std::int64_t num_experts = 0;  // E (the router's outputs); 0: not given
  Activation act = Activation::kSilu;
  int top_k = 0;
  const std::int32_t* experts = nullptr;
  const float* weights = nullptr;
  Act out;  // [T, H]
  DType round = DType::kF32;
  bool accumulate = false;  // out = round(out + round(the combine)): the residual add
};

struct GatherRowsArgs {  // dst[i] = src[rows[i]]
  Act src;
  const std::int32_t* rows = nullptr;  // device
  const std::int32_t* host_rows = nullptr;
  std::int64_t n = 0;
  Act dst;
};

// Samples `n` rows (backend/sample_math.h has the arithmetic both devices share): for row i,
// the fp32 copy of logits row rows[i].logit_row gets its processors and allowed-token mask, is
// checked for NaN/+inf, then greedy or filtered (top-p, min-p, top-k) and drawn; out[i] gets the
// token, its log-probability and the top ones asked for. All pointers are device memory.
struct SampleArgs {
  Act logits;                       // [rows, vocab] in the activation storage dtype
  std::int64_t n = 0;
  const SampleRow* rows = nullptr;
  const SampleProc* procs = nullptr;
  const std::uint32_t* masks = nullptr;  // bit t of row m: masks[m * mask_words + t / 32]
  std::int64_t mask_words = 0;
  float* scratch = nullptr;         // sample_scratch_bytes(n, vocab)
  SampleOut* out = nullptr;
};
// Device bytes of SampleArgs::scratch for n rows.
inline std::size_t sample_scratch_bytes(std::int64_t n, std::int64_t vocab) {
  return static_cast<std::size_t>(2 * n * vocab) * sizeof(float);
}

// The sampling op for one row on host memory (the CPU backend's kernel), for callers that hold
// logits on the host (tests, tools). `processed`, when given, receives the filtered
// log-probabilities (cpu/sample.h).
void sample_on_host(const float* logits, std::int64_t vocab, const SampleRow& row,
                    const SampleProc* procs, const std::uint32_t* mask, SampleOut* out,
                    float* processed = nullptr);

enum class CopyKind : std::uint8_t { kHostToDevice = 0, kDeviceToHost = 1, kDeviceToDevice = 2 };

class Backend;

// A backend's recording of a sequence of ops (Backend::end_capture); opaque to callers.
class Recording {
 public:
  virtual ~Recording() = default;
};

// RAII device memory from one backend.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Counts the bytes in owner's memory_stats() until the buffer is released.
  DeviceBuffer(Backend* owner, void* data, std::size_t bytes, MemoryKind kind);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  MemoryKind kind() const { return kind_; }

 private:
  void reset();
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::kWorkspace;
};

// Bytes held through DeviceBuffers, per MemoryKind (index = the enum's value) and in total; the
// peak is the largest total seen. Memory planning (`inspect`, the server's KV budget) and `bench`
// compare their estimates with these numbers.
struct MemoryStats {
  std::size_t current[4] = {0, 0, 0, 0};
  std::size_t total = 0;
  std::size_t peak = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  MemoryStats memory_stats() const;
  virtual BackendKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu (avx2, fast numerics)", "cuda:0 NVIDIA H200", ...
  virtual bool supports(const OpSignature& sig) const = 0;
  // The dtype activations are stored in for a checkpoint whose activation dtype is `act`. The CPU
  // keeps fp32 containers of values rounded to `act` (its kernels read fp32); a GPU stores `act`.
  virtual DType activation_storage(DType act) const = 0;
  // True when weights already in host memory can be used in place (no upload copy).
  virtual bool host_memory_is_device_memory() const = 0;
  // True when affine weights that are copied to the device anyway should go up with scales and
  // biases paired (Matrix::scale_step 2; the same bytes): the GPU decode GEMV then fetches a
  // row's scale and bias of two groups in one load instead of four.
  virtual bool wants_paired_scales() const { return false; }

  // Throws out_of_memory naming the requested and available bytes.
  virtual DeviceBuffer allocate(MemoryKind kind, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) = 0;
  virtual void synchronize() = 0;

  virtual void embed(const EmbedArgs& a) = 0;
  virtual void rms_norm(const RmsNormArgs& a) = 0;
  virtual void add(const AddArgs& a) = 0;
  virtual void add_rms_norm(const AddRmsNormArgs& a) = 0;
  virtual void linear(const LinearArgs& a) = 0;
  virtual void rope_kv_append(const RopeKvAppendArgs& a) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  virtual void gated_activation(const GatedActivationArgs& a) = 0;
  virtual void moe_route(const MoeRouteArgs& a) = 0;
  virtual void moe_experts(const MoeExpertsArgs& a) = 0;
  virtual void gather_rows(const GatherRowsArgs& a) = 0;
  virtual void sample(const SampleArgs& a) = 0;

  // Graph capture of a decode step (DESIGN.md "Decode is captured"; ops/step_graphs.h drives
  // it). True while this backend can record and replay ops: GPU backends, unless switched off or
  // profiling / synchronizing per op; the CPU has none.
  virtual bool can_capture() const { return false; }
  // Turns recording on or off where the backend has it, whatever its default (`mlxcel selftest`
  // checks it on devices where it is off by default); returns can_capture().
  virtual bool set_capture(bool on) {
    (void)on;
    return false;
  }
  // Between begin_capture and end_capture the ops called are recorded, not run. end_capture
  // returns the recording, or null when it failed (then none of those ops ran: run them again
  // uncaptured). An op that would have to allocate while recording throws instead.
  virtual void begin_capture();
  virtual std::unique_ptr<Recording> end_capture();
  // Runs a recording: the same kernels on the same addresses, reading the step's values from the
  // device memory they were recorded against.
  virtual void replay(const Recording& r);
  // Changes whenever the backend replaces memory of its own that recordings address (scratch,
  // attention partials): recordings made before a change are stale.
  virtual std::uint64_t capture_epoch() const { return 0; }

  // CPU `--numerics mlx` replays mlx-lm's rotating sliding-window order (StepView::window_order).
  virtual bool wants_window_order() const { return false; }

 protected:
  friend class DeviceBuffer;
  virtual void release(void* data, std::size_t bytes, MemoryKind kind) = 0;

 private:
  void account(MemoryKind kind, std::size_t bytes, bool add);
  mutable std::mutex stats_mu_;
  MemoryStats stats_;
};

// The backend of `kind` with the given numerics policy. Throws unsupported when this build has no
// such backend, or for `--numerics mlx` on a GPU.
std::unique_ptr<Backend> create_backend(BackendKind kind, Numerics numerics = Numerics::kFast);

}  // namespace mlxcel::backend
