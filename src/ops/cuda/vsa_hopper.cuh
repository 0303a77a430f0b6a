// The VSA fine branch on Hopper tensor cores (issue #7): block-sparse flash attention with TMA and
// wgmma (vsa_hopper.cu), used by vsa.cu in place of the mma.sync fine kernel when eligible.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace h3::ops::cuda {

// Same data as vsa.cu's fine kernel reads: the padded tile-ordered q, k, v [n E, H, 128], the key
// tile lists, the partition (for the stores) and the gate combine's inputs.
struct VsaHopperParams {
  void* tq;
  void* tk;
  void* tv;
  const void* g;       // gate [S, H, D] or null
  const float* out_c;  // [H, n, D] or null (no gate)
  void* o;             // output [S, H, D]
  void* fine;          // optional copy of the fine branch alone, or null
  int heads, n, E;     // heads, tiles, tile size (64 or 256)
  const int* starts;   // [n + 1]
  const int* sizes;    // [n] real rows of each tile
  const int* part;     // [S]
  const int* lists;    // [H, n, n] visible key tiles, ascending; null: all
  const int* counts;   // [H, n]
  int* blocks;         // scratch [H, n]: 64-row key blocks per list
  float scale_log2;
  bool f16;            // false: bf16
};

// Whether the Hopper fine kernel can run here: H3_VSA_HOPPER is not "0", the device is compute
// capability 9.0 and this build holds the sm_90a kernel body; head dim 128 and tile 64 or 256.
bool vsa_hopper_eligible(int device, int64_t head_dim, int tile_size, int64_t tiled_rows, int64_t heads);

// Zeroes the pad rows of the tile-ordered buffers (the tensor copies load whole 64-row blocks, so the
// pad slots must hold finite values: their keys are masked, and 0 * a finite value stays 0), then
// queues the fine kernel on the stream. Throws h3::Error when a launch fails.
void vsa_hopper_fine(const VsaHopperParams& p, cudaStream_t stream);

}  // namespace h3::ops::cuda
