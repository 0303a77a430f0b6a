// The MiniMax-H3 video VAE (`AutoencoderKLMiniMaxH3`, h3_components_spec.md §2): encode entry
// points with 17-frame clips and spatial tiles, decode with 7-latent temporal windows, spatial
// tiles and cross-fades, and the latent normalization the pipeline applies around the DiT.
//
// The model is a composition of ops/ops.h over weights on one device; activations live on that
// device, so the same code is the CPU oracle and the CUDA engine. Inputs may be on any device.
//
// Precision policies (§2.9):
//   kF32          everything float32 (the golden data's precision; parity bound 1e-5).
//   kF16Autocast  the reference's CUDA decode: float32 weights under float16 autocast. The decoder
//                 GEMM weights are held as float16 copies, its Linear/Conv/attention/SwiGLU run in
//                 float16 with a float32 residual stream and float32 norms, and the tile and window
//                 blends are float16. Encoding stays float32 in both policies (the reference encodes
//                 without autocast).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/video_vae/video_vae_config.h"
#include "models/video_vae/video_vae_decoder.h"
#include "models/video_vae/video_vae_tiling.h"
#include "models/video_vae/video_vae_weights.h"
#include "ops/ops.h"

namespace h3::video_vae {

enum class VaePrecision { kF32, kF16Autocast };
const char* precision_name(VaePrecision p);  // "f32", "f16-autocast"
// Parses "f32"/"fp32"/"float32" and "f16"/"fp16"/"f16-autocast"; throws kInvalidArgument otherwise.
VaePrecision parse_precision(const std::string& text);

struct VideoVaeOptions {
  Device device = Device::cpu();
  VaePrecision precision = VaePrecision::kF32;
  bool use_tiling = true;  // the release ships with tiling on (256 px tiles, >= 64 px overlap)
  TileSettings tiles;
  bool load_encoder = true;
  bool load_decoder = true;
  // Spatial tiles of one temporal window decoded together in one batched decoder forward (same
  // ops with the rows of several tiles stacked; the blend is unchanged). 0: automatic, i.e. 1 on
  // the CPU and on CUDA as many as fit a bounded activation budget; N >= 1: at most N. The
  // environment variable H3_VAE_TILE_BATCH=N overrides it (1 restores tile-at-a-time decoding).
  int64_t tile_batch = 0;
  // The decoder's attention kernel (h3 generate / h3 bench vae --vae-attention); a kernel asked
  // for by name that the device lacks is refused when the model is built, one the decoder's
  // inputs do not fit (e.g. hopper under the f32 policy) at the first decode.
  ops::AttentionKernel attention = ops::AttentionKernel::kAuto;
  // --vae-dtype fp8 (opt-in, f16-autocast policy only): the decoder blocks' projections as E4M3
  // weights with per-channel scales and activations quantized per token (VideoVaeWeightPolicy::
  // decoder_fp8); everything else as the policy says.
  bool decoder_fp8 = false;
};

// Where a decode spent its time (h3 bench vae --profile): the decoder's stages plus the spatial
// stitch and the temporal cross-fade. Filling it synchronizes the device at stage boundaries.
struct VideoDecodeProfile {
  DecoderProfile decoder;
  double stitch_s = 0;          // tile blends and concatenation (§2.7)
  double temporal_s = 0;        // window slicing, cross-fade and output assembly (§2.8)
  int64_t windows = 0;
  int64_t tile_batch = 0;       // the batch size used (largest batch)
};

// Receives finished frames during decode_streaming: frames [3, n, H, W] float32 on the model's
// device, the frames [first_frame, first_frame + n) of batch item `item`, in order. The sink may
// keep the tensor (it holds its own storage).
using FrameSink = std::function<void(int64_t item, int64_t first_frame, const Tensor& frames)>;

class VideoVae {
 public:
  // Loads `component_dir` (config.json plus the safetensors checkpoint).
  static VideoVae load(const std::string& component_dir, const VideoVaeOptions& options);
  static VideoVae from_checkpoint(const VideoVaeConfig& config, const io::Checkpoint& ckpt,
                                  const VideoVaeOptions& options);
  static VideoVae from_weights(const VideoVaeConfig& config, VideoVaeWeights weights,
                               const VideoVaeOptions& options);

  const VideoVaeConfig& config() const { return config_; }
  const VideoVaeOptions& options() const { return options_; }
  const VideoVaeWeights& weights() const { return weights_; }
  // The decoder's GEMM/output dtype under the policy (float32 or float16).
  DType decoder_dtype() const;
  // Changes the tile geometry (the reference's enable_tiling / disable_tiling).
  void set_tiling(bool enabled, const TileSettings& tiles);
  // The attention kernel the last decode ran (kAuto before the first), for the receipt.
  ops::AttentionKernel attention_used() const { return attention_used_; }

  // ---- encode (§2.5), always float32 ----
  // x [B, 3, F, H, W] ImageNet-normalized pixels (normalize_pixels) -> moments
  // [B, 2*latent, T', h, w] float32 on the model's device: one frame goes through the spatial
  // encoder alone (1 latent frame); otherwise F is padded to a multiple of clip_length by repeating
  // the last frame, each clip is encoded independently, and the last token_drop latents dropped.
  Tensor encode_moments(const Tensor& x) const;
  // One clip, spatially tiled when tiling is on: [B, 3, T, H, W] -> [B, 2*latent, T', h, w].
  Tensor encode_clip(const Tensor& x) const;

