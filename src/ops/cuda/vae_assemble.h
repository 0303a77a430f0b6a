// Device kernels of the video VAE's output assembly (h3_components_spec.md §2.8, §2.2): the
// temporal cross-fade written straight into a preallocated video, and the decoded video to uint8
// frames. Each reproduces, bit for bit, the op composition it replaces (ops::mul/add/cast of the
// window blend; denormalize_pixels + frames_to_uint8 on the host). Built without CUDA, the entry
// points throw kUnsupported (vae_assemble_nocuda.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::ops::cuda {

// out [C, F, H, W] float32 or clip's dtype, clip [C, Fc, H, W] (f32, bf16 or f16), prev [C, Fp, H, W] in clip's
// dtype or null, all contiguous on one CUDA device. For f in [0, n):
//   v = clip[:, src0 + f]; if f < wa.size(): v = r(r(prev[:, prev0 + f] * wa[f]) + r(v * wb[f]))
//   out[:, dst0 + f] = v
// where r rounds to clip's dtype (the weights are already rounded to it). At most 64 weights.
void vae_assemble_frames(const Tensor& out, int64_t dst0, const Tensor& clip, int64_t src0, int64_t n,
                         const Tensor* prev, int64_t prev0, const std::vector<float>& wa,
                         const std::vector<float>& wb);

// decoded [B, 3, F, H, W] float (any float dtype, contiguous, CUDA) -> uint8 [B, F, H, W, 3] on
// the same device: v = x*std[c] + mean[c] (two roundings), clamp to [0, 1] (NaN kept), then
// rint(v*255) (half to even), NaN -> 0, clamp to [0, 255].
Tensor vae_frames_to_uint8(const Tensor& decoded, const float mean[3], const float std[3]);

// The spatial stitch of one window's decoded tiles (h3_components_spec.md §2.7, video_vae_tiling.h
// stitch_tiles) in one pass and bit for bit: `tiles` row-major (ny rows of nx), each [C, F, h_i,
// w_j] contiguous in one float dtype on one device (every tile of row i h_i rows high, of column j
// w_j wide), y_overlaps[ny - 1] and x_overlaps[nx - 1] in pixels. Each output value reads its own
// tile and, inside an overlap, the raw tile above and the raw tile to the left, and blends them as
// the composition does (vertical first; three roundings to the dtype per blend). At most 64 tiles.
Tensor vae_stitch_tiles(const std::vector<Tensor>& tiles, int64_t ny, int64_t nx,
                        const std::vector<int64_t>& y_overlaps, const std::vector<int64_t>& x_overlaps);
constexpr int64_t kVaeStitchMaxTiles = 64;

// The decoder's LayerScale residual, ops::add(x, ops::mul(ops::cast(branch, f32), scale)) in one
// pass and bit for bit: x [S, C] float32, branch [S, C] (f32, bf16 or f16), scale [C] float32.
Tensor vae_layerscale_residual(const Tensor& x, const Tensor& branch, const Tensor& scale);

}  // namespace h3::ops::cuda
