#include "quant/qmm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/packing.h"
#include "quant/quantize.h"

namespace mlxcel {
namespace quant {

namespace {
// Element values of the fp modes by code, invalid codes already 0.
struct FpLut {
  float e4m3[256];
  float e2m1[16];
  FpLut() {
    for (int i = 0; i < 256; ++i) e4m3[i] = decode_fp_elem(QuantMode::kMxfp8, static_cast<std::uint32_t>(i));
    for (int i = 0; i < 16; ++i) e2m1[i] = fp4_e2m1_to_float(static_cast<std::uint8_t>(i));
  }
};
const FpLut& fp_lut() {
  static const FpLut lut;
  return lut;
}
}  // namespace

void decode_row_f32(const Tensor& w, const Tensor& scales, const Tensor* biases, const QuantParams& p,
                    std::int64_t row, float* out) {
  const std::int64_t K = unpacked_dim(w.dim(-1), p.bits);
  const std::int64_t groups = K / p.group_size;
  const int gs = p.group_size;
  const auto* wr = static_cast<const std::uint8_t*>(w.raw()) + row * (K * p.bits / 8);
  if (p.mode == QuantMode::kAffine) {
    const DType sdt = scales.dtype();
    for (std::int64_t g = 0; g < groups; ++g) {
      const float s = load_float(scales.raw(), sdt, row * groups + g);
      const float b = load_float(biases->raw(), sdt, row * groups + g);
      float* o = out + g * gs;
      if (p.bits == 8) {
        const std::uint8_t* c = wr + g * gs;
        for (int j = 0; j < gs; ++j) o[j] = s * static_cast<float>(c[j]) + b;
      } else if (p.bits == 4) {
        const std::uint8_t* c = wr + g * gs / 2;
        for (int j = 0; j < gs / 2; ++j) {
          o[2 * j] = s * static_cast<float>(c[j] & 0xF) + b;
          o[2 * j + 1] = s * static_cast<float>(c[j] >> 4) + b;
        }
      } else {
        for (int j = 0; j < gs; ++j) o[j] = s * static_cast<float>(get_code(wr, g * gs + j, p.bits)) + b;
      }
    }
    return;
  }
  const FpLut& lut = fp_lut();
  const auto* sb = static_cast<const std::uint8_t*>(scales.raw()) + row * groups;
  for (std::int64_t g = 0; g < groups; ++g) {
    const float s = decode_fp_scale(p.mode, sb[g]);
    float* o = out + g * gs;
    if (p.mode == QuantMode::kMxfp8) {
      const std::uint8_t* c = wr + g * gs;
      for (int j = 0; j < gs; ++j) o[j] = lut.e4m3[c[j]] * s;
    } else {
      const std::uint8_t* c = wr + g * gs / 2;
      for (int j = 0; j < gs / 2; ++j) {
        o[2 * j] = lut.e2m1[c[j] & 0xF] * s;
        o[2 * j + 1] = lut.e2m1[c[j] >> 4] * s;
      }
    }
  }
}

}  // namespace quant

namespace {

bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

DType out_dtype_for(const Tensor& x, const Tensor& scales, const QuantParams& p) {
  if (p.mode != QuantMode::kAffine) return x.dtype();
  return x.dtype() == scales.dtype() ? x.dtype() : DType::kF32;
}

Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MLXCEL_CHECK(da == db || da == 1 || db == 1, ErrorCategory::kBadInput,
                 std::string(what) + ": shapes " + shape_to_string(a) + " and " + shape_to_string(b) +
                     " do not broadcast");
    out[i] = std::max(da, db);
  }
  return out;
}

// Flat index into `src` (a shape that broadcasts to `dst`) of flat element `i` of `dst`.
std::int64_t broadcast_index(std::int64_t i, const Shape& dst, const Shape& src) {
  std::int64_t idx = 0, stride = 1;
  for (int d = static_cast<int>(dst.size()) - 1; d >= 0; --d) {
    const std::int64_t c = i % dst[d];
    i /= dst[d];
    const int sd = d - static_cast<int>(dst.size() - src.size());
    if (sd >= 0) {
      if (src[sd] != 1) idx += c * stride;
      stride *= src[sd];
    }
  }
  return idx;
}

