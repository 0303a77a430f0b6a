// The rectified-flow schedulers of H3 (`MiniMaxH3Scheduler`, h3_dit_spec.md §3.1-3.2) and the
// FastH3 grid (§3.5).
//
// Conventions: `num_points` counts sigma-grid points including the terminal 0, so a schedule of N
// points runs N - 1 model calls. Time is clean-time: t = 1 - sigma, t = 0 is pure noise. Video
// uses shift 12, audio shift 3. Every value is float32 and rounded exactly where the reference's
// separate PyTorch ops round, so the tables and step outputs are bit-exact.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::pipeline {

inline constexpr double kVideoShift = 12.0;
inline constexpr double kAudioShift = 3.0;
// FastH3 (4-step distilled student): 5 grid points = 4 forwards, base t = 1000/750/500/250 -> 0.
inline constexpr int kFastH3GridPoints = 5;
// The noise-augmentation level of visual conditions, f32(0.999) (h3_dit_spec.md §3.2).
inline constexpr float kConditionNoiseLevel = 0.999f;

// torch.linspace(start, end, steps, dtype=float32) on the CPU, bit for bit: the first half counts
// up from start and the second half down from end, each value rounded once (fused multiply-add),
// with step = f32((end - start) / (steps - 1)).
std::vector<float> torch_linspace_f32(float start, float end, int64_t steps);

class Schedule {
 public:
  Schedule() = default;
  // set_timesteps(num_points): sigmas = unique_consecutive(s*b / (1 + (s-1)*b)), b = linspace(1, 0,
  // N).
  static Schedule from_grid(int64_t num_points, double shift);
  // set_timesteps(sigmas=...): explicit float32 sigmas, strictly decreasing, ending at 0.
  static Schedule from_sigmas(const std::vector<float>& sigmas);

  const std::vector<float>& sigmas() const { return sigmas_; }
  // timesteps[i] = f32(1 - sigmas[i]) for i < sigmas.size() - 1.
  const std::vector<float>& timesteps() const { return timesteps_; }
  // Number of model calls (= timesteps().size()).
  int64_t num_steps() const { return static_cast<int64_t>(timesteps_.size()); }
  double shift() const { return shift_; }

  // The Euler update of step `index` (h3_dit_spec.md §3.2), in place over n elements:
  //   x0 = x + f32(1 - t)*v  with t = timesteps[index],
  //   r  = sigmas[index+1] / sigmas[index],
  //   x' = r*x + (1 - r)*x0, every product and sum rounded separately.
  void step_inplace(int64_t index, const float* velocity, float* sample, int64_t n) const;
  // Tensor form: returns the updated sample (float32, same shape); velocity and sample must have
  // the same number of elements.
  Tensor step(int64_t index, const Tensor& velocity, const Tensor& sample) const;

 private:
  std::vector<float> sigmas_;
  std::vector<float> timesteps_;
  double shift_ = 0;
};

// The two schedules of a request; both must have the same number of steps.
struct DualSchedule {
  Schedule video;
  Schedule audio;
  int64_t num_steps() const { return video.num_steps(); }
};
DualSchedule make_dual_schedule(int64_t num_points, double video_shift = kVideoShift,
                                double audio_shift = kAudioShift);
// The FastH3 preview grid: make_dual_schedule(kFastH3GridPoints).
DualSchedule fasth3_schedule();

// scale_noise(x, t, noise) = f32(t*x) + f32(f32(1 - t)*noise), elementwise over n values.
void scale_noise(float t, const float* sample, const float* noise, float* out, int64_t n);
Tensor scale_noise(float t, const Tensor& sample, const Tensor& noise);

}  // namespace h3::pipeline
