#include "pipeline/packing.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "pipeline/geometry.h"

// Positions are float64 products and sums that NumPy and PyTorch round one by one; a fused
// multiply-add would change last bits, which the golden layouts compare exactly.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace h3::pipeline {

namespace {

// h3_dit_spec.md §4.2: one latent frame spans (5/3)·(1,4,4,4,4)[i mod 5] units of 1/40 s.
constexpr double kFrameRescale = 5.0 / 3.0;
constexpr int64_t kFramesPerLatent[5] = {1, 4, 4, 4, 4};
constexpr double kSpatialScale = 32.0;

double frame_span(int64_t i) {
  return kFrameRescale * static_cast<double>(kFramesPerLatent[i % 5]);
}

// numpy/core/src/umath/loops_utils.h pairwise_sum: below 8 sequential, up to 128 eight
// interleaved accumulators then the tail, above that split at a multiple of 8 and recurse.
double pairwise(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise(a, n2) + pairwise(a + n2, n - n2);
}

void check_grid(const LatentGrid& g, const char* what) {
  H3_CHECK(g.frames > 0 && g.height > 0 && g.width > 0, ErrorCode::kInvalidArgument, what,
           " latent grid must be positive, got ", g.frames, "x", g.height, "x", g.width);
  H3_CHECK(g.frames % kPatchT == 0 && g.height % kPatchH == 0 && g.width % kPatchW == 0,
           ErrorCode::kInvalidArgument, what, " latent grid ", g.frames, "x", g.height, "x",
           g.width, " is not divisible by the patch (", kPatchT, ", ", kPatchH, ", ", kPatchW, ")");
}

void check_text_tags(const std::vector<int64_t>& tags) {
  for (size_t i = 0; i < tags.size(); ++i) {
    H3_CHECK(tags[i] == kTagText || tags[i] == kTagVideo, ErrorCode::kInvalidArgument,
             "text token tag ", i, " is ", tags[i],
             "; the text stream may hold only text (1) and vision (0) tags");
  }
}

// The (h, w) pairs of one latent frame, "ij" meshgrid flattened h-major, plus the width grid
// (audio rows sit at its first and last column).
struct FrameGrid {
  std::vector<double> h;  // per row of the frame
  std::vector<double> w;
  std::vector<double> width_grid;
};

FrameGrid frame_grid(const LatentGrid& g) {
  const double sqrt_area = std::sqrt(static_cast<double>(g.height * g.width));
  const std::vector<double> hg = spatial_position_grid(g.height, kPatchH, sqrt_area);
  FrameGrid out;
  out.width_grid = spatial_position_grid(g.width, kPatchW, sqrt_area);
  out.h.reserve(hg.size() * out.width_grid.size());
  out.w.reserve(hg.size() * out.width_grid.size());
  for (double hv : hg) {
    for (double wv : out.width_grid) {
      out.h.push_back(hv);
      out.w.push_back(wv);
    }
  }
  return out;
}

// Builder over the (S, 3) float64 positions; rows not written stay 0 (text h/w, audio h).
class LayoutWriter {
 public:
  LayoutWriter(int64_t sequence_length, const std::vector<int64_t>& text_tags)
      : s_(sequence_length),
        pos_(Tensor::zeros({sequence_length, 3}, DType::kF64)),
        tags_(Tensor::empty({sequence_length}, DType::kI64)) {
    double* p = pos_.data<double>();
    int64_t* t = tags_.data<int64_t>();
    for (int64_t i = 0; i < s_; ++i) t[i] = -1;
    for (size_t i = 0; i < text_tags.size(); ++i) {
      p[3 * i] = static_cast<double>(i);
      t[i] = text_tags[i];
    }
  }

  // Audio rows [start, start + 2N): time τ + n for both channels, h = 0, w = first / last column
  // of the width grid (h3_dit_spec.md §4.2 `_fill_audio_positions`).
  void audio(int64_t start, int64_t n, double time, const std::vector<double>& width_grid) {
    double* p = pos_.data<double>();
    int64_t* t = tags_.data<int64_t>();
    for (int64_t ch = 0; ch < kAudioChannels; ++ch) {
      const double w = ch == 0 ? width_grid.front() : width_grid.back();
      for (int64_t k = 0; k < n; ++k) {
        const int64_t r = start + ch * n + k;
        p[3 * r] = time + static_cast<double>(k);
        p[3 * r + 1] = 0.0;
        p[3 * r + 2] = w;
        t[r] = kTagAudio;
      }
    }
    append_range(&audio_idx_, start, start + kAudioChannels * n);
  }