struct QMatrix {
  Tensor w, scales, biases;  // contiguous, batch dims flattened: [B, R, .]
  std::int64_t batch = 1, rows = 0, cols = 0;  // cols = unpacked last dim
};

QMatrix prepare(const Tensor& w, const Tensor& scales, const Tensor* biases, const QuantParams& p,
                const char* op) {
  check_quantized_shapes(w, scales, biases, p, op);
  QMatrix m;
  m.rows = w.dim(-2);
  m.cols = unpacked_dim(w.dim(-1), p.bits);
  m.batch = w.numel() / std::max<std::int64_t>(w.dim(-2) * w.dim(-1), 1);
  if (w.dim(-2) * w.dim(-1) == 0) m.batch = shape_numel(batch_of(w));
  m.w = w.contiguous();
  m.scales = scales.contiguous();
  if (biases) m.biases = biases->contiguous();
  return m;
}

// One 2-D matrix (batch b) of a QMatrix as tensors the row decoder accepts.
struct MatrixView {
  Tensor w, s, b;
};
MatrixView matrix(const QMatrix& q) {
  return {q.w.reshape({q.batch, q.w.dim(-2), q.w.dim(-1)}),
          q.scales.reshape({q.batch, q.scales.dim(-2), q.scales.dim(-1)}),
          q.biases.defined() ? q.biases.reshape({q.batch, q.biases.dim(-2), q.biases.dim(-1)}) : Tensor()};
}

// out[M, N] (double) += x_mat[M, K] @ dequant(W_b) (transposed or not).
void matmul_one(const float* x, std::int64_t M, const MatrixView& mv, std::int64_t b, bool transpose,
                const QuantParams& p, std::vector<float>& rowbuf, double* out, std::int64_t N,
                std::int64_t K) {
  Tensor w = mv.w.select(0, b), s = mv.s.select(0, b);
  Tensor bias = mv.b.defined() ? mv.b.select(0, b) : Tensor();
  const Tensor* bp = bias.defined() ? &bias : nullptr;
  if (transpose) {
    for (std::int64_t n = 0; n < N; ++n) {
      quant::decode_row_f32(w, s, bp, p, n, rowbuf.data());
      for (std::int64_t m = 0; m < M; ++m) {
        const float* xr = x + m * K;
        // Four independent double accumulators (exact products, fixed order: deterministic).
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        std::int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
          a0 += static_cast<double>(xr[k]) * rowbuf[k];
          a1 += static_cast<double>(xr[k + 1]) * rowbuf[k + 1];
          a2 += static_cast<double>(xr[k + 2]) * rowbuf[k + 2];
          a3 += static_cast<double>(xr[k + 3]) * rowbuf[k + 3];
        }
        for (; k < K; ++k) a0 += static_cast<double>(xr[k]) * rowbuf[k];
        out[m * N + n] = (a0 + a1) + (a2 + a3);
      }
    }
  } else {
    std::fill(out, out + M * N, 0.0);
    for (std::int64_t k = 0; k < K; ++k) {
      quant::decode_row_f32(w, s, bp, p, k, rowbuf.data());
      for (std::int64_t m = 0; m < M; ++m) {
        const double xv = x[m * K + k];
        double* o = out + m * N;
        for (std::int64_t n = 0; n < N; ++n) o[n] += xv * rowbuf[n];
      }
    }
  }
}

std::vector<std::int64_t> read_indices(const Tensor& t, std::int64_t limit, const char* what) {
  const Tensor c = t.contiguous();
  std::vector<std::int64_t> v(static_cast<std::size_t>(c.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (c.dtype()) {
      case DType::kU32: v[i] = c.data<std::uint32_t>()[i]; break;
      case DType::kI32: v[i] = c.data<std::int32_t>()[i]; break;
      case DType::kI64: v[i] = c.data<std::int64_t>()[i]; break;
      case DType::kU64: v[i] = static_cast<std::int64_t>(c.data<std::uint64_t>()[i]); break;
      default:
        throw_error(ErrorCategory::kBadInput,
                    std::string(what) + ": indices must be an integer tensor, got " +
                        std::string(dtype_name(c.dtype())));
    }
    MLXCEL_CHECK(v[i] >= 0 && v[i] < limit, ErrorCategory::kBadInput,
                 std::string(what) + ": index " + std::to_string(v[i]) + " out of range [0, " +
                     std::to_string(limit) + ")");
  }
  return v;
}

}  // namespace

