#include "models/video_vae/video_vae_tiling.h"

#include <algorithm>
#include <numeric>

#include "core/status.h"
#include "ops/ops.h"

namespace h3::video_vae {
namespace {

Tensor contiguous_on_device(const Tensor& t) { return t.is_contiguous() ? t : ops::copy(t); }

// Blend weights broadcast over the leading dims of a [..., E, rest...] slice: w[p] repeated over
// the trailing `inner` elements, rounded to `dtype` (the reference builds them in b's dtype).
Tensor weight_tensor(const std::vector<float>& w, const Shape& trailing, DType dtype, Device device) {
  const int64_t inner = shape_numel(trailing) / static_cast<int64_t>(w.size());
  std::vector<float> values(static_cast<size_t>(shape_numel(trailing)));
  for (size_t p = 0; p < w.size(); ++p)
    std::fill_n(values.begin() + static_cast<int64_t>(p) * inner, inner, w[p]);
  return Tensor::from_f32(values, trailing, dtype).to(device);
}

// Rounds to the weight dtype on the host, so that 1 - w is formed from the rounded w.
float round_as(float v, DType dtype) {
  if (dtype == DType::kF16) return round_f16(v);
  if (dtype == DType::kBF16) return round_bf16(v);
  return v;
}

}  // namespace

void TileSettings::validate(int64_t step) const {
  const int64_t v[4] = {tile_height, tile_width, min_overlap_height, min_overlap_width};
  for (int64_t x : v) {
    H3_CHECK(x > 0 && x % step == 0, ErrorCode::kInvalidArgument,
             "video VAE tiling: tile sizes and overlaps must be positive multiples of the spatial "
             "ratio ", step, ", got tile ", tile_height, "x", tile_width, " overlap ",
             min_overlap_height, "x", min_overlap_width);
  }
  H3_CHECK(min_overlap_height < tile_height && min_overlap_width < tile_width,
           ErrorCode::kInvalidArgument, "video VAE tiling: the minimum overlap (", min_overlap_height,
           "x", min_overlap_width, ") must be smaller than the tile (", tile_height, "x", tile_width,
           ")");
}

TileAxis split_tiles(int64_t length, int64_t tile, int64_t min_overlap, int64_t step) {
  H3_CHECK(length > 0 && tile > 0 && step > 0 && min_overlap >= 0 && min_overlap < tile,
           ErrorCode::kInvalidArgument, "split_tiles: need length > 0 and 0 <= min_overlap < tile, got "
           "length ", length, " tile ", tile, " min_overlap ", min_overlap);
  TileAxis a;
  if (tile >= length) {
    a.starts = {0};
    a.lengths = {length};
    return a;
  }
  int64_t n = (length + tile - 1) / tile;
  while (tile * n - min_overlap * (n - 1) < length) ++n;
  a.overlaps.assign(static_cast<size_t>(n - 1), min_overlap);
  const int64_t remaining =
      tile * n - std::accumulate(a.overlaps.begin(), a.overlaps.end(), int64_t{0}) - length;
  for (int64_t i = 0; i < remaining / step; ++i) a.overlaps[static_cast<size_t>(i % (n - 1))] += step;
  a.starts = {0};
  for (int64_t i = 0; i + 1 < n; ++i) a.starts.push_back(a.starts.back() + tile - a.overlaps[i]);
  a.lengths.assign(static_cast<size_t>(n), tile);
  return a;
}

Tensor blend(const Tensor& a, const Tensor& b, int64_t extent, int dim) {
  const int nd = b.dim();
  const int d = dim < 0 ? dim + nd : dim;
  H3_CHECK(a.dim() == nd && d >= 0 && d < nd, ErrorCode::kInvalidArgument, "video VAE blend: ",
           a.desc(), " and ", b.desc(), " along dim ", dim);
  const int64_t e = std::min({a.size(d), b.size(d), extent});
  if (e <= 0) return b;
  const DType dt = b.dtype();
  std::vector<float> wa(static_cast<size_t>(e)), wb(static_cast<size_t>(e));
  for (int64_t p = 0; p < e; ++p) {
    // positions / extent, then 1 - that, each rounded to b's dtype (§2.7).
    wb[p] = round_as(static_cast<float>(p) / static_cast<float>(e), dt);
    wa[p] = round_as(1.0f - wb[p], dt);
  }
  const Tensor a_tail = contiguous_on_device(a.slice(d, a.size(d) - e, a.size(d)));
  const Tensor b_head = contiguous_on_device(b.slice(d, 0, e));
  const Shape trailing(b_head.shape().begin() + d, b_head.shape().end());
  const Tensor w_a = weight_tensor(wa, trailing, dt, b.device());
  const Tensor w_b = weight_tensor(wb, trailing, dt, b.device());
  Tensor a_in = a_tail.dtype() == dt ? a_tail : ops::cast(a_tail, dt);
  const Tensor blended = ops::add(ops::mul(a_in, w_a), ops::mul(b_head, w_b));
  if (e == b.size(d)) return blended;
  return ops::concat({blended, contiguous_on_device(b.slice(d, e, b.size(d)))}, d);
}

Tensor stitch_tiles(const std::vector<std::vector<Tensor>>& tiles,
                    const std::vector<int64_t>& height_overlaps,
                    const std::vector<int64_t>& width_overlaps) {
  H3_CHECK(!tiles.empty() && !tiles[0].empty(), ErrorCode::kInvalidArgument,
           "stitch_tiles: no tiles");
  const size_t rows = tiles.size(), cols = tiles[0].size();
  H3_CHECK(height_overlaps.size() + 1 >= rows && width_overlaps.size() + 1 >= cols,
           ErrorCode::kInvalidArgument, "stitch_tiles: ", rows, "x", cols, " tiles need ", rows - 1,
           " height and ", cols - 1, " width overlaps");
  std::vector<Tensor> result_rows;
  for (size_t i = 0; i < rows; ++i) {
    H3_CHECK(tiles[i].size() == cols, ErrorCode::kInvalidArgument, "stitch_tiles: row ", i, " has ",
             tiles[i].size(), " tiles, row 0 has ", cols);
    std::vector<Tensor> pieces;
    for (size_t j = 0; j < cols; ++j) {
      Tensor tile = tiles[i][j];
      // The neighbours are the raw tiles: the vertical blend first, then the horizontal (§2.7).
      if (i > 0) tile = blend(tiles[i - 1][j], tile, height_overlaps[i - 1], -2);
      if (j > 0) tile = blend(tiles[i][j - 1], tile, width_overlaps[j - 1], -1);
      if (i + 1 < rows) tile = tile.slice(-2 + tile.dim(), 0, tile.size(-2) - height_overlaps[i]);
      if (j + 1 < cols) tile = tile.slice(-1 + tile.dim(), 0, tile.size(-1) - width_overlaps[j]);
      pieces.push_back(contiguous_on_device(tile));
    }
    result_rows.push_back(pieces.size() == 1 ? pieces[0] : ops::concat(pieces, -1));
  }
  return result_rows.size() == 1 ? result_rows[0] : ops::concat(result_rows, -2);
}

TemporalPlan temporal_decode_plan(int64_t latent_frames, const VideoVaeConfig& c) {
  H3_CHECK(latent_frames >= 1, ErrorCode::kInvalidArgument,
           "video VAE decode: need at least one latent frame, got ", latent_frames);
  const int64_t chunk = c.tokens_chunk_size(), ratio = c.temporal_ratio();
  const int64_t pre = c.frame_pre_padding();
  const bool drops = c.token_drop > 0;
  TemporalPlan p;
  const int64_t num_tokens = latent_frames + c.token_drop;
  p.pad_tokens = ((-num_tokens) % chunk + chunk) % chunk;
  p.num_chunks = (num_tokens + p.pad_tokens) / chunk - (drops ? 1 : 0);
  if (p.num_chunks < 1) {
    p.pad_tokens += chunk;
    p.num_chunks = 1;
  }
  p.window_tokens = chunk + c.token_overlap();
  p.window_frames = p.window_tokens * ratio;
  const int64_t chunk_frames = chunk * ratio;
  p.main_frames = std::max<int64_t>(std::min(chunk_frames, p.window_frames) - pre, 0);
  if (drops) {
    const int64_t second = std::max<int64_t>(std::min(p.window_frames, 2 * chunk_frames) - chunk_frames, 0);
    p.overlap_frames = std::max<int64_t>(second - pre, 0);
  }
  if (p.pad_tokens > 0) {
    // A clip's last latent frame covers clip_length % ratio pixel frames, the others `ratio`.
    const int64_t intra_tail = c.clip_length % ratio;
    for (int64_t k = 0; k < p.pad_tokens; ++k)
      p.trailing_cut += (intra_tail && (latent_frames + k) % chunk == 0) ? intra_tail : ratio;
  }
  const int64_t total = p.num_chunks * p.main_frames + (drops ? p.overlap_frames : 0);
  p.output_frames = std::max<int64_t>(total - p.trailing_cut, 0);
  return p;
}

}  // namespace h3::video_vae
