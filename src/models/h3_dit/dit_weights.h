// Weights of the MiniMax-H3 DiT, keyed by the released (diffusers) tensor names
// (h3_dit_spec.md §1.3), checked against the config and placed in the dtype and on the device
// that the precision policy asks for.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/h3_dit/dit_config.h"
#include "ops/fp8.h"

namespace h3::dit {

// Low-rank pairs added at run time beside a weight (LoRA adapters applied with LoraMode::kRuntime,
// dit_lora.h): y = x W^T + sum over pairs of (x A^T) B^T, with B already multiplied by the
// adapter's scale and alpha / r. Empty for a model without run-time adapters.
struct LowRankPair {
  Tensor down;  // A [r, in]
  Tensor up;    // B [out, r]
};
using RuntimeLora = std::vector<LowRankPair>;

struct DitAttentionWeights {
  Tensor to_q, to_k, to_v;  // [inner, hidden]
  Tensor norm_q, norm_k;    // [head_dim]
  Tensor to_out;            // [hidden, inner]
  // FastH3 compression gate `attn.to_gate_compress` [inner, hidden] (§5.6); undefined for the base
  // checkpoint and always for the refiner.
  Tensor to_gate;
  // With FP8 weights (DitOptions::fp8) the five projections above hold E4M3 values and these
  // their per-output-channel float32 scales [out] (ops/fp8.h); undefined otherwise.
  Tensor to_q_scale, to_k_scale, to_v_scale, to_out_scale, to_gate_scale;
  RuntimeLora to_q_lora, to_k_lora, to_v_lora, to_out_lora, to_gate_lora;
};

struct DitFeedForwardWeights {
  Tensor fc_in;   // ff.net.0.proj [2*ffn, hidden], rows [value | gate] (§1.3)
  Tensor fc_out;  // ff.net.2 [hidden, ffn]
  Tensor fc_in_scale, fc_out_scale;  // FP8 weights' per-channel scales, as in the attention's
  RuntimeLora fc_in_lora, fc_out_lora;
};

struct DitRefinerBlockWeights {
  Tensor norm1, norm2;  // [hidden]
  DitAttentionWeights attn;
  DitFeedForwardWeights ff;
};

struct DitBlockWeights {
  Tensor norm1, norm2;  // [hidden]
  DitAttentionWeights attn;
  DitFeedForwardWeights ff;
  Tensor adaln_w;  // [18*hidden, time_embed_dim], rows (modality, chunk, channel)
  Tensor adaln_scale;  // per-channel scales of an FP8 adaln_w (DitOptions::fp8), else undefined
  Tensor adaln_b;  // [18*hidden]
  RuntimeLora adaln_lora;
};

struct DitWeights {
  // fp32 islands (§1.7): proj_in, audio_proj_in, time_embedder, proj_out, audio_proj_out.
  Tensor proj_in_w, proj_in_b;
  Tensor audio_proj_in_w, audio_proj_in_b;
  Tensor time_1_w, time_1_b, time_2_w, time_2_b;
  Tensor proj_out_w, proj_out_b;
  Tensor audio_proj_out_w, audio_proj_out_b;
  // The rest: the model dtype.
  Tensor context_w, context_b;
  std::vector<DitRefinerBlockWeights> refiner;
  Tensor refiner_final_norm;
  std::vector<DitBlockWeights> blocks;
  Tensor norm_out_norm;                // [hidden]
  Tensor norm_out_w, norm_out_b;       // [2*hidden, time_embed_dim], rows [shift | scale]
  // True when every main block carries a FastH3 compression gate (§5.6).
  bool has_vsa_gates = false;
  // Projections the checkpoint itself stores in FP8 (models/fp8_checkpoint.h): they run as FP8
  // GEMMs whatever --dit-dtype says (widening them would not bring back what was rounded away).
  int64_t fp8_from_checkpoint = 0;
  RuntimeLora proj_in_lora, audio_proj_in_lora, time_1_lora, time_2_lora, proj_out_lora,
      audio_proj_out_lora, context_lora, norm_out_lora;
};

// One tensor of the weights by its released name ("transformer_blocks.3.attn.to_q.weight",
// "proj_in.bias", ...), with the run-time pairs of its linear when it is a linear's weight.
// `tensor` is null for a name the model does not have; a gate name of a model without gates gives
// the (undefined) gate tensor, so that an adapter can create it.
struct DitTensorRef {
  Tensor* tensor = nullptr;
  RuntimeLora* lora = nullptr;  // null for biases and norms
  bool fp32_island = false;
  Shape shape;  // what the config implies
};
DitTensorRef dit_tensor_ref(DitWeights& w, const DitConfig& config, const std::string& name);

// --dit-dtype fp8: the attention and feed-forward projections of every main and refiner block and
// the main blocks' AdaLN projections (40 % of the released DiT's parameters) become E4M3 with
// per-output-channel scales, quantized where they live, one tensor at a time, so that no second
// full copy of the weights exists. The embedders, heads, norms and the modulation arithmetic keep
// their dtype. Returns the bytes the quantized weights take (values and scales).
// `scaling`: per output channel or per 128 x 128 block (--fp8-scaling).
uint64_t quantize_block_linears_fp8(DitWeights& w, ops::Fp8WeightScaling scaling);

// Where and in which dtypes the weights live. `body_dtype` applies to every tensor outside the fp32
// islands (kBF16 as the release stores them, or kF32 to widen them exactly); the islands are always
// kF32 (the reference keeps them in fp32 in every policy, §1.7).
struct DitWeightPolicy {
  Device device = Device::cpu();
  DType body_dtype = DType::kBF16;
  // Main blocks [0, resident_blocks) go to `device`; blocks [resident_blocks, num_layers) go to
  // pinned host memory in body_dtype, read from the checkpoint's mmap straight into it (streamed
  // at run time, core/layer_stream.h). Negative: every block on `device`. 0 is --cpu-offload.
  int64_t resident_blocks = -1;
};

// Loads every tensor the config implies from `ckpt`. Errors (h3::Error) name the tensor and the
// checkpoint: a missing tensor (kNotFound), a wrong shape or a non-float dtype (kInvalidFile),
// names the model does not know (kInvalidFile). FastH3 compression gates
// (`transformer_blocks.{i}.attn.to_gate_compress.weight`, [inner, hidden]) are loaded when every
// block has one; gates on some blocks only are refused (kUnsupported).
DitWeights load_dit_weights(const DitConfig& config, const io::Checkpoint& ckpt,
                            const DitWeightPolicy& policy);

// The tensors of one main block in a fixed order (the compression gate only when defined): the
// layout of a streamed block in its pinned buffer and in a device slot.
std::vector<Tensor*> block_tensor_list(DitBlockWeights& b);

// Places blocks [first, blocks.size()) in pinned host memory, one buffer per block, converted to
// `dtype` (core/layer_stream.h pin_layers). Needs CUDA; throws kUnsupported otherwise.
void pin_blocks(std::vector<DitBlockWeights>& blocks, DType dtype, size_t first = 0);

// Every released tensor name with its shape for a config, in checkpoint order of §1.3.
struct DitTensorSpec {
  std::string name;
  Shape shape;
  bool fp32_island = false;
};
std::vector<DitTensorSpec> dit_tensor_specs(const DitConfig& config);
// The optional FastH3 gate of block i: name and shape [inner, hidden].
DitTensorSpec dit_gate_spec(const DitConfig& config, int64_t block);

}  // namespace h3::dit