Tensor quantized_matmul(const Tensor& x_in, const Tensor& w, const Tensor& scales, const Tensor* biases,
                        bool transpose, const QuantParams& p, std::optional<float> global_scale) {
  MLXCEL_CHECK(is_float_dtype(x_in.dtype()), ErrorCategory::kBadInput,
               "quantized_matmul: x must be F32, F16 or BF16");
  const QMatrix q = prepare(w, scales, biases, p, "quantized_matmul");
  Tensor x = x_in.ndim() == 1 ? x_in.reshape({1, x_in.dim(0)}) : x_in;
  const std::int64_t K = transpose ? q.cols : q.rows;
  const std::int64_t N = transpose ? q.rows : q.cols;
  MLXCEL_CHECK(x.dim(-1) == K, ErrorCategory::kBadInput,
               "quantized_matmul: x " + x.shape_str() + " has last dim " + std::to_string(x.dim(-1)) +
                   " but the quantized weight expects " + std::to_string(K) +
                   (transpose ? " (transpose=true)" : " (transpose=false)"));
  const std::int64_t M = x.dim(-2);
  const Shape xb = batch_of(x), wb = batch_of(q.w);
  const Shape ob = w.ndim() > 2 ? broadcast_shapes(xb, wb, "quantized_matmul") : xb;
  Shape oshape = ob;
  oshape.push_back(M);
  oshape.push_back(N);
  if (x_in.ndim() == 1) oshape = {N};
  const DType odt = out_dtype_for(x_in, scales, p);
  Tensor out = Tensor::empty(odt, oshape);
  const std::vector<float> xf = x.to_f32();
  const MatrixView mv = matrix(q);
  std::vector<float> rowbuf(static_cast<std::size_t>(std::max(q.cols, std::int64_t{1})));
  std::vector<double> acc(static_cast<std::size_t>(M * N));
  const std::int64_t nb = shape_numel(ob);
  const float gf = global_scale ? *global_scale / (448.0f * 6.0f) : 1.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::int64_t xi = broadcast_index(i, ob, xb);
    const std::int64_t wi = w.ndim() > 2 ? broadcast_index(i, ob, wb) : 0;
    matmul_one(xf.data() + xi * M * K, M, mv, wi, transpose, p, rowbuf, acc.data(), N, K);
    for (std::int64_t j = 0; j < M * N; ++j) {
      quant::store_float(out.raw(), odt, i * M * N + j, static_cast<float>(acc[j] * gf));
    }
  }
  return out;
}