  // Video rows of `frames` frames starting at row `start`, frame f at times[f].
  void video(int64_t start, const std::vector<double>& times, const FrameGrid& grid) {
    double* p = pos_.data<double>();
    int64_t* t = tags_.data<int64_t>();
    const int64_t per_frame = static_cast<int64_t>(grid.h.size());
    for (size_t f = 0; f < times.size(); ++f) {
      for (int64_t i = 0; i < per_frame; ++i) {
        const int64_t r = start + static_cast<int64_t>(f) * per_frame + i;
        p[3 * r] = times[f];
        p[3 * r + 1] = grid.h[static_cast<size_t>(i)];
        p[3 * r + 2] = grid.w[static_cast<size_t>(i)];
        t[r] = kTagVideo;
      }
    }
    append_range(&video_idx_, start, start + static_cast<int64_t>(times.size()) * per_frame);
  }

  PackedLayout finish(int64_t num_text_rows) {
    const int64_t* t = tags_.data<int64_t>();
    for (int64_t i = 0; i < s_; ++i) H3_ASSERT(t[i] >= 0);
    H3_ASSERT(num_text_rows + static_cast<int64_t>(video_idx_.size() + audio_idx_.size()) == s_);
    PackedLayout out;
    out.sequence_length = s_;
    out.num_text_rows = num_text_rows;
    out.position_ids = pos_;
    out.token_tags = tags_;
    out.video_indices = Tensor::from_i64(video_idx_, {static_cast<int64_t>(video_idx_.size())});
    out.audio_indices = Tensor::from_i64(audio_idx_, {static_cast<int64_t>(audio_idx_.size())});
    std::vector<int64_t> text(static_cast<size_t>(num_text_rows));
    for (int64_t i = 0; i < num_text_rows; ++i) text[static_cast<size_t>(i)] = i;
    out.text_indices = Tensor::from_i64(text, {num_text_rows});
    return out;
  }

 private:
  static void append_range(std::vector<int64_t>* v, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) v->push_back(i);
  }
  int64_t s_;
  Tensor pos_;
  Tensor tags_;
  std::vector<int64_t> video_idx_;
  std::vector<int64_t> audio_idx_;
};

}  // namespace

// ---- coordinate helpers ----------------------------------------------------------------------

std::vector<double> spatial_position_grid(int64_t dim, int64_t patch, double sqrt_area) {
  H3_CHECK(dim > 0 && patch > 0 && sqrt_area > 0, ErrorCode::kInvalidArgument, "spatial grid: dim ",
           dim, ", patch ", patch, " and sqrt(area) ", sqrt_area, " must be positive");
  const double ratio = static_cast<double>(dim) / sqrt_area;
  const double left = (1.0 - ratio) / 2.0;
  const double right = left + ratio;
  const int64_t num = dim / patch;
  // np.linspace(left, right, num, endpoint=False): step = (right - left) / num, y = i*step + left.
  const double step = (right - left) / static_cast<double>(num);
  std::vector<double> out(static_cast<size_t>(num));
  for (int64_t i = 0; i < num; ++i) {
    const double y = static_cast<double>(i) * step;
    out[static_cast<size_t>(i)] = (y + left) * kSpatialScale;
  }
  return out;
}

std::vector<double> temporal_position_grid(int64_t latent_frames, double origin) {
  H3_CHECK(latent_frames >= 0, ErrorCode::kInvalidArgument,
           "temporal grid: latent frame count must be non-negative, got ", latent_frames);
  std::vector<double> out(static_cast<size_t>(latent_frames));
  double cum = 0.0;  // torch.cumsum over float64: sequential
  for (int64_t i = 0; i < latent_frames; ++i) {
    out[static_cast<size_t>(i)] = origin + cum;
    cum += frame_span(i);
  }
  return out;
}

double numpy_pairwise_sum(const double* values, int64_t n) {
  // add.reduce starts from the identity 0 and adds the pairwise sum of all n values.
  return 0.0 + pairwise(values, n);
}

double temporal_position_span_pairwise(int64_t latent_frames) {
  std::vector<double> spans(static_cast<size_t>(latent_frames));
  for (int64_t i = 0; i < latent_frames; ++i) spans[static_cast<size_t>(i)] = frame_span(i);
  return numpy_pairwise_sum(spans.data(), latent_frames);
}

double temporal_position_span_sequential(int64_t latent_frames) {
  double sum = 0.0;
  for (int64_t i = 0; i < latent_frames; ++i) sum += frame_span(i);
  return sum;
}

