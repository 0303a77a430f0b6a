#include "models/video_vae/video_vae_model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "core/cuda_stream.h"
#include "core/status.h"
#include "models/video_vae/video_vae_assembly.h"
#include "models/video_vae/video_vae_decoder.h"
#include "models/video_vae/video_vae_encoder.h"
#include "ops/cuda/vae_assemble.h"
#include "ops/ops.h"

namespace h3::video_vae {
namespace {

Tensor contiguous_on_device(const Tensor& t) { return t.is_contiguous() ? t : ops::copy(t); }

// Repeats the last slice along `dim` `count` more times (the reference's `x[:, :, -1:].repeat`).
Tensor pad_by_repeating_last(const Tensor& x, int dim, int64_t count) {
  if (count <= 0) return x;
  const int64_t n = x.size(dim);
  const Tensor last = contiguous_on_device(x.slice(dim, n - 1, n));
  std::vector<Tensor> parts = {contiguous_on_device(x)};
  for (int64_t i = 0; i < count; ++i) parts.push_back(last);
  return ops::concat(parts, dim);
}

// Per-channel affine z*s + m (or (z - m)/s) on dim 1, float32, computed on the host: latents are
// small next to everything else the VAE touches.
Tensor channel_affine(const Tensor& z, const std::vector<float>& mean, const std::vector<float>& std,
                      bool normalize, const char* what) {
  H3_CHECK(z.dim() >= 2 && z.size(1) == static_cast<int64_t>(mean.size()), ErrorCode::kInvalidArgument,
           what, ": expected latents [B, ", mean.size(), ", ...], got ", z.desc());
  const Tensor host = z.to(Device::cpu()).to(DType::kF32).contiguous();
  Tensor out = Tensor::empty(z.shape(), DType::kF32);
  const float* src = host.data<float>();
  float* dst = out.data<float>();
  const int64_t b = z.size(0), c = z.size(1);
  const int64_t inner = c ? z.numel() / (b * c) : 0;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t off = (bi * c + ci) * inner;
      const float m = mean[ci], s = std[ci];
      for (int64_t i = 0; i < inner; ++i)
        dst[off + i] = normalize ? (src[off + i] - m) / s : src[off + i] * s + m;
    }
  }
  return out.to(z.device());
}

