#include "ops/cuda/cuda_util.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "ops/cuda/cuda_ops.h"

namespace h3::ops::cuda {

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  fail(ErrorCode::kInternal, "CUDA error in ", what, ": ", cudaGetErrorName(err), " (",
       cudaGetErrorString(err), ")");
}

void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return;
  fail(ErrorCode::kInternal, "CUDA kernel ", kernel, " failed to launch: ", cudaGetErrorName(err),
       " (", cudaGetErrorString(err), ")");
}

void set_device_of(const Tensor& t) {
  int cur = -1;
  H3_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != t.device().index) H3_CUDA_CHECK(cudaSetDevice(t.device().index));
}

void require_cuda(const Tensor& t, const char* op, const char* name) {
  H3_CHECK(t.defined(), ErrorCode::kInvalidArgument, "ops::", op, ": ", name, " is undefined");
  H3_CHECK(t.device().is_cuda(), ErrorCode::kInvalidArgument, "ops::", op, ": ", name, " (",
           t.desc(), ") is not on a CUDA device");
}

void require_same_device(const Tensor& a, const Tensor& b, const char* op) {
  H3_CHECK(a.device() == b.device(), ErrorCode::kInvalidArgument, "ops::", op,
           ": tensors on different devices (", a.desc(), " and ", b.desc(), ")");
}

void run_index_checked(const char* op, int64_t limit, const char* unit, Device device,
                       const std::function<void(int*)>& launch) {
  if (int* deferred = deferred_index_flag()) {
    launch(deferred);
    check_launch(op);
    return;
  }
  Tensor flag = Tensor::zeros({1}, DType::kI32, device);
  int* bad = static_cast<int*>(flag.raw());
  launch(bad);
  check_launch(op);
  int host = 0;
  H3_CUDA_CHECK(cudaMemcpy(&host, bad, sizeof(int), cudaMemcpyDeviceToHost));
  H3_CHECK(host == 0, ErrorCode::kInvalidArgument, "ops::", op, ": an index is outside the ", limit,
           " ", unit);
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : copy(t); }

Tensor as_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return contiguous(t);
  return cast(t, dtype);
}

static bool env_is_zero(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") == 0;
}

bool vec8_ok(const Tensor& t) {
  const DType d = t.dtype();
  return t.defined() && t.is_contiguous() &&
         (d == DType::kF32 || d == DType::kBF16 || d == DType::kF16) &&
         reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0 && fusion_enabled("VEC8");
}

bool fusion_enabled(const char* name) {
  if (env_is_zero("H3_FUSED")) return false;
  const std::string var = std::string("H3_FUSE_") + name;
  return !env_is_zero(var.c_str());
}

}  // namespace h3::ops::cuda