// ---- T2VA / FL2VA (h3_dit_spec.md §4.3-4.4) --------------------------------------------------

PackedLayout build_packed_sequence(const std::vector<int64_t>& text_tags, const LatentGrid& target,
                                   int64_t audio_latents,
                                   const std::vector<KeyframeAnchor>& anchors) {
  check_text_tags(text_tags);
  check_grid(target, "target video");
  H3_CHECK(audio_latents > 0, ErrorCode::kInvalidArgument,
           "audio latent count must be positive, got ", audio_latents);
  H3_CHECK(anchors.size() <= 2, ErrorCode::kInvalidArgument,
           "at most two keyframes (first, last), got ", anchors.size());

  const int64_t n_text = static_cast<int64_t>(text_tags.size());
  const int64_t per_frame = target.rows_per_frame();
  const int64_t n_cond = static_cast<int64_t>(anchors.size()) * per_frame;
  const int64_t n_audio = kAudioChannels * audio_latents;
  const int64_t audio_start = n_text + n_cond;
  const int64_t video_start = audio_start + n_audio;
  const int64_t s = video_start + target.rows();

  LayoutWriter w(s, text_tags);
  const FrameGrid grid = frame_grid(target);
  const double text_clock = static_cast<double>(n_text);
  for (size_t k = 0; k < anchors.size(); ++k) {
    double time = text_clock;
    if (anchors[k] == KeyframeAnchor::kLast) {
      // The last pixel frame: N_t + Σspans (NumPy pairwise) - 5/3, evaluated left to right.
      time = text_clock + temporal_position_span_pairwise(target.frames) - kFrameRescale;
    }
    w.video(n_text + static_cast<int64_t>(k) * per_frame, {time}, grid);
  }
  w.audio(audio_start, audio_latents, text_clock, grid.width_grid);
  w.video(video_start, temporal_position_grid(target.frames / kPatchT, text_clock), grid);

  PackedLayout out = w.finish(n_text);
  out.num_condition_video_rows = n_cond;
  out.num_condition_audio_rows = 0;
  out.target = target;
  out.audio_latents = audio_latents;
  return out;
}

// ---- Ref2VA (h3_dit_spec.md §4.5) ------------------------------------------------------------

const char* reference_kind_name(ReferenceKind kind) {
  switch (kind) {
    case ReferenceKind::kImage:
      return "image";
    case ReferenceKind::kVideo:
      return "video";
    case ReferenceKind::kAudio:
      return "audio";
  }
  return "unknown";
}

void check_reference_counts(const std::vector<ReferenceKind>& kinds) {
  int64_t images = 0;
  int64_t videos = 0;
  int64_t audios = 0;
  for (ReferenceKind k : kinds) {
    images += k == ReferenceKind::kImage;
    videos += k == ReferenceKind::kVideo;
    audios += k == ReferenceKind::kAudio;
  }
  const int64_t total = static_cast<int64_t>(kinds.size());
  H3_CHECK(total >= 1, ErrorCode::kInvalidArgument, "ref2va needs at least one reference");
  H3_CHECK(total <= 12, ErrorCode::kInvalidArgument, "ref2va takes at most 12 references, got ",
           total);
  H3_CHECK(images <= 9, ErrorCode::kInvalidArgument,
           "ref2va takes at most 9 image references, got ", images);
  H3_CHECK(videos <= 3, ErrorCode::kInvalidArgument,
           "ref2va takes at most 3 video references, got ", videos);
  H3_CHECK(audios <= 3, ErrorCode::kInvalidArgument,
           "ref2va takes at most 3 audio references, got ", audios);
  H3_CHECK(images + videos >= 1, ErrorCode::kInvalidArgument,
           "ref2va needs at least one image or video reference (audio-only is not supported)");
}

