// The packed sequence the DiT runs over: row order, float64 RoPE positions, modality tags, the
// index tensors that scatter each modality, per-step row timesteps, and the patchify / audio-row
// data movement (h3_dit_spec.md §2.2, §3.3, §4; golden README "Pipeline facts" 3-5).
//
// Everything here is computed from geometry alone (text rows, latent grids, audio latent counts),
// never from media, and reproduces the reference bit for bit: positions in float64 with NumPy's
// linspace and pairwise-summation semantics, timesteps in float32.
//
// Row orders:
//   T2VA / FL2VA: [text | keyframe rows (first, then last) | target audio | target video]
//   Ref2VA:       [text | per reference: image -> video rows, audio -> audio rows,
//                                        video -> soundtrack rows then video rows
//                 | target audio | target video]
// Video rows of a latent [1, C, F, H, W] are (frame, patch-row, patch-col) in raster order with
// channel-major features (c, pt, ph, pw); audio rows are channel-major (row = ch*N + n).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::pipeline {

// Modality tags of packed rows (h3_dit_spec.md §4.6); AdaLN row = timestep_index*3 + tag.
inline constexpr int64_t kTagVideo = 0;
inline constexpr int64_t kTagText = 1;
inline constexpr int64_t kTagAudio = 2;
inline constexpr int64_t kNumTags = 3;

// The DiT patch (pt, ph, pw) = (1, 2, 2); Ref2VA requires exactly this patch.
inline constexpr int64_t kPatchT = 1;
inline constexpr int64_t kPatchH = 2;
inline constexpr int64_t kPatchW = 2;
inline constexpr int64_t kLatentChannels = 24;
inline constexpr int64_t kAudioLatentChannels = 32;

// One visual latent grid: latent frames, height and width (multiples of the patch).
struct LatentGrid {
  int64_t frames = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t rows_per_frame() const { return (height / kPatchH) * (width / kPatchW); }
  int64_t rows() const { return (frames / kPatchT) * rows_per_frame(); }
};

enum class KeyframeAnchor { kFirst, kLast };

struct PackedLayout {
  int64_t sequence_length = 0;
  int64_t num_text_rows = 0;
  Tensor position_ids;   // f64 [S, 3]: (t, h, w)
  Tensor token_tags;     // i64 [S]
  Tensor video_indices;  // i64 [N_vrows]: condition rows first, then target rows
  Tensor audio_indices;  // i64 [N_arows]: reference audio rows first, then target rows
  Tensor text_indices;   // i64 [N_text] = 0..N_text-1
  int64_t num_condition_video_rows = 0;
  int64_t num_condition_audio_rows = 0;
  LatentGrid target;          // the generated video's latent grid
  int64_t audio_latents = 0;  // N_a of the generated audio
};

// ---- coordinate helpers (h3_dit_spec.md §4.2) -------------------------------------------------

// np.linspace(l, l + D/A, D // patch, endpoint=False) * 32 with A = sqrt_area, l = (1 - D/A)/2.
std::vector<double> spatial_position_grid(int64_t dim, int64_t patch, double sqrt_area);
// origin + [0, cumsum(spans)[:-1]] with spans (5/3)*(1,4,4,4,4)[i mod 5], float64, sequential.
std::vector<double> temporal_position_grid(int64_t latent_frames, double origin);
// Σ spans with NumPy's pairwise summation: the FL2VA "last" anchor and the Ref2VA clock advance
// of a video reference (the golden layouts show pairwise there too, not the sequential sum the
// specs describe; they differ in the last ulp from 16 latent frames on).
double temporal_position_span_pairwise(int64_t latent_frames);
// Σ spans summed sequentially from 0 (Python `sum`), kept to show where the two orders differ.
double temporal_position_span_sequential(int64_t latent_frames);
// numpy.add.reduce over a contiguous float64 array: blocks of 8 accumulators, recursive halving
// above 128 elements.
double numpy_pairwise_sum(const double* values, int64_t n);

// ---- layouts ---------------------------------------------------------------------------------

// T2VA (no anchors) and FL2VA (anchors in order, each one frame of target rows). text_tags are
// the conditioner's per-token tags (1 text, 0 vision placeholder); any other tag is an error.
PackedLayout build_packed_sequence(const std::vector<int64_t>& text_tags, const LatentGrid& target,
                                   int64_t audio_latents,
                                   const std::vector<KeyframeAnchor>& anchors = {});

enum class ReferenceKind { kImage, kVideo, kAudio };
const char* reference_kind_name(ReferenceKind kind);

// Geometry of one prepared Ref2VA reference.
struct ReferenceLayout {
  ReferenceKind kind = ReferenceKind::kImage;
  LatentGrid grid;            // image: frames = 1; audio: unused
  int64_t audio_latents = 0;  // audio: its latents; video: its soundtrack's (0 = no soundtrack)
};

// Ref2VA limits (h3_dit_spec.md §4.5): 1..12 references, at most 9 images, 3 videos, 3 audios,
// not audio-only. Throws kInvalidArgument naming the count that is over.
void check_reference_counts(const std::vector<ReferenceKind>& kinds);

PackedLayout build_ref2va_packed_sequence(const std::vector<int64_t>& text_tags,
                                          const std::vector<ReferenceLayout>& references,
                                          const LatentGrid& target, int64_t audio_latents);

// ---- per-step timesteps (h3_dit_spec.md §3.3) ------------------------------------------------

struct RowTimesteps {
  Tensor unique;   // f32 [N_u], sorted ascending, distinct
  Tensor indices;  // i64 [S], per row: index into `unique`
};

// Text and target video rows get video_t, target audio rows audio_t, condition video rows
// cond_video_t, reference audio rows cond_audio_t; then unique(sorted, return_inverse).
RowTimesteps build_row_timesteps(const PackedLayout& layout, float video_t, float audio_t,
                                 float cond_video_t, float cond_audio_t);
// The pipeline's plan for one step: cond_video_t = f32(max(video_t, 0.999)), cond_audio_t = 1.
RowTimesteps plan_step_timesteps(const PackedLayout& layout, float video_t, float audio_t);
// AdaLN table rows: indices[i]*3 + token_tags[i] (i64 [S]).
Tensor adaln_row_indices(const RowTimesteps& plan, const PackedLayout& layout);

// ---- data movement ---------------------------------------------------------------------------

// [1, C, F, H, W] float32 -> [F*(H/2)*(W/2), C*4] rows (channel-major features).
Tensor patchify_video(const Tensor& latents);
// Inverse of patchify_video: rows [grid.rows(), C*4] -> [1, C, F, H, W].
Tensor unpatchify_video(const Tensor& rows, int64_t channels, const LatentGrid& grid);
// [2, C, N] stereo latents -> [2N, C] rows (row = ch*N + n).
Tensor pack_audio_rows(const Tensor& latents);
// [2N, C] rows -> [2, C, N] latents.
Tensor unpack_audio_rows(const Tensor& rows, int64_t audio_latents);

}  // namespace h3::pipeline
