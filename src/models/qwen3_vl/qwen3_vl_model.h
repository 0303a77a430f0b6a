// The Qwen3-VL language model up to the tap layer (h3_components_spec.md §1.1, §1.6, §1.7).
//
// Only what H3 reads is loaded: the token embeddings and decoder layers 0..tap-1 (tap = 50, the
// pipeline conditions on hidden_states[50], the unnormalized output of the 50th layer). Later
// layers, the final norm and the LM head stay on disk. Weights are converted once at load to the
// compute dtype: float32 reproduces the float32 golden data; bfloat16 on the CPU is the bf16
// emulation of the released bf16 encoder (ops round where the reference rounds, ops.h).
//
// Positions are 3-axis (temporal, height, width) ids, [3, L] int64; text tokens carry the same
// index on all three axes (§1.6). RoPE frequencies are interleaved across the axes (§1.6).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/qwen3_vl/qwen3_vl_config.h"
#include "models/qwen3_vl/qwen3_vl_positions.h"
#include "models/qwen3_vl/qwen3_vl_vision.h"

namespace h3 {
class LayerStream;
}

namespace h3::qwen3_vl {

struct DecoderLayerWeights {
  Tensor input_norm;                      // [hidden]
  Tensor q_proj, k_proj, v_proj, o_proj;  // [out, in], no bias
  Tensor q_norm, k_norm;                  // [head_dim]
  Tensor post_norm;                       // [hidden]
  Tensor gate_proj, up_proj, down_proj;
  // With FP8 weights (Qwen3VlLoadOptions::fp8) the seven projections hold E4M3 values and these
  // their per-output-channel float32 scales (ops/fp8.h); undefined otherwise.
  Tensor q_scale, k_scale, v_scale, o_scale, gate_scale, up_scale, down_scale;
};

// The tensors of one decoder layer in a fixed order: the layout of a streamed layer in its pinned
// buffer and in a device slot.
std::vector<Tensor*> layer_tensor_list(DecoderLayerWeights& w);

struct Qwen3VlLoadOptions {
  // Decoder layers 0..tap-1 stay in pinned host memory (read once from the checkpoint, converted
  // to the compute dtype on the way) and stream through two device slots during forward, the
  // next layer copied while one runs (core/layer_stream.h). Token embeddings and the vision tower
  // stay on the device. Outputs are bit-identical to the resident model. Needs a CUDA device
  // (kUnsupported otherwise: on the CPU the weights already live in host memory).
  bool stream_layers = false;
  // The vision tower (about 1.1 GiB at the released size) is read only for prompts with images
  // or videos (fl2va, ref2va); a text-only model refuses visual inputs with a clear error.
  bool vision = true;
  // --text-encoder-dtype fp8 (issue #15): the decoder layers' seven projections quantized once at
  // load to E4M3 with per-output-channel scales, run as FP8 GEMMs with activations quantized per
  // token; embeddings, norms, attention and the vision tower unchanged. Not with stream_layers.
  bool fp8 = false;
};

class Qwen3VlModel {
 public:
  Qwen3VlModel() = default;
  // `dir` is the text_encoder/ folder (config.json + safetensors checkpoint).
  static Qwen3VlModel load(const std::string& dir, DType dtype, Device device = Device::cpu(),
                           const Qwen3VlLoadOptions& options = {});
  static Qwen3VlModel load(const Qwen3VlConfig& config, const io::Checkpoint& ckpt, DType dtype,
                           Device device = Device::cpu(), const Qwen3VlLoadOptions& options = {});