PackedLayout build_ref2va_packed_sequence(const std::vector<int64_t>& text_tags,
                                          const std::vector<ReferenceLayout>& references,
                                          const LatentGrid& target, int64_t audio_latents) {
  check_text_tags(text_tags);
  check_grid(target, "target video");
  H3_CHECK(audio_latents > 0, ErrorCode::kInvalidArgument,
           "audio latent count must be positive, got ", audio_latents);
  std::vector<ReferenceKind> kinds;
  for (const ReferenceLayout& r : references) kinds.push_back(r.kind);
  check_reference_counts(kinds);

  const int64_t n_text = static_cast<int64_t>(text_tags.size());
  int64_t s = n_text;
  int64_t n_cond_video = 0;
  int64_t n_cond_audio = 0;
  for (size_t i = 0; i < references.size(); ++i) {
    const ReferenceLayout& r = references[i];
    const std::string what = str_cat("reference ", i, " (", reference_kind_name(r.kind), ")");
    if (r.kind == ReferenceKind::kAudio) {
      H3_CHECK(r.audio_latents > 0, ErrorCode::kInvalidArgument, what,
               " needs a positive audio latent count, got ", r.audio_latents);
    } else {
      check_grid(r.grid, what.c_str());
      H3_CHECK(r.kind != ReferenceKind::kImage || r.grid.frames == 1, ErrorCode::kInvalidArgument,
               what, " must have one latent frame, got ", r.grid.frames);
      H3_CHECK(r.audio_latents >= 0 && (r.kind == ReferenceKind::kVideo || r.audio_latents == 0),
               ErrorCode::kInvalidArgument, what, " has an invalid audio latent count ",
               r.audio_latents);
      n_cond_video += r.grid.rows();
    }
    n_cond_audio += kAudioChannels * r.audio_latents;
  }
  s += n_cond_video + n_cond_audio + kAudioChannels * audio_latents + target.rows();

  LayoutWriter w(s, text_tags);
  const FrameGrid target_grid = frame_grid(target);
  int64_t cursor = n_text;
  double clock = static_cast<double>(n_text);
  for (const ReferenceLayout& r : references) {
    switch (r.kind) {
      case ReferenceKind::kImage: {
        w.video(cursor, {clock}, frame_grid(r.grid));
        cursor += r.grid.rows();
        clock += 1.0;
        break;
      }
      case ReferenceKind::kAudio: {
        // A standalone audio reference sits on the target's width grid.
        w.audio(cursor, r.audio_latents, clock, target_grid.width_grid);
        cursor += kAudioChannels * r.audio_latents;
        clock += static_cast<double>(r.audio_latents);
        break;
      }
      case ReferenceKind::kVideo: {
        const FrameGrid grid = frame_grid(r.grid);
        if (r.audio_latents > 0) {
          // A soundtrack sits on the reference's own width grid, before its video rows.
          w.audio(cursor, r.audio_latents, clock, grid.width_grid);
          cursor += kAudioChannels * r.audio_latents;
        }
        w.video(cursor, temporal_position_grid(r.grid.frames / kPatchT, clock), grid);
        cursor += r.grid.rows();
        // The specs describe a sequential sum here, but the golden `layouts` case (17 latent
        // frames: 93.33333333333334 pairwise vs ...357 sequential) shows the reference advancing
        // the clock by the same NumPy pairwise span as the FL2VA "last" anchor. Golden data wins.
        clock += std::max(static_cast<double>(r.audio_latents),
                          temporal_position_span_pairwise(r.grid.frames));
        break;
      }
    }
  }
  w.audio(cursor, audio_latents, clock, target_grid.width_grid);
  cursor += kAudioChannels * audio_latents;
  w.video(cursor, temporal_position_grid(target.frames / kPatchT, clock), target_grid);

  PackedLayout out = w.finish(n_text);
  out.num_condition_video_rows = n_cond_video;
  out.num_condition_audio_rows = n_cond_audio;
  out.target = target;
  out.audio_latents = audio_latents;
  return out;
}

// ---- per-step timesteps ----------------------------------------------------------------------

RowTimesteps build_row_timesteps(const PackedLayout& layout, float video_t, float audio_t,
                                 float cond_video_t, float cond_audio_t) {
  const int64_t s = layout.sequence_length;
  H3_CHECK(layout.token_tags.defined() && layout.token_tags.numel() == s,
           ErrorCode::kInvalidArgument, "row timesteps: layout is empty or inconsistent");
  std::vector<float> row(static_cast<size_t>(s), video_t);
  const std::vector<int64_t> vid = layout.video_indices.to_i64_vector();
  const std::vector<int64_t> aud = layout.audio_indices.to_i64_vector();
  H3_CHECK(layout.num_condition_video_rows <= static_cast<int64_t>(vid.size()) &&
               layout.num_condition_audio_rows <= static_cast<int64_t>(aud.size()),
           ErrorCode::kInvalidArgument, "row timesteps: condition row counts exceed the indices");
  for (size_t i = 0; i < vid.size(); ++i) {
    if (static_cast<int64_t>(i) < layout.num_condition_video_rows) {
      row[static_cast<size_t>(vid[i])] = cond_video_t;
    }
  }
  for (size_t i = 0; i < aud.size(); ++i) {
    row[static_cast<size_t>(aud[i])] =
        static_cast<int64_t>(i) < layout.num_condition_audio_rows ? cond_audio_t : audio_t;
  }
  // torch.unique(sorted=True, return_inverse=True).
  std::vector<float> uniq = row;
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  std::vector<int64_t> inverse(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) {
    const auto it = std::lower_bound(uniq.begin(), uniq.end(), row[static_cast<size_t>(i)]);
    inverse[static_cast<size_t>(i)] = it - uniq.begin();
  }
  RowTimesteps out;
  out.unique = Tensor::from_f32(uniq, {static_cast<int64_t>(uniq.size())});
  out.indices = Tensor::from_i64(inverse, {s});
  return out;
}