// Seconds since the epoch after the device's queued work finished (profiling only).
double synced_seconds(const Device& d) {
  if (d.is_cuda()) Stream().synchronize();  // the ops run on the legacy default stream
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the time between construction and destruction to *sink (nothing without a sink).
class ScopedSeconds {
 public:
  ScopedSeconds(double* sink, Device d) : sink_(sink), device_(d), t0_(sink ? synced_seconds(d) : 0) {}
  ~ScopedSeconds() {
    if (sink_) *sink_ += synced_seconds(device_) - t0_;
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* sink_;
  Device device_;
  double t0_;
};

}  // namespace

const char* precision_name(VaePrecision p) {
  return p == VaePrecision::kF32 ? "f32" : "f16-autocast";
}

VaePrecision parse_precision(const std::string& text) {
  if (text == "f32" || text == "fp32" || text == "float32") return VaePrecision::kF32;
  if (text == "f16" || text == "fp16" || text == "float16" || text == "f16-autocast")
    return VaePrecision::kF16Autocast;
  fail(ErrorCode::kInvalidArgument, "unknown VAE precision '", text,
       "' (expected f32 or f16-autocast)");
}

namespace {
// Refuses options the device cannot honour before anything is read.
void check_options(const VideoVaeOptions& o) {
  H3_CHECK(ops::attention_kernel_available(o.attention, o.device), ErrorCode::kUnsupported,
           "video VAE: attention kernel '", ops::attention_kernel_name(o.attention), "' is not available on ",
           o.device.str(),
           o.device.is_cpu() ? " (the CPU has one attention kernel; name kernels only on CUDA)"
                             : " (hopper needs a compute capability 9.0 GPU and a build with sm_90a kernels)");
  H3_CHECK(!o.decoder_fp8 || o.precision == VaePrecision::kF16Autocast, ErrorCode::kInvalidArgument,
           "video VAE: FP8 decoder weights (--vae-dtype fp8) go with the f16-autocast policy, not ",
           precision_name(o.precision));
}
}  // namespace

VideoVae VideoVae::load(const std::string& component_dir, const VideoVaeOptions& options) {
  check_options(options);
  namespace fs = std::filesystem;
  H3_CHECK(fs::is_directory(component_dir), ErrorCode::kNotFound, "video VAE folder ", component_dir,
           " does not exist");
  const VideoVaeConfig config = VideoVaeConfig::load(component_dir);
  const io::Checkpoint ckpt = io::Checkpoint::open(component_dir);
  return from_checkpoint(config, ckpt, options);
}

namespace {
VideoVaeWeightPolicy policy_of(const VideoVaeOptions& o) {
  VideoVaeWeightPolicy p;
  p.device = o.device;
  p.decoder_gemm_dtype = o.precision == VaePrecision::kF16Autocast ? DType::kF16 : DType::kF32;
  p.load_encoder = o.load_encoder;
  p.load_decoder = o.load_decoder;
  p.decoder_fp8 = o.decoder_fp8;
  return p;
}
}  // namespace

VideoVae VideoVae::from_checkpoint(const VideoVaeConfig& config, const io::Checkpoint& ckpt,
                                   const VideoVaeOptions& options) {
  check_options(options);
  return from_weights(config, load_video_vae_weights(config, ckpt, policy_of(options)), options);
}

VideoVae VideoVae::from_weights(const VideoVaeConfig& config, VideoVaeWeights weights,
                                const VideoVaeOptions& options) {
  config.validate("video VAE config");
  options.tiles.validate(config.spatial_ratio());
  check_options(options);
  VideoVae m;
  m.config_ = config;
  m.options_ = options;
  m.weights_ = std::move(weights);
  return m;
}

DType VideoVae::decoder_dtype() const {
  return options_.precision == VaePrecision::kF16Autocast ? DType::kF16 : DType::kF32;
}

void VideoVae::set_tiling(bool enabled, const TileSettings& tiles) {
  tiles.validate(config_.spatial_ratio());
  options_.use_tiling = enabled;
  options_.tiles = tiles;
}

// ---- encode ---------------------------------------------------------------------------------------

Tensor VideoVae::encode_clip(const Tensor& x) const {
  H3_CHECK(weights_.has_encoder, ErrorCode::kInvalidArgument,
           "video VAE: the encoder was not loaded (load_encoder = false)");
  const Tensor in = contiguous_on_device(x.to(options_.device));
  if (!options_.use_tiling) return encoder_forward(config_, weights_.encoder, in);
  const int64_t r = config_.spatial_ratio();
  const int64_t hgt = in.size(3), wid = in.size(4);
  const TileSettings& ts = options_.tiles;
  const TileAxis ya = split_tiles(hgt, ts.tile_height, ts.min_overlap_height, r);
  const TileAxis xa = split_tiles(wid, ts.tile_width, ts.min_overlap_width, r);
  std::vector<std::vector<Tensor>> rows;
  for (size_t i = 0; i < ya.starts.size(); ++i) {
    std::vector<Tensor> row;
    const int64_t y0 = ya.starts[i], y1 = std::min(hgt, y0 + ya.lengths[i]);
    for (size_t j = 0; j < xa.starts.size(); ++j) {
      const int64_t x0 = xa.starts[j], x1 = std::min(wid, x0 + xa.lengths[j]);
      const Tensor tile = contiguous_on_device(in.slice(3, y0, y1).slice(4, x0, x1));
      row.push_back(encoder_forward(config_, weights_.encoder, tile));
    }
    rows.push_back(std::move(row));
  }
  // Pixel overlaps become latent overlaps (§2.5); the blend is float32 here.
  std::vector<int64_t> yo, xo;
  for (int64_t o : ya.overlaps) yo.push_back(o / r);
  for (int64_t o : xa.overlaps) xo.push_back(o / r);
  return stitch_tiles(rows, yo, xo);
}

Tensor VideoVae::encode_moments(const Tensor& x) const {
  H3_CHECK(x.dim() == 5 && x.size(1) == config_.in_channels && x.size(2) >= 1,
           ErrorCode::kInvalidArgument, "video VAE encode: expected pixels [B, ", config_.in_channels,
           ", F, H, W] with F >= 1, got ", x.desc());
  H3_CHECK(dtype_is_float(x.dtype()), ErrorCode::kInvalidArgument,
           "video VAE encode: expected normalized float pixels (see normalize_pixels), got ", x.desc());
  const int64_t frames = x.size(2), clip = config_.clip_length;
  if (frames == 1) return encode_clip(x);  // keyframes and images: the spatial path (§2.5)
  std::vector<Tensor> moments;
  for (int64_t start = 0; start < frames; start += clip) {
    const int64_t end = std::min(frames, start + clip);
    Tensor part = x.slice(2, start, end);
    if (end - start < clip) part = pad_by_repeating_last(part.to(options_.device), 2, clip - (end - start));
    moments.push_back(encode_clip(part));
  }
  Tensor all = moments.size() == 1 ? moments[0] : ops::concat(moments, 2);
  if (config_.token_drop > 0) {
    all = contiguous_on_device(all.slice(2, 0, all.size(2) - config_.token_drop));
  }
  return all;
}

// ---- decode ---------------------------------------------------------------------------------------

int64_t VideoVae::resolve_tile_batch(int64_t tiles, int64_t rows_per_tile) const {
  if (tiles <= 1) return 1;
  int64_t want = options_.tile_batch;
  if (const char* env = std::getenv("H3_VAE_TILE_BATCH"); env && *env) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    H3_CHECK(end && *end == '\0' && v >= 0, ErrorCode::kInvalidArgument,
             "H3_VAE_TILE_BATCH must be a non-negative integer (0: automatic), got '", env, "'");
    want = v;
  }
  H3_CHECK(want >= 0, ErrorCode::kInvalidArgument, "video VAE: tile_batch must be >= 0 (0: automatic), got ",
           want);
  if (want >= 1) return std::min(want, tiles);
  if (!options_.device.is_cuda()) return 1;
  size_t free_b = 0, total_b = 0;
  cuda_memory_info(options_.device.index, &free_b, &total_b);
  return auto_tile_batch(config_, decoder_dtype(), tiles, rows_per_tile, free_b);
}

