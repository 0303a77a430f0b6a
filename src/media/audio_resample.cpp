#include "media/audio_resample.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "core/status.h"

namespace h3::media {
namespace {

constexpr int64_t kMaxRate = int64_t{1} << 31;

void check_rates(int64_t orig_rate, int64_t new_rate) {
  H3_CHECK(orig_rate >= 1 && orig_rate <= kMaxRate && new_rate >= 1 && new_rate <= kMaxRate,
           ErrorCode::kInvalidArgument, "audio resample: sample rates must be in [1, 2^31] Hz, got ",
           orig_rate, " -> ", new_rate);
}

}  // namespace

SincResampleKernel sinc_resample_kernel(int64_t orig_rate, int64_t new_rate,
                                        int64_t lowpass_filter_width, double rolloff) {
  check_rates(orig_rate, new_rate);
  H3_CHECK(lowpass_filter_width >= 1 && lowpass_filter_width <= 1024, ErrorCode::kInvalidArgument,
           "audio resample: lowpass_filter_width must be in [1, 1024], got ", lowpass_filter_width);
  H3_CHECK(rolloff > 0.0 && rolloff <= 1.0, ErrorCode::kInvalidArgument,
           "audio resample: rolloff must be in (0, 1], got ", rolloff);
  const int64_t g = std::gcd(orig_rate, new_rate);
  SincResampleKernel k;
  k.orig = orig_rate / g;
  k.target = new_rate / g;
  // A kernel of target x (2 width + orig) taps; refuse ratios that would need gigabytes.
  const double lw = static_cast<double>(lowpass_filter_width);
  const double base_freq = static_cast<double>(std::min(k.orig, k.target)) * rolloff;
  const double width = std::ceil(static_cast<double>(lowpass_filter_width * k.orig) / base_freq);
  const double cells = static_cast<double>(k.target) * (2.0 * width + static_cast<double>(k.orig));
  H3_CHECK(cells <= 64.0 * 1024 * 1024, ErrorCode::kInvalidArgument, "audio resample: ", orig_rate,
           " -> ", new_rate, " Hz reduces to ", k.orig, ":", k.target,
           ", whose polyphase kernel is too large; use rates with a larger common divisor");
  k.width = static_cast<int64_t>(width);
  const int64_t n = k.taps_per_phase();
  k.taps.resize(static_cast<size_t>(k.target * n));
  const double scale = base_freq / static_cast<double>(k.orig);
  const float target_f = static_cast<float>(k.target);
  for (int64_t j = 0; j < k.target; ++j) {
    // torch.arange(0, -new, -1)[:, None, None] / new: an integer tensor divided by an int gives the
    // default dtype, float32, before it meets the float64 tap positions.
    const float phase = static_cast<float>(-j) / target_f;
    for (int64_t i = 0; i < n; ++i) {
      const double idx = static_cast<double>(i - k.width) / static_cast<double>(k.orig);
      double t = (static_cast<double>(phase) + idx) * base_freq;
      t = std::clamp(t, -lw, lw);
      const double c = std::cos(t * std::numbers::pi / lw / 2.0);
      const double window = c * c;
      const double tp = t * std::numbers::pi;
      const double sinc = tp == 0.0 ? 1.0 : std::sin(tp) / tp;
      k.taps[static_cast<size_t>(j * n + i)] = static_cast<float>(sinc * (window * scale));
    }
  }
  return k;
}

int64_t resampled_length(int64_t samples, int64_t orig_rate, int64_t new_rate) {
  check_rates(orig_rate, new_rate);
  H3_CHECK(samples >= 0 && samples <= (int64_t{1} << 31), ErrorCode::kInvalidArgument,
           "audio resample: sample count must be in [0, 2^31], got ", samples);
  const int64_t g = std::gcd(orig_rate, new_rate);
  const int64_t o = orig_rate / g, t = new_rate / g;
  // ceil(t * samples / o), exact in integers (no overflow: both factors are below 2^31).
  return (t * samples + o - 1) / o;
}

Tensor resample(const Tensor& waveform, const SincResampleKernel& k) {
  H3_CHECK(waveform.defined() && waveform.dim() == 2 && dtype_is_float(waveform.dtype()),
           ErrorCode::kInvalidArgument, "audio resample: expected a float waveform [channels, samples], got ",
           waveform.defined() ? waveform.desc() : std::string("<undefined>"));
  const Tensor x = waveform.to(Device::cpu()).to(DType::kF32).contiguous();
  const int64_t channels = x.size(0), len = x.size(1);
  const int64_t out_len = (k.target * len + k.orig - 1) / k.orig;
  const int64_t n = k.taps_per_phase();
  Tensor out = Tensor::empty({channels, out_len}, DType::kF32);
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const float* xr = src + c * len;
    for (int64_t o = 0; o < out_len; ++o) {
      const int64_t frame = o / k.target, phase = o % k.target;
      const float* taps = k.taps.data() + phase * n;
      // The padded input has `width` zeros in front: padded[m] = x[m - width].
      const int64_t start = frame * k.orig - k.width;
      double acc = 0.0;
      const int64_t i0 = std::max<int64_t>(0, -start), i1 = std::min<int64_t>(n, len - start);
      for (int64_t i = i0; i < i1; ++i) acc += static_cast<double>(taps[i]) * xr[start + i];
      dst[c * out_len + o] = static_cast<float>(acc);
    }
  }
  return out;
}