  const Qwen3VlConfig& config() const { return config_; }
  bool loaded() const { return loaded_; }
  // Decoder projections the checkpoint itself stores in FP8 (models/fp8_checkpoint.h).
  int64_t fp8_from_checkpoint() const { return fp8_from_checkpoint_; }
  bool has_vision() const { return vision_.loaded(); }
  // Adds the vision tower to a model loaded without it (`dir`: the text_encoder/ folder); the
  // text stack stays as it is, so a text-only engine that meets an image reads only the tower.
  void load_vision(const std::string& dir);
  DType dtype() const { return dtype_; }
  // Bytes held by the loaded weights, wherever they live (0 after release()).
  uint64_t weight_bytes() const;
  // Whether the decoder layers stream from pinned host memory (Qwen3VlLoadOptions).
  bool streams_layers() const { return stream_ != nullptr; }
  // Device bytes of the layer slots (2 x one decoder layer, one slot when tap = 1; 0 without
  // streaming), and pinned host bytes of the streamed layers.
  uint64_t stream_slot_bytes() const;
  uint64_t stream_host_bytes() const;
  // What the model holds on its device: resident weights plus the slots.
  uint64_t device_bytes() const;
  // Drops every tensor the model holds (weights and the checkpoint mapping they borrow), the
  // pinned host memory of streamed layers and the slots included.
  void release();

  // Token embeddings [L, hidden]; ids outside the vocabulary are an error.
  Tensor embed(const std::vector<int64_t>& ids) const;
  // Runs decoder layers 0..tap-1 over `embeds` [L, hidden] at `position_ids` [3, L] and returns
  // hidden_states[tap] [L, hidden]. When `hidden_states` is given, it receives
  // hidden_states[0..tap] (for tests that locate a divergence; layer outputs before any DeepStack
  // add). With `visual_rows` (int64 [n]) and `deepstack` (each [n, hidden]), the DeepStack features
  // are added to the residual at those rows after layers 0..deepstack.size()-1 (§1.7 step 6).
  Tensor forward(const Tensor& embeds, const Tensor& position_ids,
                 std::vector<Tensor>* hidden_states = nullptr, const Tensor* visual_rows = nullptr,
                 const std::vector<Tensor>* deepstack = nullptr) const;
  // Text-only prompt: embeddings of `ids`, text positions, forward.
  Tensor encode_text(const std::vector<int64_t>& ids,
                     std::vector<Tensor>* hidden_states = nullptr) const;
  // Prompt with images and/or videos (§1.6): the vision tower encodes `pixel_values` (images) and
  // `pixel_values_videos`; merged tokens replace the image / video pad embeddings in order, M-RoPE
  // positions follow the grids, DeepStack features are injected. Either input may be undefined
  // with an empty grid list.
  Tensor encode(const std::vector<int64_t>& ids, const Tensor& pixel_values,
                const std::vector<GridThw>& image_grids, const Tensor& pixel_values_videos,
                const std::vector<GridThw>& video_grids,
                std::vector<Tensor>* hidden_states = nullptr) const;
  const VisionTower& vision() const { return vision_; }

 private:
  void check_loaded(const char* what) const;
  uint64_t layer_bytes(bool on_device) const;
  Qwen3VlConfig config_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::cpu();
  bool loaded_ = false;
  int64_t fp8_from_checkpoint_ = 0;
  Tensor embed_tokens_;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers_;  // pinned host tensors when streamed
  VisionTower vision_;
  // Layer streaming state (slots, copy stream, events); shared so that the model stays movable,
  // and mutable through const forward() by design (it only orders copies).
  std::shared_ptr<LayerStream> stream_;
};

// Text positions: [3, L] int64 with 0..L-1 on every axis (§1.6, no vision).
Tensor text_position_ids(int64_t length);

// Interleaved mRoPE tables for `position_ids` [3, L]: cos and sin [L, head_dim] in float32
// (§1.6: inv_freq in float32 on the host, axis h on frequencies j = 1 mod 3 below 3*section_h,
// axis w on j = 2 mod 3 below 3*section_w, the rest temporal; the angle vector doubled).
void mrope_tables(const TextConfig& text, const Tensor& position_ids, Tensor* cos, Tensor* sin);

}  // namespace h3::qwen3_vl
