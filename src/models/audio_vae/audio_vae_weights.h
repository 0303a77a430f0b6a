// Weights of the MiniMax-H3 audio VAE, keyed by the released (diffusers) tensor names (the
// inventory is models/audio_vae/audio_vae_schema.cpp), prepared once at load and placed on one
// device in float32 (the reference forces the whole component to float32, §3).
//
// Preparation done here so that the forward passes are plain op compositions:
// - legacy weight norm folded: w = v * (g / ||v||), the norm over every dim but dim 0 (per output
//   channel of a Conv1d [out, in, k], per input channel of a ConvTranspose1d [in, out, k]) (§3.2);
// - Snake alphas [1, C, 1] flattened to [C];
// - the attention's bias assembled as [q_bias | zero_k_bias | v_bias] (§3.3);
// - the mean over heads followed by adaptive_avg_pool1d(head_dim -> latent_channels) expressed as
//   one constant linear map [latent_channels, latent_dim] (both are averages);
// - each anti-aliasing filter [1, 1, K] repeated per channel ([C, 1, K], the reference's
//   `filter.expand(C, -1, -1)`), the upsampler's copy multiplied by the ratio 2 (exact in binary
//   floating point, so `2 * conv_transpose1d(x, f)` == `conv_transpose1d(x, 2 f)` bit for bit).
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/phase_timer.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/audio_vae/audio_vae_config.h"

namespace h3::audio_vae {

struct ConvWeights {
  Tensor w;  // Conv1d [out, in, k] or ConvTranspose1d [in, out, k], weight norm folded
  Tensor b;  // [out] or undefined (conv_post has no bias)
  const Tensor* bias() const { return b.defined() ? &b : nullptr; }
};

struct ResidualUnitWeights {  // DAC residual unit (§3.3)
  Tensor alpha1;              // Snake [C]
  ConvWeights conv1;          // k7, dilation d, padding 3d
  Tensor alpha2;
  ConvWeights conv2;          // k1
  int64_t dilation = 1;
};

struct EncoderBlockWeights {
  std::vector<ResidualUnitWeights> units;  // dilations 1, 3, 9
  Tensor alpha;                            // Snake before the strided conv
  ConvWeights down;                        // k 2s, stride s, padding ceil(s/2)
  int64_t stride = 1;
};

struct PreBlockWeights {  // MiniMaxH3AudioAttnProjection (§3.3 step 3)
  Tensor norm1_w, norm1_b, norm3_w, norm3_b, norm2_w, norm2_b;
  Tensor qkv_w;  // [3 latent_dim, latent_dim]
  Tensor qkv_b;  // [3 latent_dim] = [q_bias | 0 | v_bias]
  Tensor head_pool;  // [latent_channels, latent_dim]: mean over heads, then adaptive average pool
  Tensor attn_proj_w, attn_proj_b;  // Linear(latent -> latent)
  Tensor proj_w, proj_b;            // Linear(latent_dim -> latent)
  Tensor mlp_norm_w, mlp_norm_b;    // GeGLU MLP: LayerNorm, gelu_tanh(w0 h) * (w1 h), w2
  Tensor w0, b0, w1, b1, w2, b2;
};

struct EncoderWeights {
  ConvWeights conv_in;  // 1 -> encoder_dim, k7
  std::vector<EncoderBlockWeights> blocks;
  Tensor alpha_out;     // Snake on the trunk width
  ConvWeights conv_out; // -> latent_dim, k3
  PreBlockWeights pre_block;
  ConvWeights mean_proj, logs_proj;  // 1x1 convs latent -> latent
};

struct ActivationWeights {  // anti-aliased SnakeBeta (§3.4)
  Tensor log_alpha, log_beta;  // [C]
  Tensor up_filter;            // [C, 1, K], times the ratio
  Tensor down_filter;          // [C, 1, K]
};

struct AmpBlockWeights {  // AMPBlock1
  int64_t kernel = 3;
  std::vector<int64_t> dilations;
  std::vector<ConvWeights> convs1, convs2;
  std::vector<ActivationWeights> acts;  // 2 per dilation: act[2j] before convs1[j], act[2j+1] before convs2[j]
};

struct DecoderWeights {
  ConvWeights in_proj;   // dec_in_proj, 1x1 latent -> latent_dim
  ConvWeights conv_pre;  // latent_dim -> decoder_dim, k7
  std::vector<ConvWeights> ups;  // transposed convs, one per rate
  std::vector<int64_t> rates, kernels;
  std::vector<AmpBlockWeights> resblocks;  // len(rates) * len(resblock_kernel_sizes)
  ActivationWeights act_post;
  ConvWeights conv_post;  // -> 1 channel, k7, no bias
};

struct AudioVaeWeights {
  bool has_encoder = false;
  bool has_decoder = false;
  EncoderWeights encoder;
  DecoderWeights decoder;
};

struct AudioVaeWeightPolicy {
  Device device = Device::cpu();
  bool load_encoder = true;
  bool load_decoder = true;
};

// Legacy `torch.nn.utils.weight_norm` (dim 0) folded: w = v * (g / ||v||), the norm taken per
// slice v[i] over all remaining dims (float64 sum of squares, rounded to float32 like the
// reference's float32 norm; then g/norm and the product in float32). g has v.size(0) elements
// (stored [d0, 1, 1]). Float32 result of v's shape on v's device (ops::weight_norm; the CUDA fold
// equals the CPU's bit for bit but where a norm lies within float64 rounding of a float32 rounding
// boundary: there one ulp). Throws kInvalidArgument on a shape mismatch.
Tensor fold_weight_norm(const Tensor& g, const Tensor& v);

// The constant map of the attention's head reduction: out[o] = mean over heads h and over the
// adaptive-pool window of o of x[h*head_dim + d] (torch adaptive_avg_pool1d windows:
// [floor(o L/O), ceil((o+1) L/O))). [out_dim, heads*head_dim] float32 on the CPU.
Tensor head_pool_matrix(int64_t heads, int64_t head_dim, int64_t out_dim);

// Loads the requested parts from `ckpt`, which is first checked against the schema of `config`
// (missing, unexpected or misshapen tensors: kInvalidFile naming them). On a CUDA device the
// stored tensors are read in one pass straight to the device (io::load_tensors_to) and prepared
// there; only the 12-tap filters go through the host, and are uploaded together. Anti-aliasing
// filters are used as stored (the reference loads them strictly); one that differs from the
// Kaiser-sinc construction by more than 1e-6 is logged as a warning.
// `phases`, when given, gets the load's phases marked into it (the caller logs them); otherwise
// they are logged here at debug level.
AudioVaeWeights load_audio_vae_weights(const AudioVaeConfig& config, const io::Checkpoint& ckpt,
                                       const AudioVaeWeightPolicy& policy,
                                       PhaseTimer* phases = nullptr);

// Bytes the loaded parts take.
uint64_t audio_vae_weight_bytes(const AudioVaeWeights& w);

}  // namespace h3::audio_vae
