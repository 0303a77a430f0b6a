// Dispatch of the VSA-H3 attention op.
#include "ops/vsa.h"

#include "core/status.h"
#include "ops/cuda/vsa_cuda.h"

namespace h3::ops {

Tensor vsa_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                     const VsaGeometry& geometry, const VsaOptions& options, VsaTrace* trace) {
  H3_CHECK(q.dim() == 3 && k.shape() == q.shape() && v.shape() == q.shape(),
           ErrorCode::kInvalidArgument, "vsa_attention: q ", shape_str(q.shape()), ", k ",
           shape_str(k.shape()), ", v ", shape_str(v.shape()), " must all be [S, H, D]");
  H3_CHECK(q.size(0) == geometry.seq_len, ErrorCode::kInvalidArgument, "vsa_attention: ",
           q.size(0), " rows, but the tiling was built for ", geometry.seq_len);
  H3_CHECK(options.sparsity >= 0.0 && options.sparsity < 1.0, ErrorCode::kInvalidArgument,
           "VSA sparsity ", options.sparsity, " is outside [0, 1)");
  if (const Tensor* m = options.block_mask) {
    const int64_t n = geometry.num_tiles();
    H3_CHECK(m->dtype() == DType::kU8 && m->dim() == 3 && m->size(0) == q.size(1) && m->size(1) == n &&
                 m->size(2) == n,
             ErrorCode::kInvalidArgument, "vsa_attention: a given block mask must be u8 [", q.size(1),
             ", ", n, ", ", n, "], got ", m->desc());
    H3_CHECK(q.device().is_cpu(), ErrorCode::kUnsupported,
             "vsa_attention: a given block mask is supported on the CPU only");
  }
  if (q.device().is_cpu()) return cpu::vsa_attention(q, k, v, g, geometry, options, trace);
  if (q.device().is_cuda()) return cuda::vsa_attention(q, k, v, g, geometry, options, trace);
  fail(ErrorCode::kUnsupported, "vsa_attention on ", q.device().str(), " is not supported");
}

}  // namespace h3::ops
