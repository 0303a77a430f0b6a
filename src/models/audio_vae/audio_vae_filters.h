// The anti-aliasing filter of the audio VAE decoder's activations (h3_components_spec.md §3.4,
// "Anti-aliased activation"): a Kaiser-windowed sinc low-pass, as BigVGAN-v2 builds it.
//
// The checkpoint stores the filters as persistent buffers and the reference loads them strictly, so
// the decoder uses the stored values; this construction exists to check them (a checkpoint whose
// filters differ from the construction is reported by the loader as a warning) and to make weights
// for synthetic models.
#pragma once

#include <cstdint>
#include <vector>

namespace h3::audio_vae {

// Upsampling ratio and filter length of every anti-aliased activation (`Activation1d` defaults).
inline constexpr int64_t kAliasRatio = 2;
inline constexpr int64_t kAliasFilterTaps = 12;

// Kaiser window parameter for a filter of `kernel_size` taps and transition `half_width` (Kaiser's
// formula: attenuation A = 2.285 (N/2 - 1) pi (4 half_width) + 7.95, beta from A). About 4.663 for
// the decoder's (12 taps, half_width 0.3).
double kaiser_beta(double half_width, int64_t kernel_size);

// Symmetric Kaiser window of `n` points (torch.kaiser_window(n, beta, periodic=False)):
// w[i] = I0(beta sqrt(1 - ((i - a)/a)^2)) / I0(beta), a = (n - 1)/2. Evaluated in float64.
std::vector<double> kaiser_window(int64_t n, double beta);

// kaiser_sinc_filter1d(cutoff, half_width, kernel_size): taps at t = -N/2 .. N/2-1 (+0.5 for even
// N), h = 2 cutoff w sinc(2 cutoff t), normalized to sum 1. Computed in float64 and rounded to
// float32 once (the reference computes in float32; the two agree to a few float32 ulps).
std::vector<float> kaiser_sinc_filter1d(double cutoff, double half_width, int64_t kernel_size);

// The decoder's filter: cutoff 0.5/ratio = 0.25, half_width 0.6/ratio = 0.3, 12 taps. Up- and
// down-sampling use the same one.
std::vector<float> alias_free_filter();

}  // namespace h3::audio_vae
