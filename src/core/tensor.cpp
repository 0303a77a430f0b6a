#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>

#include "core/status.h"

namespace h3 {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// Storage

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  std::shared_ptr<Storage> s(new Storage());
  s->bytes_ = bytes;
  s->device_ = device;
  s->owned_ = true;
  if (device.is_cpu()) {
    // 64-byte alignment serves SIMD loads and matches what safetensors writers align to.
    const size_t rounded = (bytes + 63) / 64 * 64;
    s->data_ = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !s->data_) {
      fail(ErrorCode::kOutOfMemory, "cannot allocate ", bytes, " bytes of host memory");
    }
  } else {
    s->data_ = cuda_malloc(bytes, device.index);
  }
  return s;
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<const void> owner) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->owned_ = false;
  s->owner_ = std::move(owner);
  return s;
}

Storage::~Storage() {
  if (!owned_ || !data_) return;
  if (device_.is_cpu()) {
    std::free(data_);
  } else {
    cuda_free(data_, device_.index);
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor

static void check_shape(const Shape& shape) {
  for (int64_t d : shape) {
    H3_CHECK(d >= 0, ErrorCode::kInvalidArgument, "negative dimension in shape ", shape_str(shape));
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  Tensor t;
  t.storage_ = Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) {
    if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
  } else {
    cuda_zero(t.raw(), t.nbytes());
  }
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device,
                      std::shared_ptr<const void> owner) {
  check_shape(shape);
  Tensor t;
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  t.storage_ = Storage::borrow(data, bytes, device, std::move(owner));
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::over(std::shared_ptr<Storage> storage, size_t byte_offset, const Shape& shape,
                    DType dtype) {
  check_shape(shape);
  H3_CHECK(storage != nullptr, ErrorCode::kInvalidArgument, "Tensor::over: no storage");
  const size_t elem = dtype_size(dtype);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * elem;
  H3_CHECK(byte_offset % elem == 0 && byte_offset <= storage->bytes() &&
               bytes <= storage->bytes() - byte_offset,
           ErrorCode::kInvalidArgument, "Tensor::over: ", dtype_name(dtype), shape_str(shape),
           " at byte ", byte_offset, " does not fit a storage of ", storage->bytes(),
           " bytes at an element boundary");
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.offset_ = static_cast<int64_t>(byte_offset / elem);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& values, const Shape& shape, DType dtype) {
  H3_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), ErrorCode::kInvalidArgument,
           "from_f32: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  convert_elements(values.data(), DType::kF32, t.raw(), dtype, values.size());
  return t;
}

Tensor Tensor::from_i64(const std::vector<int64_t>& values, const Shape& shape) {
  H3_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), ErrorCode::kInvalidArgument,
           "from_i64: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, DType::kI64);
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * 8);
  return t;
}

int Tensor::norm_dim(int d, int ndim) const {
  const int r = d < 0 ? d + ndim : d;
  H3_CHECK(r >= 0 && r < ndim, ErrorCode::kInvalidArgument, "dimension ", d,
           " out of range for a tensor of ", ndim, " dims ", shape_str(shape_));
  return r;
}

int64_t Tensor::size(int d) const { return shape_[norm_dim(d, dim())]; }
int64_t Tensor::stride(int d) const { return strides_[norm_dim(d, dim())]; }

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

std::string Tensor::desc() const {
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " " + device().str();
}

