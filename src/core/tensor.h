// Tensor: a typed, strided view onto bytes that live on one device.
//
// Storage is shared and reference counted; views (reshape, permute, slice) share it. Storage is
// either owned (allocated here, freed when the last view goes) or borrowed: the bytes belong to
// someone else (an mmap'ed safetensors file, a caller's buffer) and a keep-alive handle holds that
// owner for as long as any view exists, so a borrowed tensor can never dangle.
//
// Strides and offsets are in elements. Layout manipulation works on every device; element access
// (data<T>(), at(), contiguous() of a strided view, dtype conversion) is CPU-only here, and the
// CUDA versions live in ops/.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace h3 {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& s);

class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device);
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool owned() const { return owned_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  bool owned_ = false;
  std::shared_ptr<const void> owner_;
};

class Tensor {
 public:
  Tensor() = default;

  // ---- construction ----
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Wraps memory owned elsewhere; `owner` is kept alive as long as any view of the tensor.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device,
                       std::shared_ptr<const void> owner);
  // A contiguous tensor over existing storage, starting `byte_offset` bytes in (a multiple of the
  // dtype's size; the bytes must lie inside the storage): several tensors packed into one
  // allocation, each keeping the allocation alive (io::LoadLayout::kPacked).
  static Tensor over(std::shared_ptr<Storage> storage, size_t byte_offset, const Shape& shape,
                     DType dtype);
  // CPU tensor copied from host values, converted (with rounding) to dtype.
  static Tensor from_f32(const std::vector<float>& values, const Shape& shape,
                         DType dtype = DType::kF32);
  static Tensor from_i64(const std::vector<int64_t>& values, const Shape& shape);

  // ---- metadata ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t stride(int d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  int64_t offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string desc() const;  // "bf16[2, 3] cuda:0"

  // Raw pointer to the first element (any device).
  void* raw() const;
  // Typed pointer to the first element. CPU tensors only; checks sizeof(T) against the dtype.
  template <typename T>
  T* data() const {
    check_host_access(sizeof(T));
    return static_cast<T*>(raw());
  }

  // ---- views (share storage, any device) ----
  Tensor view(const Shape& shape) const;     // contiguous only; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // view when contiguous, else a contiguous copy
  Tensor permute(const std::vector<int>& order) const;
  Tensor transpose(int a, int b) const;
  Tensor slice(int dim, int64_t start, int64_t end) const;  // [start, end) along dim
  Tensor select(int dim, int64_t index) const;              // removes dim
  Tensor unsqueeze(int dim) const;
  Tensor squeeze(int dim) const;

  // ---- copies ----
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;    // CPU: converts with round-to-nearest-even
  Tensor to(Device device) const;  // contiguous copy on another device (same dtype)
  // Copies src's elements into this tensor (same shape; CPU; converts dtype).
  void copy_from(const Tensor& src);
  void fill(double value);  // CPU

  // ---- element access for tests and tools (CPU, slow) ----
  double item_as_double(const std::vector<int64_t>& index) const;
  std::vector<float> to_f32_vector() const;
  std::vector<double> to_f64_vector() const;
  std::vector<int64_t> to_i64_vector() const;

 private:
  void check_host_access(size_t elem_size) const;
  int norm_dim(int d, int ndim) const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::kF32;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace h3
