// Seeded random weights for benchmarks (h3 bench e2e --random-weights): installs an
// io::WeightFill that overwrites every loaded float tensor where it lives (ops::fill_random, on
// the device for CUDA loads), scaled like the modules' default initialisation so that activations
// keep realistic magnitudes through 50 blocks:
//   - matrices and convolution kernels (2+ dims): uniform +-1/sqrt(fan_in), fan_in = numel / rows
//     (torch's Linear/Conv default bound);
//   - vectors named like norm weights or scales ("norm", "scale", "gamma", "weight"): 1 +- 0.05;
//   - the video VAE decoder's layer scales ("scale1", "scale2"): 0.1;
//   - snake parameters ("alpha", "beta"): raw around 1, log-scale ("log") around 0, +- 0.05;
//   - every other vector (biases, tables): +- 0.02.
// Each tensor's values depend only on the seed and its name, so a warm generation, another
// device and the CPU see the same weights.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace h3::pipeline {

// The centre and half-width the policy above picks for one tensor.
struct FillRange {
  float center = 0.0f;
  float half_width = 0.0f;
};
FillRange random_weight_range(const std::string& name, const Shape& shape);

// Installs the fill for every later load; the destructor removes it (one at a time).
class RandomWeightsScope {
 public:
  explicit RandomWeightsScope(uint64_t seed);
  ~RandomWeightsScope();
  RandomWeightsScope(const RandomWeightsScope&) = delete;
  RandomWeightsScope& operator=(const RandomWeightsScope&) = delete;
};

}  // namespace h3::pipeline
