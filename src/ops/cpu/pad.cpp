// pad3d: zero, reflect or replicate padding of the last three dims, any dtype (bytes are copied).
#include <cstring>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
int64_t pad_source(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  if (mode == PadMode::kZeros) return -1;
  if (mode == PadMode::kReplicate) return i < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;  // reflect without the edge
  return i;
}
}  // namespace

Tensor pad3d(const Tensor& x, const int pads[6], PadMode mode) {
  const Tensor xc = x.contiguous();
  const int nd = x.dim();
  const int64_t in[3] = {x.size(nd - 3), x.size(nd - 2), x.size(nd - 1)};
  int64_t os[3];
  for (int d = 0; d < 3; ++d) os[d] = in[d] + pads[2 * d] + pads[2 * d + 1];
  Shape shape = x.shape();
  for (int d = 0; d < 3; ++d) shape[nd - 3 + d] = os[d];
  Tensor out = Tensor::empty(shape, x.dtype());
  int64_t outer = 1;  // the leading dims, which padding leaves alone
  for (int d = 0; d < nd - 3; ++d) outer *= x.size(d);
  std::vector<int64_t> src[3];
  for (int d = 0; d < 3; ++d) {
    src[d].resize(static_cast<size_t>(os[d]));
    for (int64_t o = 0; o < os[d]; ++o) src[d][o] = pad_source(o - pads[2 * d], in[d], mode);
  }
  const size_t es = dtype_size(x.dtype());
  const auto* sp = static_cast<const uint8_t*>(xc.raw());
  auto* dp = static_cast<uint8_t*>(out.raw());
  const int64_t in_vol = in[0] * in[1] * in[2], out_vol = os[0] * os[1] * os[2];
  for (int64_t b = 0; b < outer; ++b) {
    for (int64_t t = 0; t < os[0]; ++t) {
      for (int64_t h = 0; h < os[1]; ++h) {
        uint8_t* drow = dp + (b * out_vol + (t * os[1] + h) * os[2]) * es;
        const int64_t ti = src[0][t], hi = src[1][h];
        if (ti < 0 || hi < 0) {
          std::memset(drow, 0, static_cast<size_t>(os[2]) * es);
          continue;
        }
        const uint8_t* srow = sp + (b * in_vol + (ti * in[1] + hi) * in[2]) * es;
        for (int64_t wo = 0; wo < os[2]; ++wo) {
          const int64_t wi = src[2][wo];
          if (wi < 0) {
            std::memset(drow + wo * es, 0, es);
          } else {
            std::memcpy(drow + wo * es, srow + wi * es, es);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace h3::ops::cpu
