// VSA-H3: video sparse attention over the packed H3 sequence (h3_dit_spec.md §5).
//
// The packed rows [prefix segments | video grid] are cut into tiles: each prefix segment
// (text, condition video rows, audio rows) into consecutive chunks of E = tile_size rows, the video
// grid (T, Hh, Ww) into (4,4,4) boxes for E = 64 or (4,8,8) for E = 256, ragged at the edges. Tile
// means of q and k give coarse scores; each query tile keeps the top-k video key tiles (and every
// prefix tile), and fine attention runs over the union of the kept tiles' rows. A FastH3 checkpoint
// adds a compression branch: softmax over all tile scores times the tile means of v, times a
// learned per-row gate, added to the fine output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::ops {

// Tiling of one packed sequence. Built once per request geometry; shared by every layer and step.
struct VsaGeometry {
  int tile_size = 64;        // E: 64 or 256
  int tile_shape[3] = {4, 4, 4};
  std::vector<int64_t> prefix_segments;  // non-zero segment lengths, in row order
  int64_t grid[3] = {0, 0, 0};            // video grid (T, Hh, Ww) in patches
  int64_t seq_len = 0;                    // S
  int64_t num_prefix_tiles = 0;           // P
  int64_t num_video_tiles = 0;            // V
  std::vector<int64_t> tile_sizes;        // [P + V] valid rows per tile (variable_block_sizes)
  std::vector<int64_t> untile_index;      // [S] padded slot of each packed row
  std::vector<int64_t> partition_rows;    // [S] packed row of each valid slot, in tile order
  // Device copies of the index arrays, made by a GPU backend on first use and shared by copies of
  // this geometry, so that the layers and steps of a request do not upload them again (an upload
  // from pageable memory waits for the device to drain). The backend keeps the host arrays it
  // uploaded and compares them on every call, so changing the vectors above stays safe.
  mutable std::shared_ptr<void> device_cache;

  int64_t num_tiles() const { return num_prefix_tiles + num_video_tiles; }
  int64_t padded_length() const { return num_tiles() * tile_size; }
  // First index into partition_rows of tile t (prefix sums of tile_sizes).
  std::vector<int64_t> tile_starts() const;
  std::string summary() const;  // one line: tiles, padded length, min/max video tile
};

// Builds the tiling. `prefix_segments` may contain zeros (dropped, as the reference does); the
// sequence length must equal sum(prefix) + T*Hh*Ww. Throws kInvalidArgument for a tile size other
// than 64 or 256 and for inconsistent sizes; validates the result (§5.2 validation rules).
VsaGeometry build_vsa_geometry(int tile_size, const std::vector<int64_t>& prefix_segments,
                               const int64_t grid[3], int64_t seq_len);
// Checks the invariants of §5.2 (sizes in [1, E], sum S, index in range, injective, never a pad).
void validate_vsa_geometry(const VsaGeometry& g);

// k_vid = max(1, min(ceil((1 - sparsity) * V), V)) in double precision, exactly as the reference
// computes it: (1 - 0.95) * 660 is 33.00000000000003, so the answer is 34.
int64_t vsa_topk(double sparsity, int64_t num_video_tiles);

enum class VsaMode { kExempt, kCompete };
VsaMode parse_vsa_mode(const std::string& text);  // "exempt" | "compete", else kInvalidArgument

// Block mask from coarse scores [H, n, n] (f32): uint8 [H, n, n], 1 = key tile visible (§5.4).
Tensor vsa_block_mask(const Tensor& scores, const VsaGeometry& g, double sparsity, VsaMode mode);

struct VsaOptions {
  double sparsity = 0.0;
  VsaMode mode = VsaMode::kExempt;
  float scale = 0.0f;  // 0: 1/sqrt(head_dim)
  // A given block mask u8 [H, n, n] used instead of the top-k selection (the scores are still
  // computed for the compression branch). For parity tests: a reference's mask, so that a near tie
  // its scores resolve the other way cannot change which keys the output is compared over. CPU only
  // (kUnsupported elsewhere).
  const Tensor* block_mask = nullptr;
};

// Intermediate tensors, for tests and diagnostics (filled when a pointer is passed).
struct VsaTrace {
  Tensor q_pooled, k_pooled, v_pooled;  // f32 [H, n, D]
  Tensor scores;                        // f32 [H, n, n]
  Tensor mask;                          // u8 [H, n, n]
  Tensor fine;                          // [S, H, D], dtype of q
  Tensor out_c_f32;                     // f32 [H, n, D] (only with a gate)
};

// q, k, v, (g) [S, H, D] in packed row order; returns [S, H, D] in q's dtype. With g == nullptr
// there is no compression branch (a checkpoint without gates) and, at sparsity 0, the result is
// dense attention. Scores are computed whenever they are needed (sparsity > 0 or a gate).
Tensor vsa_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                     const VsaGeometry& geometry, const VsaOptions& options,
                     VsaTrace* trace = nullptr);

namespace cpu {
Tensor vsa_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                     const VsaGeometry& geometry, const VsaOptions& options, VsaTrace* trace);
}  // namespace cpu

}  // namespace h3::ops