void* Tensor::raw() const {
  H3_CHECK(defined(), ErrorCode::kInternal, "use of an undefined tensor");
  return static_cast<uint8_t*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

void Tensor::check_host_access(size_t elem_size) const {
  H3_CHECK(defined(), ErrorCode::kInternal, "use of an undefined tensor");
  H3_CHECK(device().is_cpu(), ErrorCode::kInternal, "host access to a tensor on ", device().str());
  H3_CHECK(elem_size == dtype_size(dtype_), ErrorCode::kInternal, "element size ", elem_size,
           " does not match dtype ", dtype_name(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  H3_CHECK(is_contiguous(), ErrorCode::kInternal, "view of a non-contiguous tensor ", desc());
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      H3_CHECK(infer < 0, ErrorCode::kInvalidArgument, "view: more than one -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    H3_CHECK(known > 0 && numel() % known == 0, ErrorCode::kInvalidArgument, "view: cannot infer ",
             shape_str(shape), " from ", shape_str(shape_));
    s[infer] = numel() / known;
  }
  H3_CHECK(shape_numel(s) == numel(), ErrorCode::kInvalidArgument, "view: shape ", shape_str(s),
           " does not match ", numel(), " elements of ", shape_str(shape_));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  return is_contiguous() ? view(shape) : contiguous().view(shape);
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  H3_CHECK(static_cast<int>(order.size()) == dim(), ErrorCode::kInvalidArgument,
           "permute: order has ", order.size(), " entries for ", dim(), " dims");
  std::vector<bool> seen(order.size(), false);
  Tensor t = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    const int d = norm_dim(order[i], dim());
    H3_CHECK(!seen[d], ErrorCode::kInvalidArgument, "permute: dimension ", d, " repeated");
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  std::vector<int> order(dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[norm_dim(a, dim())], order[norm_dim(b, dim())]);
  return permute(order);
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  d = norm_dim(d, dim());
  H3_CHECK(start >= 0 && start <= end && end <= shape_[d], ErrorCode::kInvalidArgument, "slice [",
           start, ", ", end, ") out of range for dim ", d, " of ", shape_str(shape_));
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  d = norm_dim(d, dim());
  H3_CHECK(index >= 0 && index < shape_[d], ErrorCode::kInvalidArgument, "select index ", index,
           " out of range for dim ", d, " of ", shape_str(shape_));
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  d = norm_dim(d, dim() + 1);
  Tensor t = *this;
  const int64_t st = d < dim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, st);
  return t;
}

Tensor Tensor::squeeze(int d) const {
  d = norm_dim(d, dim());
  H3_CHECK(shape_[d] == 1, ErrorCode::kInvalidArgument, "squeeze of dim ", d, " of size ", shape_[d]);
  Tensor t = *this;
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

// Visits every element of a strided CPU tensor in C order, calling fn(linear_index, element_offset).
template <typename Fn>
static void for_each_offset(const Shape& shape, const Shape& strides, int64_t base, Fn&& fn) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t off = base;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

void Tensor::copy_from(const Tensor& src) {
  H3_CHECK(src.shape_ == shape_, ErrorCode::kInvalidArgument, "copy_from: shape ",
           shape_str(src.shape_), " into ", shape_str(shape_));
  if (device().is_cuda() || src.device().is_cuda()) {
    H3_CHECK(is_contiguous() && src.is_contiguous() && dtype_ == src.dtype_, ErrorCode::kUnsupported,
             "copy_from across devices needs contiguous tensors of one dtype (", src.desc(), " -> ",
             desc(), ")");
    const CopyKind kind = device().is_cpu()       ? CopyKind::kDeviceToHost
                          : src.device().is_cpu() ? CopyKind::kHostToDevice
                                                  : CopyKind::kDeviceToDevice;
    cuda_copy(raw(), src.raw(), nbytes(), kind);
    return;
  }
  if (is_contiguous() && src.is_contiguous()) {
    convert_elements(src.raw(), src.dtype_, raw(), dtype_, static_cast<size_t>(numel()));
    return;
  }
  // Strided: gather src into a contiguous buffer of its own dtype, then scatter with conversion.
  const size_t es = dtype_size(src.dtype_);
  std::vector<uint8_t> tmp(static_cast<size_t>(numel()) * es);
  const auto* sbase = static_cast<const uint8_t*>(src.storage_->data());
  for_each_offset(src.shape_, src.strides_, src.offset_, [&](int64_t i, int64_t off) {
    std::memcpy(tmp.data() + i * es, sbase + off * es, es);
  });
  if (is_contiguous()) {
    convert_elements(tmp.data(), src.dtype_, raw(), dtype_, static_cast<size_t>(numel()));
    return;
  }
  const size_t ed = dtype_size(dtype_);
  auto* dbase = static_cast<uint8_t*>(storage_->data());
  for_each_offset(shape_, strides_, offset_, [&](int64_t i, int64_t off) {
    convert_elements(tmp.data() + i * es, src.dtype_, dbase + off * ed, dtype_, 1);
  });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  H3_CHECK(device().is_cpu(), ErrorCode::kUnsupported,
           "contiguous() of a strided tensor on ", device().str(), " needs ops::copy");
  Tensor t = empty(shape_, dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  if (device().is_cpu()) {
    t.copy_from(*this);
  } else {
    t.copy_from(contiguous());
  }
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  H3_CHECK(device().is_cpu(), ErrorCode::kUnsupported, "dtype conversion of a tensor on ",
           device().str(), " needs ops::cast");
  Tensor t = empty(shape_, dtype);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  const Tensor src = this->device().is_cpu() ? contiguous() : *this;
  H3_CHECK(src.is_contiguous(), ErrorCode::kUnsupported, "to(", device.str(),
           ") of a strided device tensor");
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(src);
  return t;
}

void Tensor::fill(double value) {
  H3_CHECK(device().is_cpu(), ErrorCode::kUnsupported, "fill on ", device().str());
  const size_t es = dtype_size(dtype_);
  std::vector<uint8_t> one(es);
  store_from_double(one.data(), dtype_, 0, value);
  auto* base = static_cast<uint8_t*>(storage_->data());
  for_each_offset(shape_, strides_, offset_,
                  [&](int64_t, int64_t off) { std::memcpy(base + off * es, one.data(), es); });
}

double Tensor::item_as_double(const std::vector<int64_t>& index) const {
  H3_CHECK(static_cast<int>(index.size()) == dim(), ErrorCode::kInvalidArgument, "index of ",
           index.size(), " entries into ", desc());
  H3_CHECK(device().is_cpu(), ErrorCode::kUnsupported, "element access on ", device().str());
  int64_t off = offset_;
  for (int d = 0; d < dim(); ++d) {
    H3_CHECK(index[d] >= 0 && index[d] < shape_[d], ErrorCode::kInvalidArgument, "index ", index[d],
             " out of range for dim ", d, " of ", shape_str(shape_));
    off += index[d] * strides_[d];
  }
  return load_as_double(storage_->data(), dtype_, static_cast<size_t>(off));
}

std::vector<float> Tensor::to_f32_vector() const {
  const Tensor c = (device().is_cpu() ? *this : to(Device::cpu())).contiguous();
  std::vector<float> out(static_cast<size_t>(numel()));
  convert_elements(c.raw(), c.dtype_, out.data(), DType::kF32, out.size());
  return out;
}

std::vector<double> Tensor::to_f64_vector() const {
  const Tensor c = (device().is_cpu() ? *this : to(Device::cpu())).contiguous();
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_double(c.raw(), c.dtype_, i);
  return out;
}

std::vector<int64_t> Tensor::to_i64_vector() const {
  const Tensor c = (device().is_cpu() ? *this : to(Device::cpu())).contiguous();
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  if (c.dtype_ == DType::kI64) {
    if (!out.empty()) std::memcpy(out.data(), c.raw(), out.size() * 8);
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<int64_t>(load_as_double(c.raw(), c.dtype_, i));
    }
  }
  return out;
}

}  // namespace h3
