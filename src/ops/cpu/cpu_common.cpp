// Helpers shared by the CPU ops: float32 widening, one-rounding stores, index reading.
#include <cstring>

#include "core/status.h"
#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

F32::F32(const Tensor& t) : n_(t.numel()) {
  H3_CHECK(t.device().is_cpu(), ErrorCode::kInternal, "cpu op given a tensor on ", t.device().str());
  H3_CHECK(dtype_is_float(t.dtype()), ErrorCode::kUnsupported, "cpu op: expected a float tensor, got ",
           t.desc());
  if (t.dtype() == DType::kF32 && t.is_contiguous()) {
    holder_ = t;
  } else {
    // copy_from gathers strided views and widens in one pass (exact for the 16- and 8-bit types).
    holder_ = Tensor::empty(t.shape(), DType::kF32);
    holder_.copy_from(t);
  }
  ptr_ = n_ ? static_cast<const float*>(holder_.raw()) : nullptr;
}

std::vector<float> widen_optional(const Tensor* t) {
  if (!t) return {};
  F32 f(*t);
  return std::vector<float>(f.data(), f.data() + f.size());
}

Tensor store_f32(const float* values, const Shape& shape, DType dtype) {
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t n = out.numel();
  if (n) convert_elements(values, DType::kF32, out.raw(), dtype, static_cast<size_t>(n));
  return out;
}

std::vector<int64_t> index_values(const Tensor& idx) {
  H3_CHECK(idx.dtype() == DType::kI64 || idx.dtype() == DType::kI32, ErrorCode::kInvalidArgument,
           "index tensor must be int32 or int64, got ", idx.desc());
  const Tensor c = idx.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(c.numel()));
  if (c.dtype() == DType::kI64) {
    if (!out.empty()) std::memcpy(out.data(), c.raw(), out.size() * 8);
  } else {
    const auto* p = static_cast<const int32_t*>(c.raw());
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
  return out;
}

float round_to(float v, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return round_bf16(v);
    case DType::kF16:
      return round_f16(v);
    case DType::kF8E4M3:
      return f8e4m3_to_f32(f8e4m3_from_f32(v));
    default:
      return v;
  }
}

}  // namespace h3::ops::cpu
