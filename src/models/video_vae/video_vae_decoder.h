// The video VAE's ViT decoder (h3_components_spec.md §2.6): post_quant_conv, one token per latent
// voxel plus register tokens and a zero token, pre-norm blocks with window-relative 3-axis partial
// RoPE and LayerScale, LayerNorm, and a head that un-patches each token into a pixel block.
//
// Precision (§2.9): with `gemm_dtype` float32 everything is float32 (the golden data). With
// float16 the decoder follows the reference's fp16 autocast over float32 weights: every
// Linear/Conv takes float16 operands and returns float16, the residual stream stays float32 (the
// register tokens are float32, so the concatenation promotes), RMSNorm/LayerNorm compute in
// float32, q/k are normalized in float32 and rounded to float16 before RoPE in float16, attention
// and SwiGLU are float16, and LayerScale products promote back to float32.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "models/video_vae/video_vae_config.h"
#include "models/video_vae/video_vae_weights.h"
#include "ops/ops.h"

namespace h3::video_vae {

// RoPE tables of one decoder window of t x h x w tokens plus the suffix tokens (registers and the
// zero token, all at position 0): cos/sin [t*h*w + suffix, rotary_dim] float32, angles
// [t-axis F | y-axis F | x-axis F] duplicated over the two rotary halves (§2.6 step 3).
struct DecoderRope {
  Tensor cos, sin;
};
DecoderRope decoder_rope(const VideoVaeConfig& config, int64_t t, int64_t h, int64_t w);

// Wall-clock seconds per decoder stage, filled only when asked for (h3 bench vae --profile). The
// device is synchronized at every stage boundary, so the figures are exact per stage but the total
// is slower than an unprofiled run.
struct DecoderProfile {
  double gemm_s = 0;       // every Linear (post_quant_conv, proj_in, q/k/v/out, FFN, proj_out)
  double attention_s = 0;  // the attention op alone
  double norm_s = 0;       // RMSNorm/LayerNorm and the fused q/k RMSNorm + RoPE
  double other_s = 0;      // casts, LayerScale products, residual adds, SwiGLU, (un)patching, RoPE tables
  int64_t calls = 0;       // decoder forwards (one per batch of tiles)
  int64_t tiles = 0;       // tiles decoded
  int64_t rows = 0;        // token rows summed over calls
};

// The attention kernel a forward asks for (ops::AttentionParams::kernel; kAuto: the fastest that
// takes the decoder's q/k/v) and, when `used` is set, where to write the one it ran.
struct DecoderAttention {
  ops::AttentionKernel kernel = ops::AttentionKernel::kAuto;
  ops::AttentionKernel* used = nullptr;
};

// z [latent, t, h, w] (float, one batch item, any device) -> pixels [out, t*pt, h*ps, w*ps] in
// `gemm_dtype` (the decoder's output dtype: float32, or float16 under the autocast policy).
Tensor decoder_forward(const VideoVaeConfig& config, const DecoderWeights& weights, DType gemm_dtype,
                       const Tensor& z, DecoderProfile* profile = nullptr, const DecoderAttention& attention = {});

// Several tiles in one forward: the token rows of every tile (each with its own registers, zero
// token and window-relative RoPE) are stacked, every row-wise op runs once over all of them, and
// attention stays within each tile (block-diagonal cu_seqlens), and so do the GEMMs
// (ops::linear_segmented). On the CPU every output equals decoder_forward of that tile alone bit for
// bit, by construction: the row-wise ops are per-row loops, attention runs per tile, and each
// tile's GEMMs are the very BLAS calls its own forward makes. On CUDA one GEMM covers all tiles, so
// a tile may differ from its own forward in the last bit (the library picks kernels per shape).
// Tiles may differ in size.
std::vector<Tensor> decoder_forward_batch(const VideoVaeConfig& config, const DecoderWeights& weights,
                                          DType gemm_dtype, const std::vector<Tensor>& tiles,
                                          DecoderProfile* profile = nullptr,
                                          const DecoderAttention& attention = {});

// Bytes of activations one decoder forward of `rows` token rows keeps alive at its peak, an upper
// estimate used to size tile batches (float32 stream plus the GEMM-dtype FFN and attention inputs).
int64_t decoder_activation_bytes(const VideoVaeConfig& config, DType gemm_dtype, int64_t rows);
// The automatic tile batch on CUDA (VideoVaeOptions::tile_batch = 0): as many tiles as fit
// min(kAutoTileBatchBudget, device_free / 2) at decoder_activation_bytes(rows_per_tile) each, at
// least 1 and at most `tiles`. The memory planner sizes the decode stage with the same rule.
int64_t auto_tile_batch(const VideoVaeConfig& config, DType gemm_dtype, int64_t tiles, int64_t rows_per_tile,
                        uint64_t device_free);

}  // namespace h3::video_vae