Tensor VideoVae::decode_clip(const Tensor& z, VideoDecodeProfile* profile) const {
  H3_CHECK(weights_.has_decoder, ErrorCode::kInvalidArgument,
           "video VAE: the decoder was not loaded (load_decoder = false)");
  const DType gd = decoder_dtype();
  DecoderProfile* dp = profile ? &profile->decoder : nullptr;
  const DecoderAttention attn{options_.attention, &attention_used_};
  if (!options_.use_tiling) {
    if (profile) profile->tile_batch = std::max<int64_t>(profile->tile_batch, 1);
    tile_batch_used_ = std::max<int64_t>(tile_batch_used_, 1);
    return decoder_forward(config_, weights_.decoder, gd, z, dp, attn);
  }
  const int64_t r = config_.spatial_ratio();
  const int64_t h = z.size(2), w = z.size(3);
  const TileSettings& ts = options_.tiles;
  // Tiles are laid out in pixel space and mapped back onto the latent grid (§2.7).
  const TileAxis ya = split_tiles(h * r, ts.tile_height, ts.min_overlap_height, r);
  const TileAxis xa = split_tiles(w * r, ts.tile_width, ts.min_overlap_width, r);
  const size_t ny = ya.starts.size(), nx = xa.starts.size();
  std::vector<Tensor> flat;  // row-major over (tile row, tile column)
  int64_t rows_per_tile = 0;
  for (size_t i = 0; i < ny; ++i) {
    const int64_t y0 = ya.starts[i] / r, y1 = std::min(h, y0 + ya.lengths[i] / r);
    for (size_t j = 0; j < nx; ++j) {
      const int64_t x0 = xa.starts[j] / r, x1 = std::min(w, x0 + xa.lengths[j] / r);
      flat.push_back(contiguous_on_device(z.slice(2, y0, y1).slice(3, x0, x1)));
      rows_per_tile = std::max(rows_per_tile, z.size(1) * (y1 - y0) * (x1 - x0) +
                                                  config_.decoder_num_register_tokens + 1);
    }
  }
  // Batches of near-equal size (28 tiles with room for 16: two batches of 14, not 16 + 12).
  const int64_t count = static_cast<int64_t>(flat.size());
  const int64_t limit = resolve_tile_batch(count, rows_per_tile);
  const int64_t batches = (count + limit - 1) / limit;
  const int64_t per_batch = (count + batches - 1) / batches;
  if (profile) profile->tile_batch = std::max(profile->tile_batch, per_batch);
  tile_batch_used_ = std::max(tile_batch_used_, per_batch);
  std::vector<Tensor> decoded;
  for (int64_t b0 = 0; b0 < count; b0 += per_batch) {
    const int64_t b1 = std::min(count, b0 + per_batch);
    if (b1 - b0 == 1) {
      decoded.push_back(decoder_forward(config_, weights_.decoder, gd, flat[b0], dp, attn));
      continue;
    }
    const std::vector<Tensor> part(flat.begin() + b0, flat.begin() + b1);
    for (Tensor& t : decoder_forward_batch(config_, weights_.decoder, gd, part, dp, attn)) decoded.push_back(std::move(t));
  }
  ScopedSeconds timing(profile ? &profile->stitch_s : nullptr, options_.device);
  // On CUDA one kernel writes the stitched window (bit for bit the composition below, which made
  // dozens of small launches and host-to-device weight copies per tile).
  if (options_.device.is_cuda() && fused_stitch_enabled() &&
      static_cast<int64_t>(decoded.size()) <= ops::cuda::kVaeStitchMaxTiles) {
    for (Tensor& t : decoded) t = contiguous_on_device(t);
    return ops::cuda::vae_stitch_tiles(decoded, static_cast<int64_t>(ny), static_cast<int64_t>(nx), ya.overlaps,
                                       xa.overlaps);
  }
  std::vector<std::vector<Tensor>> rows(ny);
  for (size_t i = 0; i < ny; ++i)
    rows[i].assign(decoded.begin() + static_cast<int64_t>(i * nx), decoded.begin() + static_cast<int64_t>((i + 1) * nx));
  return stitch_tiles(rows, ya.overlaps, xa.overlaps);
}

