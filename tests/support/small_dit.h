// A small DiT configuration and seeded normal tensors for the CPU tests that build a DiT of their
// own (test_dit_model.cpp, test_lora.cpp): 2 heads of 16 (inner 32), hidden 24, FFN 32, 2 main
// blocks and 1 refiner block.
#pragma once

#include <random>
#include <vector>

#include "core/tensor.h"

namespace h3::test {

inline constexpr const char* kSmallDitConfig = R"({
  "_class_name": "MiniMaxH3Transformer3DModel", "num_attention_heads": 2, "attention_head_dim": 16,
  "hidden_size": 24, "num_layers": 2, "num_refiner_layers": 1, "ffn_dim": 32, "in_channels": 4,
  "audio_in_channels": 6, "patch_size": [1, 2, 2], "text_dim": 8, "freq_dim": 16,
  "time_embed_hidden_dim": 24, "time_embed_dim": 16, "rope_freq_dim": 2, "rope_theta": 10000.0,
  "norm_eps": 1e-05, "qk_norm_eps": 1e-05, "final_norm_eps": 1e-05})";

// Normal(mean, stddev) values from `rng`, rounded to `dtype`.
inline Tensor random_tensor(const Shape& shape, std::mt19937& rng, float mean, float stddev,
                            DType dtype) {
  std::normal_distribution<float> nd(mean, stddev);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_f32(v, shape, dtype);
}

}  // namespace h3::test
