// The Hopper (sm_90a) attention kernel as ops::attention uses it (attention_hopper_kernel.cuh has
// the kernel itself): bf16/f16, head dim 64 or 128, no mask, bidirectional or causal (top-left
// aligned); grouped-query heads and block-diagonal batches (cu_seqlens) supported.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::ops::cuda {

// True on a compute capability 9.0 device when this build holds the sm_90a kernel bodies (a probe
// kernel runs once per device). Every Hopper kernel of the library (attention, VSA) is built with
// the same flags, so this one answer serves them all.
bool hopper_kernels_available(int device);

// Whether the Hopper kernel takes these inputs: a compute capability 9.0 device with the sm_90a
// kernel built in, bf16/f16 q/k/v of one dtype, head dim 64 or 128, dense last dim, row and head
// strides in multiples of 8 elements on 16-byte aligned data, no mask.
bool hopper_attention_fits(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* mask);
// hopper_attention_fits, unless H3_ATTN_HOPPER=0 (which restores the mma.sync flash kernel where
// the kernel is picked automatically).
bool hopper_attention_eligible(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor* mask);

// out = softmax(q k^T * scale) v per head and segment (cu_seqlens empty: one segment), keys after
// a query's own position masked when causal. out is allocated by the caller with q's shape and
// dtype (contiguous).
void hopper_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, float scale,
                      const std::vector<int64_t>& cu_seqlens, bool causal);

}  // namespace h3::ops::cuda
