// CPU implementations of the ops in ops/ops.h (the oracle), plus the helpers they share.
//
// ops.cpp checks shapes and dtypes and dispatches CPU tensors here, so these functions may assume
// validated arguments. Every op widens its float inputs exactly to float32, computes in float32
// (float64 where a reduction needs it) and rounds the result once to the output dtype, except
// where the reference itself rounds between primitive ops (modulate, gated_residual, swiglu,
// rope): there the intermediate results are rounded to the output dtype at the reference's
// rounding points (h3_dit_spec.md §2.8, §2.9, §2.11), which is the bf16-emulation mode of
// TOLERANCES.md. For float32 outputs that rounding is the identity, so the float32 path is plain
// float32 math.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace h3::ops::cpu {

// ---- shared helpers ----------------------------------------------------------------------------

// A float32, contiguous view of any CPU tensor: borrows the data when it already is contiguous
// float32, otherwise holds a widened copy (exact for bf16/f16/f8, rounded for f64).
class F32 {
 public:
  explicit F32(const Tensor& t);
  const float* data() const { return ptr_; }
  int64_t size() const { return n_; }
  float operator[](int64_t i) const { return ptr_[i]; }

 private:
  Tensor holder_;
  const float* ptr_ = nullptr;
  int64_t n_ = 0;
};

// Float32 widening of an optional tensor: empty when t is null.
std::vector<float> widen_optional(const Tensor* t);

// Allocates a CPU tensor of `shape`/`dtype` and fills it from float32 values, rounding once.
Tensor store_f32(const float* values, const Shape& shape, DType dtype);

// Index tensor (int32 or int64, any layout) as int64 values.
std::vector<int64_t> index_values(const Tensor& idx);

// Rounds v to `dtype` and back (the identity for float32): the bf16/f16 emulation primitive.
float round_to(float v, DType dtype);

// ---- threads -----------------------------------------------------------------------------------

// The ops split large work over threads of their own: parallel_for(parts, f) runs f(0) ...
// f(parts - 1), one part per thread (the caller runs part 0), and rethrows the first exception
// once every part has finished. Inside a part, a nested parallel_for and every GEMM run serially,
// so work is split once, by the outermost op that can. BLAS never threads by itself: its pool spun
// (sched_yield) between the small products of a tiny model and took a core from the work.
// cpu_threads(): the CPUs this process may run on, or H3_CPU_THREADS (1-1024).
int cpu_threads();
void parallel_for(int64_t parts, const std::function<void(int64_t)>& f);

// ---- GEMM (gemm_blas.cpp with OpenBLAS, gemm_noblas.cpp otherwise) -------------------------------

// Row-major C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, float32 accumulation.
// op(A) = A^T when trans_a (A stored [k, m]); likewise B. Leading dimensions are in elements.
// Large products are split by rows of C over parallel_for; each element is computed by the serial
// GEMM of its row block.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same on the calling thread only.
void sgemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc);

// ---- the ops ------------------------------------------------------------------------------------

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias);
Tensor linear_segmented(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const std::vector<int64_t>& row_starts);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                 const Tensor* mask);
// The attention softmax's e^x for x <= 0 (a score minus its row maximum): within 2 ulp of e^x
// from -87 up, 0 below (exposed for its test).
float softmax_exp(float x);
Tensor rms_norm(const Tensor& x, const Tensor* weight, float eps);
Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps);
Tensor group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps);
Tensor weight_norm(const Tensor& g, const Tensor& v);
void weight_norm_into(Tensor& dst, const Tensor& g, const Tensor& v);
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int rotary_dim);
Tensor modulate(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& idx);
Tensor gated_residual(const Tensor& residual, const Tensor& branch, const Tensor& gate,
                      const Tensor& idx);
Tensor swiglu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approx);
Tensor snake(const Tensor& x, const Tensor& alpha);
Tensor snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta);
Tensor anti_aliased_snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta,
                               const Tensor& up_filter, const Tensor& down_filter, int ratio);
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);
void fill_random(Tensor& x, uint64_t seed, float center, float half_width);
Tensor cast(const Tensor& x, DType dtype);
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p);
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const ConvTranspose1dParams& p);
// The float64-accumulation variants (Conv1dParams::f64_accumulate), conv1d_f64_audio.cpp.
Tensor conv1d_f64(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p);
Tensor conv_transpose1d_f64(const Tensor& x, const Tensor& w, const Tensor* bias,
                            const ConvTranspose1dParams& p);
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv3dParams& p);
Tensor pad3d(const Tensor& x, const int pads[6], PadMode mode);
Tensor gather_rows(const Tensor& x, const Tensor& idx);
void scatter_rows(Tensor& dst, const Tensor& idx, const Tensor& src);
Tensor concat(const std::vector<Tensor>& parts, int dim);
Tensor copy(const Tensor& x);
void copy_into(Tensor& dst, const Tensor& src);

}  // namespace h3::ops::cpu