RowTimesteps plan_step_timesteps(const PackedLayout& layout, float video_t, float audio_t) {
  // max(float(t), 0.999) in Python float64, then stored into a float32 row vector.
  const double cond = std::max(static_cast<double>(video_t), 0.999);
  return build_row_timesteps(layout, video_t, audio_t, static_cast<float>(cond), 1.0f);
}

Tensor adaln_row_indices(const RowTimesteps& plan, const PackedLayout& layout) {
  const std::vector<int64_t> idx = plan.indices.to_i64_vector();
  const std::vector<int64_t> tags = layout.token_tags.to_i64_vector();
  H3_CHECK(idx.size() == tags.size(), ErrorCode::kInvalidArgument, "AdaLN indices: ", idx.size(),
           " timestep indices for ", tags.size(), " rows");
  std::vector<int64_t> out(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) out[i] = idx[i] * kNumTags + tags[i];
  return Tensor::from_i64(out, {static_cast<int64_t>(out.size())});
}

// ---- data movement (h3_dit_spec.md §2.2) -----------------------------------------------------

Tensor patchify_video(const Tensor& latents) {
  H3_CHECK(latents.dim() == 5 && latents.size(0) == 1, ErrorCode::kInvalidArgument,
           "patchify: expected a [1, C, F, H, W] latent, got ", latents.desc());
  const int64_t c = latents.size(1);
  const LatentGrid g{latents.size(2), latents.size(3), latents.size(4)};
  check_grid(g, "patchify");
  // [1, C, F/pt, pt, H/ph, ph, W/pw, pw] -> (F', H', W', C, pt, ph, pw): channel-major features.
  return latents
      .reshape({1, c, g.frames / kPatchT, kPatchT, g.height / kPatchH, kPatchH, g.width / kPatchW,
                kPatchW})
      .permute({0, 2, 4, 6, 1, 3, 5, 7})
      .contiguous()
      .view({g.rows(), c * kPatchT * kPatchH * kPatchW});
}

Tensor unpatchify_video(const Tensor& rows, int64_t channels, const LatentGrid& grid) {
  check_grid(grid, "unpatchify");
  const int64_t feat = channels * kPatchT * kPatchH * kPatchW;
  H3_CHECK(channels > 0 && rows.dim() == 2 && rows.size(0) == grid.rows() && rows.size(1) == feat,
           ErrorCode::kInvalidArgument, "unpatchify: expected rows [", grid.rows(), ", ", feat,
           "], got ", rows.desc());
  return rows
      .reshape({1, grid.frames / kPatchT, grid.height / kPatchH, grid.width / kPatchW, channels,
                kPatchT, kPatchH, kPatchW})
      .permute({0, 4, 1, 5, 2, 6, 3, 7})
      .contiguous()
      .view({1, channels, grid.frames, grid.height, grid.width});
}

Tensor pack_audio_rows(const Tensor& latents) {
  H3_CHECK(latents.dim() == 3 && latents.size(0) == kAudioChannels, ErrorCode::kInvalidArgument,
           "audio rows: expected a [2, C, N] stereo latent, got ", latents.desc());
  const int64_t c = latents.size(1);
  const int64_t n = latents.size(2);
  return latents.permute({0, 2, 1}).contiguous().view({kAudioChannels * n, c});
}

Tensor unpack_audio_rows(const Tensor& rows, int64_t audio_latents) {
  H3_CHECK(audio_latents > 0 && rows.dim() == 2 && rows.size(0) == kAudioChannels * audio_latents,
           ErrorCode::kInvalidArgument, "audio rows: expected [", kAudioChannels * audio_latents,
           ", C] rows, got ", rows.desc());
  const int64_t c = rows.size(1);
  return rows.reshape({kAudioChannels, audio_latents, c}).permute({0, 2, 1}).contiguous();
}

}  // namespace h3::pipeline