namespace {

void check_decode_latents(const Tensor& z, const VideoVaeConfig& c) {
  H3_CHECK(z.dim() == 5 && z.size(1) == c.latent_channels && z.size(2) >= 1 && z.size(3) >= 1 &&
               z.size(4) >= 1,
           ErrorCode::kInvalidArgument, "video VAE decode: expected latents [B, ", c.latent_channels,
           ", T, h, w], got ", z.desc());
  H3_CHECK(dtype_is_float(z.dtype()), ErrorCode::kInvalidArgument,
           "video VAE decode: expected float latents, got ", z.desc());
}

// Where window i's frames go in the fused assembly (video_vae_assembly.h), with the previous
// window's carried tail [prev0, prev0 + prev_len) of `prev` (§2.8).
struct WindowTail {
  Tensor prev;
  int64_t prev_len = 0;
};

// The frames window `clip` contributes before its tail: at most main_frames from `pre` on (as the
// reference's slice), and the blend of their first ones with the previous tail (as blend()).
struct WindowMain {
  int64_t frames = 0;  // frames kept from the window
  int64_t blended = 0;  // E of blend(): min(tail, frames, frame_overlap)
};

WindowMain window_main(const Tensor& clip, const WindowTail& tail, const TemporalPlan& plan,
                       const VideoVaeConfig& c) {
  WindowMain w;
  w.frames = std::clamp<int64_t>(clip.size(1) - c.frame_pre_padding(), 0, plan.main_frames);
  if (tail.prev.defined()) w.blended = std::min({tail.prev_len, w.frames, c.frame_overlap()});
  return w;
}

// Writes the first n (<= w.frames) of the window's main frames into out[:, dst0...], blended.
void assemble_main(const Tensor& out, int64_t dst0, const Tensor& clip, int64_t n, const WindowMain& w,
                   const WindowTail& tail, const VideoVaeConfig& c) {
  if (n <= 0) return;
  std::vector<float> wa, wb;
  blend_weights(w.blended, clip.dtype(), &wa, &wb);
  // Weights depend on the whole extent E; frames past n are cut afterwards anyway.
  if (static_cast<int64_t>(wa.size()) > n) {
    wa.resize(static_cast<size_t>(n));
    wb.resize(static_cast<size_t>(n));
  }
  assemble_frames(out, dst0, clip, c.frame_pre_padding(), n, w.blended > 0 ? &tail.prev : nullptr,
                  tail.prev_len - w.blended, wa, wb);
}

// The tail window `clip` carries to the next one (a contiguous copy: the whole window need not be
// kept alive while the next decodes).
WindowTail carried_tail(const Tensor& clip, const TemporalPlan& plan, const VideoVaeConfig& c) {
  WindowTail t;
  if (c.token_drop <= 0) return t;
  const int64_t chunk_frames = c.tokens_chunk_size() * c.temporal_ratio();
  const int64_t o0 = std::min(clip.size(1), chunk_frames + c.frame_pre_padding());
  const int64_t len = std::min(plan.overlap_frames, clip.size(1) - o0);
  t.prev = contiguous_on_device(clip.slice(1, o0, o0 + len));
  t.prev_len = len;
  return t;
}

}  // namespace