Tensor resample(const Tensor& waveform, int64_t orig_rate, int64_t new_rate) {
  check_rates(orig_rate, new_rate);
  if (orig_rate == new_rate) {
    H3_CHECK(waveform.defined() && waveform.dim() == 2 && dtype_is_float(waveform.dtype()),
             ErrorCode::kInvalidArgument, "audio resample: expected a float waveform [channels, samples], got ",
             waveform.defined() ? waveform.desc() : std::string("<undefined>"));
    return waveform.to(Device::cpu()).to(DType::kF32).contiguous().clone();
  }
  return resample(waveform, sinc_resample_kernel(orig_rate, new_rate));
}

int64_t truncated_sample_count(double max_duration_seconds, int64_t rate) {
  H3_CHECK(std::isfinite(max_duration_seconds) && max_duration_seconds > 0.0 && rate >= 1 &&
               max_duration_seconds * static_cast<double>(rate) < 9.0e15,
           ErrorCode::kInvalidArgument, "audio truncation: need a positive finite duration and rate, got ",
           max_duration_seconds, " s at ", rate, " Hz");
  return static_cast<int64_t>(max_duration_seconds * static_cast<double>(rate));
}

double reference_max_duration(int64_t num_frames) {
  H3_CHECK(num_frames >= 1, ErrorCode::kInvalidArgument,
           "reference audio: the request's frame count must be positive, got ", num_frames);
  return static_cast<double>(num_frames) / 24.0;
}

Tensor normalize_reference_audio(const Tensor& waveform, int64_t rate, double max_duration_seconds,
                                 int64_t target_rate) {
  H3_CHECK(waveform.defined() && waveform.dim() == 2 && (waveform.size(0) == 1 || waveform.size(0) == 2) &&
               dtype_is_float(waveform.dtype()),
           ErrorCode::kInvalidArgument,
           "reference audio: expected a mono or stereo float waveform [channels, samples], got ",
           waveform.defined() ? waveform.desc() : std::string("<undefined>"));
  check_rates(rate, target_rate);
  const int64_t keep = std::min(waveform.size(1), truncated_sample_count(max_duration_seconds, rate));
  H3_CHECK(keep >= 1, ErrorCode::kInvalidArgument, "reference audio: no samples left after truncating ",
           waveform.desc(), " at ", rate, " Hz to ", max_duration_seconds, " s");
  Tensor cut = waveform.to(Device::cpu()).to(DType::kF32).slice(1, 0, keep).contiguous();
  if (cut.size(0) == 1) {
    // Mono: the channel repeated (waveform.expand(2, -1)).
    Tensor stereo = Tensor::empty({2, keep}, DType::kF32);
    stereo.slice(0, 0, 1).copy_from(cut);
    stereo.slice(0, 1, 2).copy_from(cut);
    cut = stereo;
  }
  return resample(cut, rate, target_rate);
}

}  // namespace h3::media
