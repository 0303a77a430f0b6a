// Which CUDA attention kernel ops::attention picks for given inputs (tests and the benchmark
// report it, so a measured figure always names the kernel behind it).
#pragma once

#include "core/tensor.h"

namespace h3::ops::cuda {

enum class AttentionPath { kFlash, kGeneric };

// kFlash: bf16/f16, head dim 16/32/64/128, no mask, 16-byte aligned rows, H3_ATTN_GENERIC unset.
AttentionPath attention_path(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask);

}  // namespace h3::ops::cuda
