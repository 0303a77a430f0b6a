// VSA-H3 attention on CUDA (h3_dit_spec.md §5): the op behind ops::vsa_attention for CUDA tensors.
// Usable without the CUDA headers; in builds without CUDA it throws kUnsupported.
#pragma once

#include "core/tensor.h"
#include "ops/vsa.h"

namespace h3::ops::cuda {

// Device time of each stage of one call, in milliseconds (cudaEvents around each launch; the
// call synchronizes once at its end when this is requested). A stage that did not run is 0.
struct VsaStageTimes {
  double layout_ms = 0;    // tile-ordered copies of q, k, v
  double pool_ms = 0;      // tile means of q, k, v
  double scores_ms = 0;    // pooled scores q̄ k̄ᵀ · scale
  double topk_ms = 0;      // block mask and per-query-tile key tile lists
  double compress_ms = 0;  // softmax(scores) · v̄ (the gate branch's tile outputs)
  double fine_ms = 0;      // block-sparse attention, with the gate combine fused into its epilogue
  double total_ms = 0;     // from the first to the last launch, including uploads of the tiling
  bool fine_hopper = false;  // the fine branch ran the Hopper (wgmma + TMA) kernel, not mma.sync
};

// q, k, v, (g) [S, H, D] on one CUDA device; same contract as ops::vsa_attention. bf16/f16 with
// head dim 32, 64 or 128 run on the GPU kernels; other dtypes and head dims run the CPU oracle on
// copies (the result and the trace come back on q's device).
Tensor vsa_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                     const VsaGeometry& geometry, const VsaOptions& options, VsaTrace* trace,
                     VsaStageTimes* times = nullptr);

}  // namespace h3::ops::cuda
