// Builds without CUDA: the CUDA FP8 ops refuse clearly (a CUDA tensor cannot exist in such a
// build).
#include "core/status.h"
#include "ops/cuda/fp8_cuda.h"

namespace h3::ops::cuda {

[[noreturn]] static void no_cuda(const char* op) {
  fail(ErrorCode::kUnsupported, "ops::", op, ": this build of h3 has no CUDA support");
}

Fp8Weight quantize_weight_fp8(const Tensor&, Fp8WeightScaling) { no_cuda("quantize_weight_fp8"); }
Tensor dequantize_weight_fp8(const Fp8Weight&, DType) { no_cuda("dequantize_weight_fp8"); }
Tensor fake_quantize_activation_fp8(const Tensor&, Fp8ActScaling) {
  no_cuda("fake_quantize_activation_fp8");
}
Tensor linear_fp8(const Tensor&, const Fp8Weight&, const Tensor*, Fp8ActScaling) {
  no_cuda("linear_fp8");
}
Fp8Activation quantize_activation_fp8(const Tensor&, Fp8ActScaling) {
  no_cuda("quantize_activation_fp8");
}
Tensor linear_fp8(const Fp8Activation&, const Fp8Weight&, const Tensor*) { no_cuda("linear_fp8"); }
Fp8Activation swiglu_fp8(const Tensor&, Fp8ActScaling) { no_cuda("swiglu_fp8"); }
bool swiglu_fp8_fused(const Tensor&, Fp8ActScaling) { return false; }
Fp8Activation rms_norm_modulate_fp8(const Tensor&, const Tensor*, float, const Tensor&,
                                    const Tensor&, const Tensor&, Fp8ActScaling) {
  no_cuda("rms_norm_modulate_fp8");
}
GatedNormFp8 gated_residual_rms_norm_modulate_fp8(const Tensor&, const Tensor&, const Tensor&,
                                                  const Tensor&, const Tensor*, float,
                                                  const Tensor&, const Tensor&, Fp8ActScaling) {
  no_cuda("gated_residual_rms_norm_modulate_fp8");
}
bool rms_norm_modulate_fp8_fused(const Tensor&, const Tensor*, const Tensor&, const Tensor&,
                                 Fp8ActScaling) {
  return false;
}
std::vector<Fp8AlgoTiming> sweep_linear_fp8(const Fp8Activation&, const Fp8Weight&, int, int, bool) {
  no_cuda("sweep_linear_fp8");
}
std::vector<Fp8AlgoTiming> search_linear_fp8(const Fp8Activation&, const Fp8Weight&, int, int,
                                             Fp8SearchStats*) {
  no_cuda("search_linear_fp8");
}
bool linear_fp8_uses_tensor_cores(int64_t, int64_t, Fp8WeightScaling, Fp8ActScaling) {
  return false;
}
bool quantizes_vectorized(const Tensor&, Fp8ActScaling) { return false; }
bool linear_fp8_bias_in_epilogue(int64_t, int64_t, int64_t, DType, DType, int) { return false; }

}  // namespace h3::ops::cuda
