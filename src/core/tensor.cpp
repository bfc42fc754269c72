#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "core/error.h"

namespace mlxcel {

Buffer::Buffer(void* data, std::size_t bytes, Device device, Deleter deleter)
    : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}

Buffer::~Buffer() {
  if (deleter_) deleter_(data_);
}

std::shared_ptr<Buffer> Buffer::allocate_host(std::size_t bytes) {
  std::size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    throw_error(ErrorCategory::kOutOfMemory,
                "host allocation of " + std::to_string(bytes) + " bytes failed");
  }
  std::memset(p, 0, rounded);
  return std::make_shared<Buffer>(p, bytes, cpu_device(), [](void* q) { std::free(q); });
}

std::shared_ptr<Buffer> Buffer::wrap(void* data, std::size_t bytes, Device device,
                                     std::shared_ptr<void> keepalive) {
  return std::make_shared<Buffer>(data, bytes, device,
                                  [keep = std::move(keepalive)](void*) mutable { keep.reset(); });
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

static Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  std::int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape, std::size_t offset_bytes)
    : buffer_(std::move(buffer)),
      dtype_(dtype),
      shape_(std::move(shape)),
      strides_(contiguous_strides(shape_)),
      offset_(offset_bytes) {
  for (auto d : shape_) {
    MLXCEL_CHECK(d >= 0, ErrorCategory::kInternal, "negative dimension in " + shape_str());
  }
  MLXCEL_CHECK(offset_ + nbytes() <= buffer_->bytes(), ErrorCategory::kInternal,
               "tensor " + shape_str() + " does not fit its buffer");
}

Tensor Tensor::empty(DType dtype, const Shape& shape) {
  auto buf = Buffer::allocate_host(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  return Tensor(buf, dtype, shape);
}

Tensor Tensor::from_f32(const std::vector<float>& values, const Shape& shape, DType dtype) {
  MLXCEL_CHECK(static_cast<std::int64_t>(values.size()) == shape_numel(shape),
               ErrorCategory::kInternal, "from_f32: value count does not match shape");
  Tensor t = empty(dtype, shape);
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kF32: t.data<float>()[i] = values[i]; break;
      case DType::kBF16: t.data<bf16>()[i] = bf16(values[i]); break;
      case DType::kF16: t.data<f16>()[i] = f16(values[i]); break;
      default:
        throw_error(ErrorCategory::kUnsupported,
                    "from_f32: dtype " + std::string(dtype_name(dtype)) + " is not a float type");
    }
  }
  return t;
}

std::int64_t Tensor::numel() const { return shape_numel(shape_); }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

std::string Tensor::shape_str() const { return shape_to_string(shape_); }

Tensor Tensor::reshape(const Shape& shape) const {
  MLXCEL_CHECK(is_contiguous(), ErrorCategory::kInternal, "reshape of a non-contiguous tensor");
  MLXCEL_CHECK(shape_numel(shape) == numel(), ErrorCategory::kInternal,
               "reshape " + shape_str() + " -> " + shape_to_string(shape) + " changes the size");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice(int axis, std::int64_t begin, std::int64_t end) const {
  if (axis < 0) axis += ndim();
  MLXCEL_CHECK(axis >= 0 && axis < ndim() && 0 <= begin && begin <= end && end <= shape_[axis],
               ErrorCategory::kInternal, "slice out of range on " + shape_str());
  Tensor t = *this;
  t.offset_ += static_cast<std::size_t>(begin * strides_[axis]) * dtype_size(dtype_);
  t.shape_[axis] = end - begin;
  return t;
}

Tensor Tensor::select(int axis, std::int64_t index) const {
  if (axis < 0) axis += ndim();
  Tensor t = slice(axis, index, index + 1);
  t.shape_.erase(t.shape_.begin() + axis);
  t.strides_.erase(t.strides_.begin() + axis);
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  if (a < 0) a += ndim();
  if (b < 0) b += ndim();
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::contiguous() const {
  MLXCEL_CHECK(device().is_cpu(), ErrorCategory::kInternal, "contiguous() is host-only");
  if (is_contiguous()) return *this;
  Tensor out = empty(dtype_, shape_);
  const std::size_t es = dtype_size(dtype_);
  const std::int64_t n = numel();
  std::vector<std::int64_t> idx(shape_.size(), 0);
  const char* src = static_cast<const char*>(raw());
  char* dst = static_cast<char*>(out.raw());
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides_[d];
    std::memcpy(dst + i * es, src + off * es, es);
    for (int d = ndim() - 1; d >= 0; --d) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<float> Tensor::to_f32() const {
  Tensor c = contiguous();
  std::vector<float> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (dtype_) {
      case DType::kF32: out[i] = c.data<float>()[i]; break;
      case DType::kBF16: out[i] = c.data<bf16>()[i].to_float(); break;
      case DType::kF16: out[i] = c.data<f16>()[i].to_float(); break;
      case DType::kF64: out[i] = static_cast<float>(c.data<double>()[i]); break;
      case DType::kI32: out[i] = static_cast<float>(c.data<std::int32_t>()[i]); break;
      case DType::kU32: out[i] = static_cast<float>(c.data<std::uint32_t>()[i]); break;
      case DType::kI64: out[i] = static_cast<float>(c.data<std::int64_t>()[i]); break;
      case DType::kU8: out[i] = c.data<std::uint8_t>()[i]; break;
      case DType::kF8E4M3: out[i] = fp8_e4m3_to_float(c.data<std::uint8_t>()[i]); break;
      case DType::kF8E8M0: out[i] = fp8_e8m0_to_float(c.data<std::uint8_t>()[i]); break;
      default:
        throw_error(ErrorCategory::kUnsupported,
                    "to_f32: dtype " + std::string(dtype_name(dtype_)) + " not convertible");
    }
  }
  return out;
}

}  // namespace mlxcel
