#include "models/audio_vae/audio_vae_decoder.h"

#include "core/status.h"
#include "models/audio_vae/audio_vae_filters.h"
#include "ops/ops.h"

namespace h3::audio_vae {
namespace {

// Every convolution of the decoder asks for float64 accumulation (ignored off the CPU): the
// decoder amplifies float32 summation noise to about its 1e-5 parity bound (ops.h, Conv1dParams).
Tensor conv(const Tensor& x, const ConvWeights& c, ops::Conv1dParams p) {
  p.f64_accumulate = true;
  return ops::conv1d(x, c.w, c.bias(), p);
}

void mark(PartTimer* timer, const char* part) {
  if (timer) timer->mark(part);
}

}  // namespace

Tensor anti_aliased_snake_beta(const ActivationWeights& a, const Tensor& x, PartTimer* timer) {
  Tensor h = ops::anti_aliased_snake_beta(x, a.log_alpha, a.log_beta, a.up_filter, a.down_filter,
                                          static_cast<int>(kAliasRatio));
  mark(timer, kDecodePartActivation);
  return h;
}

Tensor amp_block(const AmpBlockWeights& w, const Tensor& x, PartTimer* timer) {
  const int k = static_cast<int>(w.kernel);
  Tensor h = x;
  for (size_t j = 0; j < w.dilations.size(); ++j) {
    const int d = static_cast<int>(w.dilations[j]);
    Tensor t = anti_aliased_snake_beta(w.acts[2 * j], h, timer);
    t = conv(t, w.convs1[j], {.stride = 1, .padding = (k * d - d) / 2, .dilation = d});
    mark(timer, kDecodePartResConv);
    t = anti_aliased_snake_beta(w.acts[2 * j + 1], t, timer);
    t = conv(t, w.convs2[j], {.stride = 1, .padding = (k - 1) / 2});
    mark(timer, kDecodePartResConv);
    h = ops::add(t, h);
    mark(timer, kDecodePartSum);
  }
  return h;
}

Tensor decode_unclamped(const DecoderWeights& w, const Tensor& z, DecodeTrace* trace,
                        PartTimer* timer) {
  Tensor h = conv(z, w.in_proj, {});
  if (trace) trace->dec_in_proj_out = h;
  h = conv(h, w.conv_pre, {.stride = 1, .padding = 3});
  if (trace) trace->conv_pre_out = h;
  mark(timer, kDecodePartInput);
  const size_t levels = w.ups.size();
  const size_t per_level = levels ? w.resblocks.size() / levels : 0;
  H3_ASSERT(per_level * levels == w.resblocks.size() && per_level >= 1);
  for (size_t i = 0; i < levels; ++i) {
    ops::ConvTranspose1dParams up;
    up.stride = static_cast<int>(w.rates[i]);
    up.padding = static_cast<int>((w.kernels[i] - w.rates[i]) / 2);
    up.f64_accumulate = true;
    h = ops::conv_transpose1d(h, w.ups[i].w, w.ups[i].bias(), up);
    if (trace) trace->ups_out.push_back(h);
    mark(timer, kDecodePartUpsample);
    Tensor sum = amp_block(w.resblocks[i * per_level], h, timer);
    for (size_t j = 1; j < per_level; ++j) {
      const Tensor b = amp_block(w.resblocks[i * per_level + j], h, timer);
      sum = ops::add(sum, b);
      mark(timer, kDecodePartSum);
    }
    // The reference divides the sum by the number of kernels; x * (1/n) differs from x / n by at
    // most one float32 rounding.
    h = ops::scale(sum, 1.0f / static_cast<float>(per_level));
    mark(timer, kDecodePartSum);
  }
  h = anti_aliased_snake_beta(w.act_post, h, timer);
  h = conv(h, w.conv_post, {.stride = 1, .padding = 3});
  mark(timer, kDecodePartOutput);
  return h;
}

}  // namespace h3::audio_vae
