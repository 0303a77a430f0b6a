// The Qwen3-VL vision tower (h3_components_spec.md §1.5): patch embedding, interpolated learned
// position embedding, 2-D rotary ViT blocks with block-diagonal attention per image / temporal
// slot, the final patch merger and the DeepStack mergers.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/qwen3_vl/qwen3_vl_config.h"
#include "models/qwen3_vl/qwen3_vl_positions.h"

namespace h3::qwen3_vl {

struct VisionBlockWeights {
  Tensor norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, norm2_w, norm2_b;
  Tensor fc1_w, fc1_b, fc2_w, fc2_b;
};

struct MergerWeights {
  Tensor norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

struct VisionOutput {
  Tensor tokens;                  // [N / merge^2, out_hidden] merged visual tokens
  std::vector<Tensor> deepstack;  // one [N / merge^2, out_hidden] per DeepStack tap
  std::vector<Tensor> hidden;     // block inputs/outputs [N, hidden] (only when asked)
};

class VisionTower {
 public:
  VisionTower() = default;
  // Weights go to `device` in `dtype` (float32: the float32 golden path; bfloat16: the released
  // precision, and on the CPU its emulation). The learned position table stays on the host: the
  // interpolation runs there (§1.5 step 2) and only the interpolated rows are uploaded.
  static VisionTower load(const Qwen3VlConfig& config, const io::Checkpoint& ckpt, DType dtype,
                          Device device = Device::cpu());
  bool loaded() const { return loaded_; }
  uint64_t weight_bytes() const;
  void release();
  Device device() const { return device_; }
  // pixel_values [N, C*tp*p*p] in processor (merge-block) order, on any device; grids as the
  // processor gives. Every output is on the tower's device.
  VisionOutput forward(const Tensor& pixel_values, const std::vector<GridThw>& grids,
                       bool keep_hidden = false) const;

 private:
  Qwen3VlConfig config_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::cpu();
  bool loaded_ = false;
  Tensor patch_w, patch_b, pos_embed;
  std::vector<VisionBlockWeights> blocks_;
  MergerWeights merger_;
  std::vector<MergerWeights> deepstack_;
};

}  // namespace h3::qwen3_vl