Tensor VideoVae::decode_assembled(const Tensor& z, VideoDecodeProfile* profile, DType out) const {
  const TemporalPlan plan = temporal_decode_plan(z.size(2), config_);
  const int64_t chunk = config_.tokens_chunk_size();
  double* temporal = profile ? &profile->temporal_s : nullptr;
  // [B, 3, F, H, W], allocated once the first window gives H and W. On CUDA it is held in the
  // windows' dtype (half the memory under the float16 autocast while the decoder runs) and
  // converted to `out` at the end; the CPU assembly writes float32 directly.
  Tensor video;
  for (int64_t bi = 0; bi < z.size(0); ++bi) {
    Tensor zi = z.select(0, bi).to(options_.device);
    if (zi.dtype() != DType::kF32) zi = ops::cast(zi, DType::kF32);
    zi = pad_by_repeating_last(contiguous_on_device(zi), 1, plan.pad_tokens);
    WindowTail tail;
    int64_t at = 0;
    for (int64_t i = 0; i < plan.num_chunks; ++i) {
      const int64_t start = i * chunk;
      const Tensor window = contiguous_on_device(zi.slice(1, start, start + plan.window_tokens));
      const Tensor clip = contiguous_on_device(decode_clip(window, profile));
      ScopedSeconds timing(temporal, options_.device);
      if (profile) ++profile->windows;
      if (!video.defined()) {
        video = Tensor::empty({z.size(0), clip.size(0), plan.output_frames, clip.size(2), clip.size(3)},
                              clip.device().is_cuda() ? clip.dtype() : DType::kF32, clip.device());
      }
      const Tensor item = video.select(0, bi);
      H3_CHECK(item.size(0) == clip.size(0) && item.size(2) == clip.size(2) && item.size(3) == clip.size(3),
               ErrorCode::kInternal, "video VAE decode: window ", clip.desc(), " does not fit the video ",
               video.desc());
      const WindowMain w = window_main(clip, tail, plan, config_);
      assemble_main(item, at, clip, std::clamp<int64_t>(plan.output_frames - at, 0, w.frames), w, tail,
                    config_);
      at += w.frames;
      tail = carried_tail(clip, plan, config_);
    }
    ScopedSeconds timing(temporal, options_.device);
    if (tail.prev_len > 0) {
      const int64_t n = std::clamp<int64_t>(plan.output_frames - at, 0, tail.prev_len);
      if (n > 0) assemble_frames(video.select(0, bi), at, tail.prev, 0, n, nullptr, 0, {}, {});
      at += tail.prev_len;
    }
    H3_CHECK(at >= plan.output_frames, ErrorCode::kInternal, "video VAE decode: the windows gave ", at,
             " frames, the plan expects ", plan.output_frames);
  }
  if (!video.defined() || video.dtype() == out) return video;
  ScopedSeconds timing(temporal, options_.device);
  return ops::cast(video, out);
}

