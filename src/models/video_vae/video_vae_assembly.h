// Single-pass assembly of the decoded video (h3_components_spec.md §2.8, §2.2). decode() and
// decode_streaming() used to slice each window's frames out, blend the first ones with the previous
// window's tail (ops::mul/add), concatenate all pieces, cut the padded tail and cast to float32:
// about five full-size passes of the video. assemble_frames() writes each window's frames, blended,
// straight into a preallocated float32 output in one pass, with the same roundings (the blend in
// the window's dtype, as blend() in video_vae_tiling.h). decoded_to_uint8()
// (video_vae_model.h) is frames_to_uint8(denormalize_pixels(x)) done on the device for CUDA input.
//
// Switches (environment, read on each call):
//   H3_VAE_FUSED_ASSEMBLY=0  decode()/decode_streaming() take the op composition again.
//   H3_VAE_DEVICE_UINT8=0    decoded_to_uint8() converts on the host again.
//   H3_VAE_FUSED_RESIDUAL=0  the decoder's LayerScale residual (x + scale * branch) takes the op
//                            composition on CUDA again instead of one bit-identical kernel.
//   H3_VAE_FUSED_STITCH=0    a window's tiles are stitched by the op composition (stitch_tiles)
//                            on CUDA again instead of one bit-identical kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::video_vae {

bool fused_assembly_enabled();
bool device_uint8_enabled();
bool fused_residual_enabled();
bool fused_stitch_enabled();

// The cross-fade weights of blend() for an overlap of e frames in `dtype`: wb[p] = r(p/e),
// wa[p] = r(1 - wb[p]), r rounding to dtype.
void blend_weights(int64_t e, DType dtype, std::vector<float>* wa, std::vector<float>* wb);

// out [C, F, H, W] contiguous (a view of the final video; float32, or on CUDA also clip's dtype), clip [C, Fc, H, W] contiguous,
// prev [C, Fp, H, W] in clip's dtype (or null when wa is empty), on one device. Writes
// out[:, dst0 + f] = clip[:, src0 + f] for f in [0, n), the first wa.size() frames blended with
// prev[:, prev0 + f] as blend() does. CUDA: one kernel; CPU: the same arithmetic in a loop.
void assemble_frames(const Tensor& out, int64_t dst0, const Tensor& clip, int64_t src0, int64_t n,
                     const Tensor* prev, int64_t prev0, const std::vector<float>& wa,
                     const std::vector<float>& wb);

// decoded_to_uint8() is declared with the other pixel helpers in video_vae_model.h.

}  // namespace h3::video_vae
