// Host-side choices of the Hopper attention kernel that depend only on the problem's shape, kept
// apart from the CUDA sources so that the CPU tests check them.
#pragma once

#include <cstdint>
#include <vector>

namespace h3::ops::cuda::hopper {

// Consumer warpgroups (64 query rows each) at head dim 64 for `heads` query heads of the query
// rows `cu_seqlens` delimits (empty: one sequence of `s_q` rows) on a device of `sms` SMs;
// `forced` 2 or 3 wins (H3_ATTN_HOPPER_D64_WARPGROUPS), anything else means automatic.
//
// Three warpgroups (192 rows per CTA, 160 registers each) instead of two (128 rows, 240
// registers), as FlashAttention-3 shapes its head dim 64 kernel: more warps share the
// exponentials of a tile whose tensor work is half that of head dim 128. Measured on an H100
// (bench/RESULTS.md, 2026-12-05 evening): 21-24 % faster on the VAE's batched tiles (1,280 CTAs)
// and on long rows, 13 % slower on 2 heads of 16,384 rows (172 CTAs: the larger CTAs leave SMs
// idle in the last wave). So three where the grid keeps at least four CTAs per SM.
inline int d64_consumers(int64_t s_q, const std::vector<int64_t>& cu_seqlens, int64_t heads,
                         int sms, int forced) {
  if (forced == 2 || forced == 3) return forced;
  int64_t tiles = 0;
  if (cu_seqlens.empty()) {
    tiles = (s_q + 191) / 192;
  } else {
    for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s)
      tiles += (cu_seqlens[s + 1] - cu_seqlens[s] + 191) / 192;
  }
  return tiles * heads >= 4 * int64_t{sms < 1 ? 1 : sms} ? 3 : 2;
}

}  // namespace h3::ops::cuda::hopper
