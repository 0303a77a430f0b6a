#include "pipeline/scheduler.h"

#include <cmath>

#include "core/status.h"

// The reference evaluates these formulas as separate float32 PyTorch kernels, each rounding once;
// a compiler-fused multiply-add would move results by an ulp (h3_dit_spec.md §3.2), so contraction
// is off for this file. Where torch itself fuses (linspace), std::fma says so explicitly.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace h3::pipeline {

std::vector<float> torch_linspace_f32(float start, float end, int64_t steps) {
  H3_CHECK(steps >= 0, ErrorCode::kInvalidArgument, "linspace: steps must be non-negative, got ",
           steps);
  std::vector<float> out(static_cast<size_t>(steps));
  if (steps == 0) return out;
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  // ATen's CPU linspace kernel (scalar path): step in the output type, the first half counts from
  // start, the second from end, so both endpoints are exact. GCC contracts `start + step*i` into
  // one fused multiply-add there, which h3_dit_spec.md §3.1 verified against the reference bits.
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    if (i < halfway) {
      out[static_cast<size_t>(i)] = std::fma(step, static_cast<float>(i), start);
    } else {
      out[static_cast<size_t>(i)] = std::fma(-step, static_cast<float>(steps - i - 1), end);
    }
  }
  return out;
}

namespace {

std::vector<float> timesteps_of(const std::vector<float>& sigmas) {
  std::vector<float> t(sigmas.size() - 1);
  for (size_t i = 0; i + 1 < sigmas.size(); ++i) t[i] = 1.0f - sigmas[i];
  return t;
}

}  // namespace

Schedule Schedule::from_grid(int64_t num_points, double shift) {
  H3_CHECK(num_points >= 2, ErrorCode::kInvalidArgument,
           "--steps counts sigma-grid points including the final 0 and must be at least 2, got ",
           num_points);
  H3_CHECK(shift > 0 && std::isfinite(shift), ErrorCode::kInvalidArgument,
           "scheduler shift must be positive, got ", shift);
  const std::vector<float> base = torch_linspace_f32(1.0f, 0.0f, num_points);
  // shift * base / (1 + (shift - 1) * base): four float32 tensor ops; the Python scalars are
  // cast to float32 by the kernels.
  const float s = static_cast<float>(shift);
  const float s1 = static_cast<float>(shift - 1.0);
  Schedule out;
  out.shift_ = shift;
  out.sigmas_.reserve(base.size());
  for (float b : base) {
    const float num = s * b;
    const float den = 1.0f + s1 * b;
    const float sigma = num / den;
    // unique_consecutive: drop a value equal to its predecessor.
    if (!out.sigmas_.empty() && out.sigmas_.back() == sigma) continue;
    out.sigmas_.push_back(sigma);
  }
  H3_CHECK(out.sigmas_.size() >= 2, ErrorCode::kInvalidArgument, "sigma grid of ", num_points,
           " points with shift ", shift, " collapsed to fewer than 2 distinct values");
  out.timesteps_ = timesteps_of(out.sigmas_);
  return out;
}

Schedule Schedule::from_sigmas(const std::vector<float>& sigmas) {
  bool valid = sigmas.size() >= 2 && sigmas.back() == 0.0f;
  for (size_t i = 1; valid && i < sigmas.size(); ++i) valid = sigmas[i] < sigmas[i - 1];
  H3_CHECK(valid, ErrorCode::kInvalidArgument,
           "sigmas must hold at least two strictly decreasing values ending at 0.0 (got ",
           sigmas.size(), " values)");
  Schedule out;
  out.sigmas_ = sigmas;
  out.timesteps_ = timesteps_of(sigmas);
  return out;
}

void Schedule::step_inplace(int64_t index, const float* velocity, float* sample, int64_t n) const {
  H3_CHECK(index >= 0 && index < num_steps(), ErrorCode::kInvalidArgument, "scheduler step ", index,
           " is outside the schedule of ", num_steps(), " steps");
  const float t = timesteps_[static_cast<size_t>(index)];
  // The x0 sigma comes from the timestep the model saw, the Euler ratio from the grid: two
  // float32 paths the reference keeps separate on purpose (they can differ by an ulp).
  const float sigma_t = 1.0f - t;
  const float ratio = sigmas_[static_cast<size_t>(index) + 1] / sigmas_[static_cast<size_t>(index)];
  const float one_minus_ratio = 1.0f - ratio;
  for (int64_t i = 0; i < n; ++i) {
    const float x = sample[i];
    const float scaled_v = sigma_t * velocity[i];
    const float x0 = x + scaled_v;
    const float kept = ratio * x;
    const float moved = one_minus_ratio * x0;
    sample[i] = kept + moved;
  }
}

Tensor Schedule::step(int64_t index, const Tensor& velocity, const Tensor& sample) const {
  H3_CHECK(velocity.dtype() == DType::kF32 && sample.dtype() == DType::kF32,
           ErrorCode::kInvalidArgument, "scheduler step needs float32 velocity and sample, got ",
           velocity.desc(), " and ", sample.desc());
  H3_CHECK(velocity.numel() == sample.numel(), ErrorCode::kInvalidArgument,
           "scheduler step: velocity ", velocity.desc(), " and sample ", sample.desc(),
           " differ in size");
  Tensor out = sample.contiguous().clone();
  const Tensor v = velocity.contiguous();
  step_inplace(index, v.data<float>(), out.data<float>(), out.numel());
  return out;
}

DualSchedule make_dual_schedule(int64_t num_points, double video_shift, double audio_shift) {
  DualSchedule d{Schedule::from_grid(num_points, video_shift),
                 Schedule::from_grid(num_points, audio_shift)};
  H3_CHECK(d.video.num_steps() == d.audio.num_steps(), ErrorCode::kInvalidArgument,
           "video and audio schedules of ", num_points, " points differ in length (",
           d.video.num_steps(), " vs ", d.audio.num_steps(), ")");
  return d;
}

DualSchedule fasth3_schedule() { return make_dual_schedule(kFastH3GridPoints); }

void scale_noise(float t, const float* sample, const float* noise, float* out, int64_t n) {
  const float keep = t;
  const float mix = 1.0f - t;
  for (int64_t i = 0; i < n; ++i) {
    const float a = keep * sample[i];
    const float b = mix * noise[i];
    out[i] = a + b;
  }
}

Tensor scale_noise(float t, const Tensor& sample, const Tensor& noise) {
  H3_CHECK(sample.dtype() == DType::kF32 && noise.dtype() == DType::kF32,
           ErrorCode::kInvalidArgument, "scale_noise needs float32 sample and noise, got ",
           sample.desc(), " and ", noise.desc());
  H3_CHECK(sample.numel() == noise.numel(), ErrorCode::kInvalidArgument, "scale_noise: sample ",
           sample.desc(), " and noise ", noise.desc(), " differ in size");
  const Tensor x = sample.contiguous();
  const Tensor e = noise.contiguous();
  Tensor out = Tensor::empty(sample.shape(), DType::kF32);
  scale_noise(t, x.data<float>(), e.data<float>(), out.data<float>(), out.numel());
  return out;
}

}  // namespace h3::pipeline