Tensor gather_qmm(const Tensor& x_in, const Tensor& w, const Tensor& scales, const Tensor* biases,
                  const Tensor* lhs_indices, const Tensor* rhs_indices, bool transpose,
                  const QuantParams& p) {
  MLXCEL_CHECK(is_float_dtype(x_in.dtype()) && x_in.ndim() >= 2, ErrorCategory::kBadInput,
               "gather_qmm: x must be a float tensor with at least 2 dims");
  const QMatrix q = prepare(w, scales, biases, p, "gather_qmm");
  const Shape xb = batch_of(x_in), wb = batch_of(q.w);
  const std::int64_t bx = shape_numel(xb), bw = shape_numel(wb);
  const std::int64_t K = transpose ? q.cols : q.rows;
  const std::int64_t N = transpose ? q.rows : q.cols;
  const std::int64_t M = x_in.dim(-2);
  MLXCEL_CHECK(x_in.dim(-1) == K, ErrorCategory::kBadInput,
               "gather_qmm: x " + x_in.shape_str() + " does not match the quantized weight's K = " +
                   std::to_string(K));
  std::vector<std::int64_t> lhs, rhs;
  Shape ls = xb, rs = wb;
  if (lhs_indices) {
    lhs = read_indices(*lhs_indices, bx, "gather_qmm lhs_indices");
    ls = lhs_indices->shape();
  } else {
    lhs.resize(static_cast<std::size_t>(bx));
    for (std::int64_t i = 0; i < bx; ++i) lhs[i] = i;
  }
  if (rhs_indices) {
    rhs = read_indices(*rhs_indices, bw, "gather_qmm rhs_indices");
    rs = rhs_indices->shape();
  } else {
    rhs.resize(static_cast<std::size_t>(bw));
    for (std::int64_t i = 0; i < bw; ++i) rhs[i] = i;
  }
  const Shape is = broadcast_shapes(ls, rs, "gather_qmm");
  Shape oshape = is;
  oshape.push_back(M);
  oshape.push_back(N);
  const DType odt = out_dtype_for(x_in, scales, p);
  Tensor out = Tensor::empty(odt, oshape);
  const std::vector<float> xf = x_in.to_f32();
  const MatrixView mv = matrix(q);
  std::vector<float> rowbuf(static_cast<std::size_t>(std::max(q.cols, std::int64_t{1})));
  std::vector<double> acc(static_cast<std::size_t>(M * N));
  const std::int64_t n_out = shape_numel(is);
  for (std::int64_t i = 0; i < n_out; ++i) {
    const std::int64_t li = lhs[broadcast_index(i, is, ls)];
    const std::int64_t ri = rhs[broadcast_index(i, is, rs)];
    matmul_one(xf.data() + li * M * K, M, mv, ri, transpose, p, rowbuf, acc.data(), N, K);
    for (std::int64_t j = 0; j < M * N; ++j) {
      quant::store_float(out.raw(), odt, i * M * N + j, static_cast<float>(acc[j]));
    }
  }
  return out;
}

Tensor quantized_embedding(const Tensor& ids, const Tensor& w, const Tensor& scales, const Tensor* biases,
                           const QuantParams& p) {
  MLXCEL_CHECK(w.ndim() == 2, ErrorCategory::kBadInput,
               "quantized_embedding: weight must be 2-D, got " + w.shape_str());
  check_quantized_shapes(w, scales, biases, p, "quantized_embedding");
  const std::vector<std::int64_t> idx = read_indices(ids, w.dim(0), "quantized_embedding ids");
  const std::int64_t n = static_cast<std::int64_t>(idx.size());
  const Tensor wc = w.contiguous(), sc = scales.contiguous();
  Tensor bc = biases ? biases->contiguous() : Tensor();
  Tensor gw = Tensor::empty(DType::kU32, {n, w.dim(1)});
  Tensor gs = Tensor::empty(scales.dtype(), {n, scales.dim(1)});
  Tensor gb = biases ? Tensor::empty(biases->dtype(), {n, biases->dim(1)}) : Tensor();
  const std::size_t wrow = static_cast<std::size_t>(w.dim(1)) * 4;
  const std::size_t srow = static_cast<std::size_t>(scales.dim(1)) * dtype_size(scales.dtype());
  for (std::int64_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<char*>(gw.raw()) + i * wrow, static_cast<const char*>(wc.raw()) + idx[i] * wrow, wrow);
    std::memcpy(static_cast<char*>(gs.raw()) + i * srow, static_cast<const char*>(sc.raw()) + idx[i] * srow, srow);
    if (biases) {
      std::memcpy(static_cast<char*>(gb.raw()) + i * srow, static_cast<const char*>(bc.raw()) + idx[i] * srow,
                  srow);
    }
  }
  Tensor d = dequantize(gw, gs, biases ? &gb : nullptr, p);
  Shape oshape = ids.shape();
  oshape.push_back(d.dim(1));
  return d.reshape(oshape);
}

Tensor as_linear(const Tensor& h, const Tensor& w, const Tensor& scales, const Tensor* biases,
                 const QuantParams& p) {
  return quantized_matmul(h, w, scales, biases, true, p);
}

}  // namespace mlxcel
