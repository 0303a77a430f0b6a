// Row gather/scatter, concatenation and copies: byte moves for any dtype (scatter converts src to
// the destination dtype, as the DiT's cast-on-scatter of the input projections needs, §2.5).
#include <cstring>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  const Tensor xc = x.contiguous();
  const std::vector<int64_t> rows = index_values(idx);
  Shape shape = x.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(shape, x.dtype());
  const int64_t r = x.size(0);
  const size_t row_bytes = r ? x.nbytes() / static_cast<size_t>(r) : 0;
  const auto* sp = static_cast<const uint8_t*>(xc.raw());
  auto* dp = static_cast<uint8_t*>(out.raw());
  if (row_bytes == 0) return out;
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dp + i * row_bytes, sp + rows[i] * row_bytes, row_bytes);
  return out;
}

void scatter_rows(Tensor& dst, const Tensor& idx, const Tensor& src) {
  const std::vector<int64_t> rows = index_values(idx);
  const Tensor sc = src.dtype() == dst.dtype() ? src.contiguous() : src.to(dst.dtype());
  const int64_t r = dst.size(0);
  const size_t row_bytes = r ? dst.nbytes() / static_cast<size_t>(r) : 0;
  const auto* sp = static_cast<const uint8_t*>(sc.raw());
  auto* dp = static_cast<uint8_t*>(dst.raw());
  if (row_bytes == 0) return;
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dp + rows[i] * row_bytes, sp + i * row_bytes, row_bytes);
}

Tensor concat(const std::vector<Tensor>& parts, int dim) {
  const int nd = parts[0].dim();
  const int d = dim < 0 ? dim + nd : dim;
  Shape shape = parts[0].shape();
  shape[d] = 0;
  for (const Tensor& t : parts) shape[d] += t.size(d);
  Tensor out = Tensor::empty(shape, parts[0].dtype());
  int64_t outer = 1;
  for (int i = 0; i < d; ++i) outer *= shape[i];
  const size_t es = dtype_size(out.dtype());
  size_t out_inner = es;
  for (int i = d; i < nd; ++i) out_inner *= static_cast<size_t>(shape[i]);
  auto* dp = static_cast<uint8_t*>(out.raw());
  size_t offset = 0;
  for (const Tensor& t : parts) {
    const Tensor tc = t.contiguous();
    const size_t inner = outer ? tc.nbytes() / static_cast<size_t>(outer) : 0;
    const auto* sp = static_cast<const uint8_t*>(tc.raw());
    if (inner == 0) continue;
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dp + o * out_inner + offset, sp + o * inner, inner);
    offset += inner;
  }
  return out;
}

Tensor copy(const Tensor& x) { return x.clone(); }
void copy_into(Tensor& dst, const Tensor& src) { dst.copy_from(src); }

}  // namespace h3::ops::cpu