Tensor VideoVae::decode(const Tensor& z, VideoDecodeProfile* profile, DType out_dtype) const {
  check_decode_latents(z, config_);
  H3_CHECK(out_dtype == DType::kF32 || out_dtype == DType::kF16 || out_dtype == DType::kBF16,
           ErrorCode::kInvalidArgument,
           "video VAE decode: the output dtype must be f32, f16 or bf16, got ",
           dtype_name(out_dtype));
  const TemporalPlan plan = temporal_decode_plan(z.size(2), config_);
  const int64_t chunk = config_.tokens_chunk_size(), pre = config_.frame_pre_padding();
  // H3_VAE_FUSED_ASSEMBLY=0 restores the op composition below (video_vae_assembly.h).
  if (fused_assembly_enabled()) return decode_assembled(z, profile, out_dtype);
  const int64_t chunk_frames = chunk * config_.temporal_ratio();
  double* temporal = profile ? &profile->temporal_s : nullptr;
  std::vector<Tensor> items;
  for (int64_t bi = 0; bi < z.size(0); ++bi) {
    Tensor zi = z.select(0, bi).to(options_.device);
    if (zi.dtype() != DType::kF32) zi = ops::cast(zi, DType::kF32);
    zi = pad_by_repeating_last(contiguous_on_device(zi), 1, plan.pad_tokens);
    std::vector<Tensor> pieces;
    Tensor overlap;
    for (int64_t i = 0; i < plan.num_chunks; ++i) {
      const int64_t start = i * chunk;
      const Tensor window = contiguous_on_device(zi.slice(1, start, start + plan.window_tokens));
      const Tensor clip = decode_clip(window, profile);
      ScopedSeconds timing(temporal, options_.device);
      if (profile) ++profile->windows;
      // Frames [pre, chunk_frames) are this window's; the 3 leading ones are pre-padding (§2.8).
      Tensor main = contiguous_on_device(clip.slice(1, pre, pre + plan.main_frames));
      if (overlap.defined()) main = blend(overlap, main, config_.frame_overlap(), 1);
      pieces.push_back(main);
      if (config_.token_drop > 0) {
        const int64_t o0 = std::min(clip.size(1), chunk_frames + pre);
        overlap = contiguous_on_device(clip.slice(1, o0, o0 + plan.overlap_frames));
      }
    }
    ScopedSeconds timing(temporal, options_.device);
    if (overlap.defined() && overlap.size(1) > 0) pieces.push_back(overlap);
    Tensor out = pieces.size() == 1 ? pieces[0] : ops::concat(pieces, 1);
    if (plan.trailing_cut > 0) out = contiguous_on_device(out.slice(1, 0, plan.output_frames));
    if (out.dtype() != out_dtype) out = ops::cast(out, out_dtype);
    items.push_back(out.unsqueeze(0));
  }
  return items.size() == 1 ? items[0] : ops::concat(items, 0);
}

