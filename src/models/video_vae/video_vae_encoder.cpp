#include "models/video_vae/video_vae_encoder.h"

#include "core/status.h"
#include "ops/ops.h"

namespace h3::video_vae {
namespace {

// CausalConv3d (§2.3): spatial padding with the configured mode on both sides, then
// `temporal_pad` zero frames in front only, then a valid convolution.
Tensor causal_conv(const Tensor& x, const ConvWeights& w, int spatial_pad, int temporal_pad,
                   ops::PadMode mode, int t_stride = 1, int s_stride = 1) {
  Tensor in = x;
  if (temporal_pad > 0) {
    const int pads[6] = {temporal_pad, 0, 0, 0, 0, 0};
    in = ops::pad3d(in, pads, ops::PadMode::kZeros);
  }
  ops::Conv3dParams p;
  p.stride[0] = t_stride;
  p.stride[1] = p.stride[2] = s_stride;
  p.padding[1] = p.padding[2] = spatial_pad;
  p.pad_mode = mode;
  return ops::conv3d(in, w.w, &w.b, p);
}

Tensor resnet(const VideoVaeConfig& c, const ResnetWeights& w, const Tensor& x) {
  const ops::PadMode mode = c.spatial_padding_mode;
  Tensor h = ops::silu(frame_group_norm(x, c.norm_num_groups, w.norm1_w, w.norm1_b, c.norm_eps));
  h = causal_conv(h, w.conv1, 1, 2, mode);
  h = ops::silu(frame_group_norm(h, c.norm_num_groups, w.norm2_w, w.norm2_b, c.norm_eps));
  h = causal_conv(h, w.conv2, 1, 2, mode);
  const Tensor residual = w.shortcut.defined() ? causal_conv(x, w.shortcut, 0, 0, mode) : x;
  return ops::add(residual, h);
}

Tensor downsample(const VideoVaeConfig& c, const DownBlockWeights& blk, const Tensor& x) {
  Tensor in = x;
  if (blk.spatial_stride == 2) {
    // Pad right and bottom by one (the configured mode) so the output is ceil(size/2) (§2.3).
    const int pads[6] = {0, 0, 0, 1, 0, 1};
    in = ops::pad3d(in, pads, c.spatial_padding_mode);
  }
  return causal_conv(in, blk.downsampler, 0, 2, c.spatial_padding_mode,
                     static_cast<int>(blk.temporal_stride), static_cast<int>(blk.spatial_stride));
}

}  // namespace

Tensor frame_group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                        double eps) {
  H3_CHECK(x.dim() == 5, ErrorCode::kInvalidArgument, "video VAE group norm: expected [B, C, T, H, W], got ",
           x.desc());
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  const int g = static_cast<int>(groups);
  const float e = static_cast<float>(eps);
  if (t == 1) {
    // One frame: [B, C, 1, H, W] already groups per (item, frame).
    return ops::group_norm(x, g, &weight, &bias, e);
  }
  const Tensor folded = ops::copy(x.permute({0, 2, 1, 3, 4})).view({b * t, c, h, w});
  const Tensor y = ops::group_norm(folded, g, &weight, &bias, e);
  return ops::copy(y.view({b, t, c, h, w}).permute({0, 2, 1, 3, 4}));
}

Tensor encoder_forward(const VideoVaeConfig& c, const EncoderWeights& w, const Tensor& x) {
  H3_CHECK(x.dim() == 5 && x.size(1) == c.in_channels, ErrorCode::kInvalidArgument,
           "video VAE encoder: expected pixels [B, ", c.in_channels, ", T, H, W], got ", x.desc());
  H3_CHECK(x.size(3) >= 2 && x.size(4) >= 2, ErrorCode::kInvalidArgument,
           "video VAE encoder: frames of ", x.size(3), "x", x.size(4),
           " are too small for reflect padding (need at least 2x2)");
  Tensor h = x.dtype() == DType::kF32 ? x : ops::cast(x, DType::kF32);
  h = causal_conv(h, w.conv_in, 1, 2, c.spatial_padding_mode);
  for (const DownBlockWeights& blk : w.blocks) {
    for (const ResnetWeights& r : blk.resnets) h = resnet(c, r, h);
    if (blk.downsampler.defined()) h = downsample(c, blk, h);
  }
  h = ops::silu(frame_group_norm(h, c.norm_num_groups, w.norm_out_w, w.norm_out_b, c.norm_eps));
  h = causal_conv(h, w.conv_out, 1, 2, c.spatial_padding_mode);
  return causal_conv(h, w.quant_conv, 0, 0, c.spatial_padding_mode);
}

}  // namespace h3::video_vae