  // ---- decode (§2.6-§2.8) ----
  // z [B, latent, T, h, w] (denormalized latents) -> [B, 3, F, 16h, 16w] ImageNet-normalized RGB on
  // the model's device, in `out` (f32, f16 or bf16): float32 by default, the decoder output widened
  // exactly from float16 under the autocast policy. decoder_dtype() returns the video as assembled,
  // without that copy: half the memory, as the reference's decode returns its model's bf16.
  Tensor decode(const Tensor& z, VideoDecodeProfile* profile = nullptr,
                DType out = DType::kF32) const;
  // One temporal window of one item, spatially tiled when tiling is on: [latent, t, h, w] ->
  // [3, 4t, 16h, 16w] in decoder_dtype().
  Tensor decode_clip(const Tensor& z, VideoDecodeProfile* profile = nullptr) const;
  // The same decode, handing frames to `sink` as soon as they are final: after window i, its main
  // frames (cross-faded with window i-1's tail) can no longer change, so they go out while window
  // i+1 is still to be decoded; the last window's tail follows at the end, and frames past the
  // output length (padding) are never handed out. The frames, concatenated, equal decode()'s bit
  // for bit (the same ops on the same values, only the concatenation is left to the sink).
  //
  // Pipeline use: the decode stage passes a sink that copies each piece to pinned host memory,
  // converts it to uint8 (denormalize_pixels, frames_to_uint8) and queues it to the MP4 muxer's
  // thread, so encoding window i overlaps decoding window i+1 and the whole float32 video is never
  // held at once (17 frames at 1344x768 are 210 MB in float32 against 2 GB for 124 frames).
  void decode_streaming(const Tensor& z, const FrameSink& sink, VideoDecodeProfile* profile = nullptr) const;
  // The tile batch decode_clip uses for `tiles` tiles of `rows_per_tile` token rows (see
  // VideoVaeOptions::tile_batch).
  int64_t resolve_tile_batch(int64_t tiles, int64_t rows_per_tile) const;
  // The largest tile batch the last decode used (0 before any; 1 without tiling).
  int64_t tile_batch_used() const { return tile_batch_used_; }

  // ---- latent normalization (§2.2), float32 on the input's device ----
  Tensor normalize_latents(const Tensor& z) const;      // (z - mean) / std per channel (dim 1)
  Tensor denormalize_latents(const Tensor& zn) const;   // zn * std + mean

 private:
  VideoVae() = default;
  // decode() with each window written, blended, straight into the preallocated float32 video
  // (video_vae_assembly.h; H3_VAE_FUSED_ASSEMBLY=0 takes the op composition instead).
  Tensor decode_assembled(const Tensor& z, VideoDecodeProfile* profile, DType out) const;
  VideoVaeConfig config_;
  VideoVaeOptions options_;
  VideoVaeWeights weights_;
  // Written by decodes (a const operation); decodes of one model never run concurrently, since
  // they share its device stream and weights.
  mutable ops::AttentionKernel attention_used_ = ops::AttentionKernel::kAuto;
  mutable int64_t tile_batch_used_ = 0;
};


// ---- pixels and posterior (§2.2, §2.4; pipeline facts 6 and 9) ---------------------------------

// uint8 [B, 3, F, H, W] (or float in [0, 1]) -> float32 (x/255 - m)/s with the ImageNet mean and std.
Tensor normalize_pixels(const Tensor& pixels);
// Decoder output (ImageNet-normalized, any float dtype) -> float32 x*s + m clamped to [0, 1].
Tensor denormalize_pixels(const Tensor& decoded);
// Per-frame PSNR in dB (peak 1) between two decodes [B, 3, F, H, W] (decoder output, any device),
// compared as the pixels in [0, 1] they give (denormalize_pixels); +inf where a frame is equal.
// How --vae-dtype fp8 is judged against the f16-autocast decode.
std::vector<double> frame_psnr(const Tensor& decoded, const Tensor& reference);
// [B, 3, F, H, W] in [0, 1] -> uint8 frames [B, F, H, W, 3] = round(x*255) (half to even, as torch).
Tensor frames_to_uint8(const Tensor& pixels01);
// frames_to_uint8(denormalize_pixels(decoded)), bit for bit, as uint8 frames on the host; CUDA input
// is converted on the device and only the bytes are copied (H3_VAE_DEVICE_UINT8=0: on the host).
Tensor decoded_to_uint8(const Tensor& decoded);

struct Posterior {
  Tensor mean;    // [B, latent, T, h, w] float32
  Tensor logvar;  // clamped to [-30, 20]
  Tensor std;     // exp(0.5 * logvar)
};
// Splits moments [B, 2*latent, ...] on dim 1 (CPU float32 results).
Posterior posterior_from_moments(const Tensor& moments);
// mean + std * noise; `noise` has the mean's shape (e.g. torch.randn from a seed-42 generator).
Tensor posterior_sample(const Posterior& posterior, const Tensor& noise);

// The pipeline's conditioning helper (`encode_vae_condition`, pipeline fact 6): normalize the uint8
// pixels, encode, sample the posterior with `noise`, round the sample to float16 and back, and
// normalize it with the VAE's latent statistics. Returns CPU float32 [B, latent, T', h, w].
Tensor encode_condition(const VideoVae& vae, const Tensor& pixels_uint8, const Tensor& noise);

}  // namespace h3::video_vae
