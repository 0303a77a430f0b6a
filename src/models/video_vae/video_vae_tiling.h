// Spatial tiling and temporal windowing of the video VAE (h3_components_spec.md §2.7, §2.8; the
// golden README's "Released VAE tiling"): where tiles start, how much neighbours overlap, how
// overlapping tiles and windows are cross-faded, and how many frames a latent length decodes to.
//
// The layout functions are pure integer arithmetic (exact parity with the reference's
// `_split_tiles` and `_decode` bookkeeping). blend() and stitch_tiles() compose ops/ops.h, so they
// run on the device of their inputs and round where the reference rounds: every weight and
// product in the dtype of the incoming tile (float16 under the decode autocast, float32 otherwise).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/video_vae/video_vae_config.h"

namespace h3::video_vae {

// Pixel-space tile geometry (the reference's `tile_sample_min_*`; released 256 / 64).
struct TileSettings {
  int64_t tile_height = 256;
  int64_t tile_width = 256;
  int64_t min_overlap_height = 64;
  int64_t min_overlap_width = 64;
  // Throws kInvalidArgument unless tiles and overlaps are positive multiples of `step` (the
  // spatial ratio, so tile edges stay on the latent grid) and each overlap is below its tile.
  void validate(int64_t step) const;
};

// One axis of a tiling, in pixels: tile i covers [starts[i], starts[i] + lengths[i]) (clipped to
// the axis by the caller, as Python slicing does), overlaps[i] is shared by tiles i and i+1.
struct TileAxis {
  std::vector<int64_t> starts;
  std::vector<int64_t> lengths;
  std::vector<int64_t> overlaps;
};

// `_split_tiles` (§2.7): one tile when it covers the axis; otherwise the fewest tiles whose union
// covers `length` with every overlap >= min_overlap, the slack distributed round-robin over the
// overlaps in whole `step` (spatial ratio) increments. 768 -> starts (0,160,336,512), overlaps
// (96,80,80); 1344 -> 7 tiles; 384 -> (0,128)/(128); 640 -> (0,192,384)/(64,64).
TileAxis split_tiles(int64_t length, int64_t tile, int64_t min_overlap, int64_t step);

// `_blend` (§2.7): the first E = min(|a|, |b|, extent) slices of b along `dim` are replaced by
// a[last E]*(1 - p/E) + b[first E]*(p/E), p = 0..E-1, all in b's dtype; the rest of b follows.
// a and b must match outside `dim`; `dim` may be negative.
Tensor blend(const Tensor& a, const Tensor& b, int64_t extent, int dim);

// `_stitch_tiles` (§2.7): tiles[r][c] are [..., h, w]. Each tile is blended with the raw tile
// above (height overlap, dim -2) and then with the raw tile to its left (dim -1), cropped by its
// own trailing overlaps unless it is last in its row/column, and the pieces are concatenated.
Tensor stitch_tiles(const std::vector<std::vector<Tensor>>& tiles,
                    const std::vector<int64_t>& height_overlaps,
                    const std::vector<int64_t>& width_overlaps);

// `_decode` bookkeeping (§2.8) for `latent_frames` latent frames.
struct TemporalPlan {
  int64_t pad_tokens = 0;      // latent frames appended by repeating the last one
  int64_t num_chunks = 0;      // decoder windows
  int64_t window_tokens = 0;   // latent frames per window (tokens_chunk_size + token_overlap = 7)
  int64_t window_frames = 0;   // pixel frames a window decodes to (28)
  int64_t main_frames = 0;     // frames kept from the front part of a window (17)
  int64_t overlap_frames = 0;  // frames carried to the next window / emitted at the end (5)
  int64_t trailing_cut = 0;    // frames of the padded tail removed at the end
  int64_t output_frames = 0;   // frames decode() returns (17n + 5 for 5n + 2 latents)
};
// The reference needs at least one full window; below that (1 or 2 latent frames) this pads by
// one more chunk, as FastVideo's `_temporal_decode_plan` does, so short inputs decode too.
TemporalPlan temporal_decode_plan(int64_t latent_frames, const VideoVaeConfig& config);

}  // namespace h3::video_vae
