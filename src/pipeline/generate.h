// Text-to-video+audio generation (T2VA) end to end on one device (h3_components_spec.md §4.1-4.2,
// h3_dit_spec.md §3-4; golden README "Pipeline facts" 1-9):
//
//   tokenize + present -> conditioner (hidden_states[50]) -> release conditioner
//   -> DiT denoise loop (draws in reference order, dual schedule, only generated rows written)
//   -> unpack latents -> video VAE decode -> uint8 frames -> audio VAE decode -> waveform.
//
// Each stage is timed in a Receipt. Tests can inject the prompt embeddings and the random draws
// so that every stage can be checked against the golden run in isolation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/receipt.h"
#include "core/tensor.h"
#include "pipeline/geometry.h"

namespace h3::pipeline {

struct GenerateRequest {
  std::string workflow = "t2va";  // only "t2va" is implemented
  std::string prompt;
  std::optional<int64_t> height;  // both or neither; default: the 16:9 canvas of the repository
  std::optional<int64_t> width;
  int64_t num_frames = 124;          // snapped up to 17n + 5 (§4.3)
  int64_t num_inference_steps = 50;  // sigma-grid points (N points = N - 1 model calls, §4.2)
  uint64_t seed = 0;
  bool allow_any_duration = false;  // skip the 5-15 s check (tiny canvases use 22 frames)
};

// Values a test may inject instead of computing them (golden parity of each stage).
struct GenerateInjection {
  Tensor prompt_embeds;            // [L, text_dim] or [1, L, text_dim]: skips the conditioner
  std::vector<int64_t> input_ids;  // with prompt_embeds: the ids (for the text tags); may be empty
  Tensor video_noise;              // [1, 24, T, h, w] float32: replaces the generator's video draw
  Tensor audio_noise_rows;         // [2N, 32] float32: replaces the generator's audio draw
};

struct GenerateOptions {
  Device device = Device::cpu();
  const GenerateInjection* inject = nullptr;
  // Called after every denoising step with the step index and the updated rows (CPU float32
  // [N_vrows, 96] and [2N, 32]) and the video model output of that step.
  std::function<void(int64_t step, const Tensor& video_rows, const Tensor& audio_rows,
                     const Tensor& noise_pred)>
      on_step;
};

struct GenerateResult {
  TargetGeometry geometry;
  std::string frames_note;         // non-empty when num_frames was snapped
  std::vector<int64_t> input_ids;  // the presented prompt
  Tensor prompt_embeds;            // [L, text_dim] float32
  Tensor latents;                  // [1, 24, T, h, w] normalized, float32
  Tensor audio_latents;            // [2, 32, N] normalized, float32
  Tensor frames_float;             // [F, H, W, 3] in [0, 1], float32
  Tensor frames;                   // [F, H, W, 3] uint8
  Tensor audio;                    // [2, S] float32 in [-1, 1] at 32 kHz
};

// Runs the whole pipeline over the repository at `model_dir`. Throws h3::Error for bad requests
// (unknown workflow, impossible canvas or frame count, fewer than 2 steps, empty prompt) before
// any weight is loaded, and for a missing or malformed repository.
GenerateResult generate_t2va(const std::string& model_dir, const GenerateRequest& request,
                             const GenerateOptions& options, Receipt* receipt = nullptr);

}  // namespace h3::pipeline
