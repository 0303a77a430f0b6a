// M-RoPE position ids (h3_components_spec.md §1.6).
#include "models/qwen3_vl/qwen3_vl_positions.h"

#include <algorithm>

#include "core/status.h"

namespace h3::qwen3_vl {

Tensor rope_position_ids(const std::vector<int64_t>& ids, const std::vector<GridThw>& images,
                         const std::vector<GridThw>& videos, const Qwen3VlConfig& config) {
  const int64_t len = static_cast<int64_t>(ids.size());
  H3_CHECK(len > 0, ErrorCode::kInvalidArgument, "rope_position_ids: empty token sequence");
  const int64_t merge = config.vision.spatial_merge_size;
  // Video grids split into blocks of one temporal slot each (Qwen3-VL timestamps every block).
  std::vector<GridThw> blocks;
  for (const GridThw& g : videos) {
    for (int64_t i = 0; i < g.t; ++i) blocks.push_back({1, g.h, g.w});
  }
  std::vector<int64_t> pos(static_cast<size_t>(3 * len));
  auto set = [&](int64_t i, int64_t t, int64_t h, int64_t w) {
    pos[static_cast<size_t>(i)] = t;
    pos[static_cast<size_t>(len + i)] = h;
    pos[static_cast<size_t>(2 * len + i)] = w;
  };
  size_t next_image = 0, next_block = 0;
  int64_t next = 0;
  int64_t i = 0;
  while (i < len) {
    const int64_t id = ids[static_cast<size_t>(i)];
    const bool is_image = id == config.image_token_id;
    const bool is_video = id == config.video_token_id;
    if (!is_image && !is_video) {
      set(i, next, next, next);
      ++next;
      ++i;
      continue;
    }
    int64_t run = 0;
    while (i + run < len && ids[static_cast<size_t>(i + run)] == id) ++run;
    H3_CHECK(is_image ? next_image < images.size() : next_block < blocks.size(),
             ErrorCode::kInvalidArgument, "rope_position_ids: ", is_image ? "image" : "video",
             " pad run at token ", i, " has no matching grid (", images.size(), " image grid(s), ",
             blocks.size(), " video block(s))");
    const GridThw g = is_image ? images[next_image++] : blocks[next_block++];
    H3_CHECK(g.t > 0 && g.h > 0 && g.w > 0 && g.h % merge == 0 && g.w % merge == 0,
             ErrorCode::kInvalidArgument, "rope_position_ids: grid (", g.t, ", ", g.h, ", ", g.w,
             ") must be positive with h and w multiples of the merge size ", merge);
    const int64_t gh = g.h / merge, gw = g.w / merge;
    H3_CHECK(run == g.t * gh * gw, ErrorCode::kInvalidArgument,
             "rope_position_ids: ", is_image ? "image" : "video", " pad run at token ", i, " has ",
             run, " tokens but its grid (", g.t, ", ", g.h, ", ", g.w, ") needs ", g.t * gh * gw);
    const int64_t s = next;
    int64_t k = i;
    for (int64_t t = 0; t < g.t; ++t) {
      for (int64_t r = 0; r < gh; ++r) {
        for (int64_t c = 0; c < gw; ++c) set(k++, s + t, s + r, s + c);
      }
    }
    next = s + std::max({g.t, gh, gw});
    i += run;
  }
  H3_CHECK(next_image == images.size() && next_block == blocks.size(), ErrorCode::kInvalidArgument,
           "rope_position_ids: ", images.size() - next_image, " image grid(s) and ",
           blocks.size() - next_block, " video block(s) have no pad tokens in the sequence");
  return Tensor::from_i64(pos, {3, len});
}

}  // namespace h3::qwen3_vl
