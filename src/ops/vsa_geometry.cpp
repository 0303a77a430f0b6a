// VSA-H3 tiling metadata and top-k selection (h3_dit_spec.md §5.2, §5.4).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/status.h"
#include "ops/vsa.h"

namespace h3::ops {

std::vector<int64_t> VsaGeometry::tile_starts() const {
  std::vector<int64_t> starts(tile_sizes.size() + 1, 0);
  for (size_t i = 0; i < tile_sizes.size(); ++i) starts[i + 1] = starts[i] + tile_sizes[i];
  return starts;
}

std::string VsaGeometry::summary() const {
  int64_t vmin = 0, vmax = 0, full = 0;
  for (int64_t t = num_prefix_tiles; t < num_tiles(); ++t) {
    const int64_t s = tile_sizes[t];
    vmin = (t == num_prefix_tiles) ? s : std::min(vmin, s);
    vmax = std::max(vmax, s);
    if (s == tile_size) ++full;
  }
  return str_cat("tile ", tile_size, " (", tile_shape[0], ",", tile_shape[1], ",", tile_shape[2],
                 "): ", num_prefix_tiles, " prefix + ", num_video_tiles, " video tiles = ",
                 num_tiles(), ", padded length ", padded_length(), ", rows ", seq_len,
                 ", video tile sizes ", vmin, "..", vmax, " (", full, " full)");
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

VsaGeometry build_vsa_geometry(int tile_size, const std::vector<int64_t>& prefix_segments,
                               const int64_t grid[3], int64_t seq_len) {
  H3_CHECK(tile_size == 64 || tile_size == 256, ErrorCode::kInvalidArgument,
           "VSA tile size must be 64 or 256, got ", tile_size);
  VsaGeometry g;
  g.tile_size = tile_size;
  const int shape64[3] = {4, 4, 4};
  const int shape256[3] = {4, 8, 8};
  for (int a = 0; a < 3; ++a) g.tile_shape[a] = tile_size == 64 ? shape64[a] : shape256[a];
  for (int a = 0; a < 3; ++a) {
    H3_CHECK(grid[a] >= 0, ErrorCode::kInvalidArgument, "VSA video grid axis ", a,
             " is negative (", grid[a], ")");
    g.grid[a] = grid[a];
  }
  int64_t prefix_rows = 0;
  for (int64_t s : prefix_segments) {
    H3_CHECK(s >= 0, ErrorCode::kInvalidArgument, "VSA prefix segment of negative length ", s);
    if (s > 0) g.prefix_segments.push_back(s);  // the reference drops empty segments
    prefix_rows += s;
  }
  const int64_t video_rows = grid[0] * grid[1] * grid[2];
  H3_CHECK(prefix_rows + video_rows == seq_len, ErrorCode::kInvalidArgument,
           "VSA geometry: prefix rows ", prefix_rows, " + video grid ", grid[0], "x", grid[1], "x",
           grid[2], " = ", prefix_rows + video_rows, " rows, but the sequence has ", seq_len);
  g.seq_len = seq_len;
  const int64_t E = tile_size;

  // Prefix: each segment in consecutive chunks of E rows; no tile straddles two segments.
  for (int64_t s : g.prefix_segments) {
    for (int64_t off = 0; off < s; off += E) g.tile_sizes.push_back(std::min(E, s - off));
  }
  g.num_prefix_tiles = static_cast<int64_t>(g.tile_sizes.size());

  const int64_t nt = ceil_div(grid[0], g.tile_shape[0]);
  const int64_t nh = ceil_div(grid[1], g.tile_shape[1]);
  const int64_t nw = ceil_div(grid[2], g.tile_shape[2]);
  g.num_video_tiles = video_rows > 0 ? nt * nh * nw : 0;
  // Video tiles, t-tile-major then h then w; edge tiles take the remaining extent on each axis.
  auto extent = [&](int axis, int64_t tile_idx) {
    return std::min<int64_t>(g.tile_shape[axis], grid[axis] - tile_idx * g.tile_shape[axis]);
  };
  for (int64_t a = 0; a < nt && video_rows > 0; ++a)
    for (int64_t b = 0; b < nh; ++b)
      for (int64_t c = 0; c < nw; ++c) g.tile_sizes.push_back(extent(0, a) * extent(1, b) * extent(2, c));

  g.untile_index.assign(static_cast<size_t>(seq_len), 0);
  // Prefix rows are placed tile after tile, in order.
  int64_t row = 0;
  for (int64_t t = 0; t < g.num_prefix_tiles; ++t) {
    for (int64_t j = 0; j < g.tile_sizes[t]; ++j) g.untile_index[row++] = t * E + j;
  }
  // Video row (t, h, w): its tile, then its row-major offset inside that tile's actual extents.
  for (int64_t t = 0; t < grid[0]; ++t) {
    for (int64_t h = 0; h < grid[1]; ++h) {
      for (int64_t w = 0; w < grid[2]; ++w) {
        const int64_t ta = t / g.tile_shape[0], tb = h / g.tile_shape[1], tc = w / g.tile_shape[2];
        const int64_t tile = g.num_prefix_tiles + (ta * nh + tb) * nw + tc;
        const int64_t eh = extent(1, tb), ew = extent(2, tc);
        const int64_t local = ((t - ta * g.tile_shape[0]) * eh + (h - tb * g.tile_shape[1])) * ew +
                              (w - tc * g.tile_shape[2]);
        g.untile_index[row++] = tile * E + local;
      }
    }
  }
  // Valid slots in buffer order name their packed rows.
  std::vector<int64_t> order(static_cast<size_t>(seq_len));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return g.untile_index[a] < g.untile_index[b]; });
  g.partition_rows = std::move(order);
  validate_vsa_geometry(g);
  return g;
}

