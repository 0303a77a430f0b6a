// Reference-audio normalization onto the audio VAE's rate (golden README "Reference media": Audio;
// h3_components_spec.md §4.3): truncate at the input's own rate to int(max_duration * rate)
// samples, upmix mono by repeating the channel, resample to 32 kHz with torchaudio's
// `transforms.Resample(rate, 32000)` defaults (windowed sinc, Hann window, lowpass_filter_width 6,
// rolloff 0.99).
//
// The resampler reproduces torchaudio's construction: rates reduced by their gcd; a polyphase
// kernel of `new` phases x (2 width + orig) taps with width = ceil(6 orig / (min(orig, new) 0.99));
// the phase offsets -j/new computed in float32 (torchaudio divides an integer arange by an int, which
// yields the default float dtype) and added to the float64 tap positions, everything else in float64,
// the kernel rounded to float32; the input zero-padded by width on the left and width + orig on the
// right; output length ceil(new * n / orig).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::media {

inline constexpr int64_t kAudioVaeSampleRate = 32000;

struct SincResampleKernel {
  int64_t orig = 1;    // input rate / gcd
  int64_t target = 1;  // output rate / gcd
  int64_t width = 0;   // taps beyond one input period on each side
  // [target][2*width + orig] float32, phase-major: output sample i*target + j is
  // sum_k taps[j][k] * padded[i*orig + k].
  std::vector<float> taps;
  int64_t taps_per_phase() const { return 2 * width + orig; }
};

// torchaudio's `_get_sinc_resample_kernel` with the Hann window. Rates must be positive and at
// most 2^31; lowpass_filter_width positive; rolloff in (0, 1]. Throws kInvalidArgument otherwise.
SincResampleKernel sinc_resample_kernel(int64_t orig_rate, int64_t new_rate,
                                        int64_t lowpass_filter_width = 6, double rolloff = 0.99);

// ceil(new_rate * samples / orig_rate): the length torchaudio keeps.
int64_t resampled_length(int64_t samples, int64_t orig_rate, int64_t new_rate);

// waveform [C, S] (any float dtype, CPU) -> float32 [C, resampled_length(S)]. Equal rates return a
// float32 copy (torchaudio returns its input unchanged). Accumulates in float64.
Tensor resample(const Tensor& waveform, int64_t orig_rate, int64_t new_rate);
Tensor resample(const Tensor& waveform, const SincResampleKernel& kernel);

// int(max_duration_seconds * rate) in float64, as the pipeline truncates (Python int() truncates
// toward zero).
int64_t truncated_sample_count(double max_duration_seconds, int64_t rate);

// The duration references are cut to: num_frames / 24 seconds (the pipeline's fps).
double reference_max_duration(int64_t num_frames);

// The pipeline's `_normalize_audio_condition`: waveform [C, S] with C in {1, 2} at `rate` ->
// float32 [2, S'] at `target_rate`. Throws kInvalidArgument for other channel counts, a
// non-positive rate or duration, or a result without samples.
Tensor normalize_reference_audio(const Tensor& waveform, int64_t rate, double max_duration_seconds,
                                 int64_t target_rate = kAudioVaeSampleRate);

}  // namespace h3::media
