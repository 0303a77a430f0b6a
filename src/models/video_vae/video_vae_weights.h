// Weights of the MiniMax-H3 video VAE, keyed by the released (diffusers) tensor names (the
// inventory is models/video_vae/video_vae_schema.cpp), placed on one device in the dtypes a
// precision policy asks for.
//
// The release stores everything in float32 (h3_components_spec.md §2.1). The encoder always runs
// in float32 (§2.9: encode paths use no autocast). The decoder's GEMM weights (post_quant_conv,
// proj_in, q/k/v/out, FF, proj_out) may be held in float16: under the reference's fp16 autocast
// every Linear/Conv casts its float32 weight (and bias) to float16 first, so storing the rounded
// copy once is identical (§2.9). Norm weights, LayerScale vectors and register tokens stay float32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/video_vae/video_vae_config.h"

namespace h3::video_vae {

struct ConvWeights {
  Tensor w;  // [Cout, Cin, kT, kH, kW]
  Tensor b;  // [Cout]
  bool defined() const { return w.defined(); }
};

struct ResnetWeights {
  Tensor norm1_w, norm1_b;  // GroupNorm over the input channels
  ConvWeights conv1;
  Tensor norm2_w, norm2_b;
  ConvWeights conv2;
  ConvWeights shortcut;  // 1x1x1, only where the width changes
};

struct DownBlockWeights {
  std::vector<ResnetWeights> resnets;
  ConvWeights downsampler;  // only where the level downsamples
  int64_t spatial_stride = 1;
  int64_t temporal_stride = 1;
};

struct EncoderWeights {
  ConvWeights conv_in;
  std::vector<DownBlockWeights> blocks;
  Tensor norm_out_w, norm_out_b;
  ConvWeights conv_out;
  ConvWeights quant_conv;  // 1x1x1, 2*latent -> 2*latent
};

struct DecoderBlockWeights {
  Tensor norm1;  // RMSNorm weight [width] (float32)
  Tensor q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
  Tensor scale1;  // LayerScale [width] (float32)
  Tensor norm2;
  Tensor ff_in_w, ff_in_b;  // [2*ffn, width], rows [value | gate]
  Tensor ff_out_w, ff_out_b;
  Tensor scale2;
  // Per-output-channel scales of the six projections when they are held in FP8 (E4M3 *_w;
  // VideoVaeWeightPolicy::decoder_fp8); undefined otherwise.
  Tensor q_s, k_s, v_s, out_s, ff_in_s, ff_out_s;
};

struct DecoderWeights {
  Tensor post_quant_w, post_quant_b;  // the 1x1x1 conv as a linear [latent, latent]
  Tensor proj_in_w, proj_in_b;        // [width, latent]
  Tensor register_tokens;             // [registers, width] (float32)
  std::vector<DecoderBlockWeights> blocks;
  Tensor norm_out_w, norm_out_b;      // LayerNorm (float32)
  Tensor proj_out_w, proj_out_b;      // [out * pt * ps * ps, width]
};

struct VideoVaeWeights {
  bool has_encoder = false;
  bool has_decoder = false;
  EncoderWeights encoder;
  DecoderWeights decoder;
};

struct VideoVaeWeightPolicy {
  Device device = Device::cpu();
  DType decoder_gemm_dtype = DType::kF32;  // kF16 for the reference's CUDA autocast policy
  bool load_encoder = true;
  bool load_decoder = true;
  // --vae-dtype fp8: each decoder block's q/k/v/out and feed-forward weights quantized to E4M3
  // with one scale per output channel (ops/fp8.h), from the policy's GEMM dtype, as each block is
  // built. The small GEMMs at the ends (post_quant_conv, proj_in, proj_out) stay in that dtype.
  bool decoder_fp8 = false;
};

// Loads the tensors of the requested parts from `ckpt`. The checkpoint is first checked against
// the schema of `config` (missing, unexpected or misshapen tensors: kInvalidFile naming them).
VideoVaeWeights load_video_vae_weights(const VideoVaeConfig& config, const io::Checkpoint& ckpt,
                                       const VideoVaeWeightPolicy& policy);

// Deterministic random weights at the config's shapes (benchmarks, tests): linear and conv weights
// uniform with variance 1/fan_in, biases small, norm weights 1, LayerScale 0.1, so activations
// stay of order one through any depth (finite in float16).
VideoVaeWeights random_video_vae_weights(const VideoVaeConfig& config, uint64_t seed,
                                         const VideoVaeWeightPolicy& policy);

// Bytes the parts take in the policy's dtypes.
uint64_t video_vae_weight_bytes(const VideoVaeWeights& w);

}  // namespace h3::video_vae
