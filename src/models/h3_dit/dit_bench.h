// Timing of DiT main blocks with random weights (no checkpoint): `h3 bench dit`.
//
// The default size is the released width (hidden 5376, 56 x 128 heads, FFN 14336) on the packed
// length of a 1344x768x124 T2VA request: 256 text + 414 audio + 37,296 video rows (grid 37 x 24 x
// 42 patches) = 37,966 rows (h3_dit_spec.md §2.14, §7.1). Every size can be overridden so that the
// same code runs on a CPU in seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "models/h3_dit/dit_model.h"

namespace h3::dit {

struct DitBenchOptions {
  Device device = Device::cpu();
  DitAttentionBackend attention = DitAttentionBackend::kDense;
  double vsa_sparsity = -1.0;  // < 0: the model's default (0.9 with gates)
  int vsa_tile_size = 64;
  bool gates = true;           // FastH3 gates on every block (VSA backend only)
  int64_t blocks = 2;
  int64_t text_rows = 256;
  int64_t audio_rows = 414;
  int64_t grid[3] = {37, 24, 42};  // video grid (T, Hh, Ww) in patches
  int64_t rows = 0;                // > 0: total packed rows; the grid is chosen to fit (below)
  int64_t hidden = 5376;
  int64_t heads = 56;
  int64_t head_dim = 128;
  int64_t ffn = 14336;
  DitPrecision precision = DitPrecision::kBF16;
  DitRounding rounding = DitRounding::kFused;
  bool fp8 = false;  // --dit-dtype fp8: the blocks' projections as FP8 GEMMs (DitOptions::fp8)
  // --fp8-scaling: 128 x 128 blocks with per-group activations (the default), or per-channel
  // weights with per-token activations (DitOptions::fp8_scaling).
  ops::Fp8WeightScaling fp8_scaling = ops::Fp8WeightScaling::kPerBlock;
  // > 0: a random LoRA adapter of this rank on every block's attention and FFN projections
  // (q, k, v, out, fc_in, fc_out), applied with lora_mode before timing (dit_lora.h).
  int64_t lora_rank = 0;
  LoraMode lora_mode = LoraMode::kRuntime;
  int iters = 3;
  int warmup = 1;
  uint64_t seed = 0;
};

struct DitBenchResult {
  int64_t seq_len = 0;
  int64_t text_rows = 0, cond_rows = 0, audio_rows = 0;
  int64_t grid[3] = {0, 0, 0};
  double sparsity = 0.0;       // resolved (VSA only)
  std::string vsa_summary;     // tiling, VSA only
  std::string timer;           // "cuda events" or "wall clock"
  double weight_bytes = 0.0;   // per block
  double gemm_flops = 0.0;     // per block (projections, gate, FFN; AdaLN is negligible)
  double attention_flops = 0.0;  // per attention call (kept tiles only for VSA)
  std::vector<double> block_ms;  // best per block over the timed iterations
  double block_ms_mean = 0.0;    // mean over blocks and iterations
  double attention_ms = 0.0;     // best of the attention op alone
  double gemm_ms = 0.0;          // best of one block's GEMMs alone (q, k, v, gate, out, FFN)
  double lora_apply_ms = 0.0;    // apply_loras() of the adapter to all blocks (lora_rank > 0)
  // Where a block's time goes, from the blocks run again with their parts marked
  // (DitModel::set_part_timer): per part, the mean ms per block and, for the passes between the
  // GEMMs and the attention ("glue"), the bytes they must move at least (activations read and
  // written once; tables included).
  struct Part {
    std::string name;
    double ms = 0.0;
    double bytes = 0.0;  // 0: not counted (GEMMs, attention, the AdaLN projection)
    bool glue = false;
  };
  std::vector<Part> parts;
  double glue_ms = 0.0, glue_bytes = 0.0;  // sums over the glue parts
  double peak_device_bytes = 0.0;  // sampled device memory in use (CUDA only)
  double baseline_device_bytes = 0.0;
  // Empty when everything ran; otherwise what was unsupported (e.g. a missing CUDA op).
  std::string unsupported;
  double gemm_tflops() const;       // gemm_flops / gemm_ms
  double attention_tflops() const;  // attention_flops / attention_ms
};

// Chooses the layout for options.rows > 0: video rows = rows - text - audio, the grid the largest
// (T, Hh, Ww) with Hh x Ww from a released-like list that fits, and the remainder as condition
// rows (a prefix segment, §5.2). Throws kInvalidArgument when rows < text + audio + 1.
void choose_bench_layout(const DitBenchOptions& o, int64_t grid[3], int64_t* cond_rows);

// Deterministic random main-block weights for `config` (only `blocks` is filled; the model can run
// run_block, not a full forward). Uniform weights scaled by 1/sqrt(fan_in), norms near 1, small
// AdaLN; FastH3 gates on every block when `gates`.
DitWeights random_dit_block_weights(const DitConfig& config, bool gates, uint64_t seed, DType dtype,
                                    const Device& device);

// Runs the benchmark; the result says `unsupported` instead of throwing when an op is missing on
// the device (kUnsupported). Progress lines go to stderr when `verbose`.
DitBenchResult run_dit_bench(const DitBenchOptions& options, bool verbose);

}  // namespace h3::dit
