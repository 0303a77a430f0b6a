// Host-side helpers of the CUDA ops (usable from .cpp and .cu files): error checks, the stream
// the ops run on, argument checks, and the switches that turn each fused kernel off.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

#include "core/cuda_graph.h"
#include "core/status.h"
#include "core/tensor.h"

namespace h3::ops::cuda {

// Throws kInternal naming the call and CUDA's message when err is not cudaSuccess.
void check_cuda(cudaError_t err, const char* what);
// Checks for an error raised by the last kernel launch.
void check_launch(const char* kernel);

// The stream every op is issued on: the legacy default stream (null), so that Tensor's synchronous
// copies are ordered with the kernels without extra synchronization, except while a CUDA graph
// records on this thread (core/cuda_graph.h).
inline cudaStream_t current_stream() { return static_cast<cudaStream_t>(current_cuda_stream()); }

// Runs `launch(bad)` for a kernel that sets *bad when a row index is out of range, then reports
// that as kInvalidArgument naming the op. The check costs one 4-byte read-back per call (an index
// outside the table would otherwise read out of bounds on the device, which no caller could
// recover from); while a CUDA graph records, the kernel writes the capture's flag instead, which
// the graph's owner reads after each replay.
// `unit` names what `limit` counts in the message ("rows", "table rows").
void run_index_checked(const char* op, int64_t limit, const char* unit, Device device,
                       const std::function<void(int*)>& launch);

// Makes t's device the current one (the ops may be called for any cuda:N).
void set_device_of(const Tensor& t);

// Argument checks shared by the ops: the tensor is defined and on a CUDA device; all on one device.
void require_cuda(const Tensor& t, const char* op, const char* name);
void require_same_device(const Tensor& a, const Tensor& b, const char* op);
// A contiguous version of t on its device (ops::cuda::copy when t is a strided view).
Tensor contiguous(const Tensor& t);
// A contiguous copy of t converted to dtype (no copy when already so).
Tensor as_dtype(const Tensor& t, DType dtype);

// Fusion switches (h3.c's habit: every fused kernel can be turned off to bisect a regression).
// H3_FUSED=0 turns every fusion off; H3_FUSE_<NAME>=0 turns one off, e.g. H3_FUSE_QKNORM_ROPE=0.
// `name` is the suffix: "QKNORM_ROPE", "RMSNORM_MODULATE", "SWIGLU", "GATED_RESIDUAL", "GEMM_BIAS",
// "FP8_BIAS", "FP8_QUANT_VEC", "CONV1D_GEMM", "FP8_SWIGLU", "FP8_NORM_MODULATE".
bool fusion_enabled(const char* name);

// Whether t can be read and written eight values at a time (ld8/st8 in elementwise_util.cuh): a
// contiguous f32, bf16 or f16 tensor at a 16-byte aligned address. The callers also need every
// row a multiple of 8 values. H3_FUSE_VEC8=0 sends every op back to its one-value-per-thread
// kernel (same values: the vector kernels do the same arithmetic in the same order per value,
// except the row sums of the norms, which they add in another order).
bool vec8_ok(const Tensor& t);

}  // namespace h3::ops::cuda

#define H3_CUDA_CHECK(expr) ::h3::ops::cuda::check_cuda((expr), #expr)