void validate_vsa_geometry(const VsaGeometry& g) {
  H3_CHECK(g.tile_size == 64 || g.tile_size == 256, ErrorCode::kInvalidArgument,
           "VSA tile size must be 64 or 256, got ", g.tile_size);
  const int64_t n = g.num_tiles();
  H3_CHECK(static_cast<int64_t>(g.tile_sizes.size()) == n, ErrorCode::kInvalidArgument,
           "VSA geometry: ", g.tile_sizes.size(), " tile sizes for ", n, " tiles");
  int64_t sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    H3_CHECK(g.tile_sizes[t] >= 1 && g.tile_sizes[t] <= g.tile_size, ErrorCode::kInvalidArgument,
             "VSA geometry: tile ", t, " has ", g.tile_sizes[t], " rows, expected 1..", g.tile_size);
    sum += g.tile_sizes[t];
  }
  H3_CHECK(sum == g.seq_len, ErrorCode::kInvalidArgument, "VSA geometry: tile sizes sum to ", sum,
           ", the sequence has ", g.seq_len, " rows");
  H3_CHECK(static_cast<int64_t>(g.untile_index.size()) == g.seq_len, ErrorCode::kInvalidArgument,
           "VSA geometry: untile index has ", g.untile_index.size(), " entries for ", g.seq_len,
           " rows");
  std::vector<uint8_t> used(static_cast<size_t>(g.padded_length()), 0);
  for (int64_t r = 0; r < g.seq_len; ++r) {
    const int64_t slot = g.untile_index[r];
    H3_CHECK(slot >= 0 && slot < g.padded_length(), ErrorCode::kInvalidArgument,
             "VSA geometry: row ", r, " maps to slot ", slot, " outside [0, ", g.padded_length(), ")");
    H3_CHECK(slot % g.tile_size < g.tile_sizes[slot / g.tile_size], ErrorCode::kInvalidArgument,
             "VSA geometry: row ", r, " maps to pad slot ", slot);
    H3_CHECK(!used[slot], ErrorCode::kInvalidArgument, "VSA geometry: slot ", slot,
             " is used by two rows (the untile index must be injective)");
    used[slot] = 1;
  }
}

int64_t vsa_topk(double sparsity, int64_t num_video_tiles) {
  const double want = std::ceil((1.0 - sparsity) * static_cast<double>(num_video_tiles));
  const int64_t k = static_cast<int64_t>(std::min(want, static_cast<double>(num_video_tiles)));
  return std::max<int64_t>(1, k);
}

VsaMode parse_vsa_mode(const std::string& text) {
  if (text == "exempt") return VsaMode::kExempt;
  if (text == "compete") return VsaMode::kCompete;
  fail(ErrorCode::kInvalidArgument, "--vsa-mode '", text, "': expected exempt or compete");
}

Tensor vsa_block_mask(const Tensor& scores_in, const VsaGeometry& g, double sparsity, VsaMode mode) {
  H3_CHECK(sparsity >= 0.0 && sparsity < 1.0, ErrorCode::kInvalidArgument, "VSA sparsity ",
           sparsity, " is outside [0, 1)");
  const Tensor scores = scores_in.device().is_cpu() ? scores_in.contiguous()
                                                    : scores_in.to(Device::cpu());
  const int64_t n = g.num_tiles(), P = g.num_prefix_tiles, V = g.num_video_tiles;
  H3_CHECK(scores.dim() == 3 && scores.size(1) == n && scores.size(2) == n,
           ErrorCode::kInvalidArgument, "VSA scores ", shape_str(scores.shape()),
           " do not match ", n, " tiles");
  const int64_t H = scores.size(0);
  Tensor mask = Tensor::zeros({H, n, n}, DType::kU8);
  uint8_t* m = mask.data<uint8_t>();
  const int64_t k_vid = vsa_topk(sparsity, V);
  if (k_vid == V) {
    mask.fill(1);
    return mask;
  }
  const std::vector<float> s = scores.to_f32_vector();
  std::vector<int64_t> cols;
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* row = m + (h * n + i) * n;
      if (i < P) {  // prefix queries (text, condition, audio) always attend densely
        std::fill(row, row + n, 1);
        continue;
      }
      const float* sr = s.data() + (h * n + i) * n;
      const int64_t first = mode == VsaMode::kExempt ? P : 0;
      const int64_t k = mode == VsaMode::kExempt ? k_vid : std::min(k_vid + P, n);
      cols.resize(static_cast<size_t>(n - first));
      std::iota(cols.begin(), cols.end(), first);
      // Highest scores first; ties (which the golden margins exclude) go to the lower index.
      std::partial_sort(cols.begin(), cols.begin() + k, cols.end(), [&](int64_t a, int64_t b) {
        return sr[a] > sr[b] || (sr[a] == sr[b] && a < b);
      });
      for (int64_t j = 0; j < k; ++j) row[cols[j]] = 1;
      if (mode == VsaMode::kExempt) std::fill(row, row + P, 1);  // prefix keys always visible
    }
  }
  return mask;
}

}  // namespace h3::ops