void VideoVae::decode_streaming(const Tensor& z, const FrameSink& sink, VideoDecodeProfile* profile) const {
  check_decode_latents(z, config_);
  H3_CHECK(static_cast<bool>(sink), ErrorCode::kInvalidArgument, "video VAE decode_streaming: no frame sink");
  const TemporalPlan plan = temporal_decode_plan(z.size(2), config_);
  const int64_t chunk = config_.tokens_chunk_size(), pre = config_.frame_pre_padding();
  const int64_t chunk_frames = chunk * config_.temporal_ratio();
  double* temporal = profile ? &profile->temporal_s : nullptr;
  for (int64_t bi = 0; bi < z.size(0); ++bi) {
    Tensor zi = z.select(0, bi).to(options_.device);
    if (zi.dtype() != DType::kF32) zi = ops::cast(zi, DType::kF32);
    zi = pad_by_repeating_last(contiguous_on_device(zi), 1, plan.pad_tokens);
    int64_t emitted = 0;
    if (fused_assembly_enabled()) {
      // Each piece is assembled straight into a float32 tensor (video_vae_assembly.h).
      WindowTail tail;
      for (int64_t i = 0; i < plan.num_chunks; ++i) {
        const int64_t start = i * chunk;
        const Tensor window = contiguous_on_device(zi.slice(1, start, start + plan.window_tokens));
        const Tensor clip = contiguous_on_device(decode_clip(window, profile));
        Tensor piece;
        {
          ScopedSeconds timing(temporal, options_.device);
          if (profile) ++profile->windows;
          const WindowMain w = window_main(clip, tail, plan, config_);
          const int64_t n = std::min(w.frames, plan.output_frames - emitted);
          if (n > 0) {
            piece = Tensor::empty({clip.size(0), n, clip.size(2), clip.size(3)}, DType::kF32, clip.device());
            assemble_main(piece, 0, clip, n, w, tail, config_);
          }
          tail = carried_tail(clip, plan, config_);
        }
        if (piece.defined()) {
          sink(bi, emitted, piece);
          emitted += piece.size(1);
        }
      }
      const int64_t n = std::min(tail.prev_len, plan.output_frames - emitted);
      if (n > 0) {
        Tensor piece = Tensor::empty({tail.prev.size(0), n, tail.prev.size(2), tail.prev.size(3)}, DType::kF32,
                                     tail.prev.device());
        assemble_frames(piece, 0, tail.prev, 0, n, nullptr, 0, {}, {});
        sink(bi, emitted, piece);
      }
      continue;
    }
    // Hands out the part of `piece` before the output length (the padded tail is cut, §2.8).
    auto emit = [&](const Tensor& piece) {
      const int64_t n = std::min(piece.size(1), plan.output_frames - emitted);
      if (n <= 0) return;
      Tensor part = n == piece.size(1) ? piece : contiguous_on_device(piece.slice(1, 0, n));
      if (part.dtype() != DType::kF32) part = ops::cast(part, DType::kF32);
      sink(bi, emitted, part);
      emitted += n;
    };
    Tensor overlap;
    for (int64_t i = 0; i < plan.num_chunks; ++i) {
      const int64_t start = i * chunk;
      const Tensor window = contiguous_on_device(zi.slice(1, start, start + plan.window_tokens));
      const Tensor clip = decode_clip(window, profile);
      Tensor main;
      {
        ScopedSeconds timing(temporal, options_.device);
        if (profile) ++profile->windows;
        main = contiguous_on_device(clip.slice(1, pre, pre + plan.main_frames));
        // Window i's main frames are final once blended with window i-1's tail (§2.8).
        if (overlap.defined()) main = blend(overlap, main, config_.frame_overlap(), 1);
        if (config_.token_drop > 0) {
          const int64_t o0 = std::min(clip.size(1), chunk_frames + pre);
          overlap = contiguous_on_device(clip.slice(1, o0, o0 + plan.overlap_frames));
        }
      }
      emit(main);
    }
    if (overlap.defined() && overlap.size(1) > 0) emit(overlap);
  }
}

// ---- latents ----------------------------------------------------------------------------------------

Tensor VideoVae::normalize_latents(const Tensor& z) const {
  return channel_affine(z, config_.latents_mean, config_.latents_std, true, "normalize_latents");
}

Tensor VideoVae::denormalize_latents(const Tensor& zn) const {
  return channel_affine(zn, config_.latents_mean, config_.latents_std, false, "denormalize_latents");
}

}  // namespace h3::video_vae
