#pragma once
// Tensor: a typed, strided view into a reference-counted buffer that lives on one device.
// Views (slice, reshape of contiguous data) share the buffer; strides are in elements.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace mlxcel {

using Shape = std::vector<std::int64_t>;

// Owns (or borrows, for mmap'd weights) a block of memory on a device.
class Buffer {
 public:
  using Deleter = std::function<void(void*)>;
  Buffer(void* data, std::size_t bytes, Device device, Deleter deleter);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Host allocation, 64-byte aligned, zero-initialized.
  static std::shared_ptr<Buffer> allocate_host(std::size_t bytes);
  // Non-owning view of memory kept alive by `keepalive` (e.g. an mmap'd file).
  static std::shared_ptr<Buffer> wrap(void* data, std::size_t bytes, Device device,
                                      std::shared_ptr<void> keepalive);

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }

 private:
  void* data_;
  std::size_t bytes_;
  Device device_;
  Deleter deleter_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape, std::size_t offset_bytes = 0);

  static Tensor empty(DType dtype, const Shape& shape);  // host, zero-filled
  static Tensor from_f32(const std::vector<float>& values, const Shape& shape, DType dtype);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const { return shape_[i < 0 ? i + ndim() : i]; }
  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  const Device& device() const { return buffer_->device(); }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  std::size_t offset_bytes() const { return offset_; }

  void* raw() const { return static_cast<char*>(buffer_->data()) + offset_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // Views.
  Tensor reshape(const Shape& shape) const;              // contiguous only
  Tensor slice(int axis, std::int64_t begin, std::int64_t end) const;  // strided view
  Tensor select(int axis, std::int64_t index) const;     // drops the axis
  Tensor transpose(int a, int b) const;                  // strided view
  Tensor contiguous() const;                             // copy if needed (host)
  std::vector<float> to_f32() const;                     // host, any float/int dtype

  std::string shape_str() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Shape strides_;
  std::size_t offset_ = 0;
};

std::string shape_to_string(const Shape& shape);
std::int64_t shape_numel(const Shape& shape);

}  // namespace mlxcel
