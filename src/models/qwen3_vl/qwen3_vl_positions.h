// 3-axis (M-RoPE) position ids of a Qwen3-VL token sequence (h3_components_spec.md §1.6,
// transformers `get_rope_index` with an all-ones attention mask).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/qwen3_vl/qwen3_vl_config.h"

namespace h3::qwen3_vl {

struct GridThw {
  int64_t t = 1, h = 1, w = 1;  // patch grid (before the spatial merge)
};

// Position ids [3, L] int64 (temporal, height, width). Text tokens get the next index on all
// axes; each run of image pads is the next image grid, each run of video pads the next temporal
// block of the video grids (every video is split into t blocks of t = 1, §1.6). A vision run gets
// (s + t_idx, s + row, s + col) over the merged grid with s the next index, after which the next
// index is 1 + the largest one used. Counts of pads that do not match the grids are an error.
Tensor rope_position_ids(const std::vector<int64_t>& ids, const std::vector<GridThw>& images,
                         const std::vector<GridThw>& videos, const Qwen3VlConfig& config);

}  // namespace h3::qwen3_vl
