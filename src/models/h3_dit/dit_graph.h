// The denoising loop's DiT forwards, replayed as CUDA graphs.
//
// A forward issues a few thousand kernels whose shapes and addresses repeat from step to step; a
// graph records them once and launches them with one call, so the CPU never sits between two
// kernels. DitStepRunner::forward() is DitModel::forward() with the same inputs and outputs, bit
// for bit (the same kernels on the same data), and runs eagerly wherever graphs do not apply:
//   - the runner's first forward runs eagerly: it builds what the ops create lazily and must
//     exist before a capture (VSA index tables, the attention kernels' probe, cuBLAS handles);
//   - every later forward replays the graph of its shape (row counts, number of distinct
//     timesteps, and each block's VSA sparsity at that step), captured the first time the shape
//     comes up (FastH3: the first step has one distinct timestep, the others two, so step 1
//     runs eagerly, step 2 captures, and every step from 2 on is a replay);
//   - off with H3_CUDA_GRAPHS=0, on the CPU, and when DiT blocks stream from host memory (the
//     streamer's copies are paced by host-side events); a capture that fails is reported once and
//     that shape runs eagerly.
// Output lifetimes are explicit: a replay writes the graph's own output buffers, which never leave
// the runner; forward() returns fresh device tensors copied from them, so a caller may keep the
// outputs of one step while the next replays. Index checks of the recorded ops are read once
// after each replay (core/cuda_graph.h).
// Graph memory is held while the runner lives; the destructor gives it back to the driver.
#pragma once

#include <memory>
#include <string>

#include "models/h3_dit/dit_model.h"

namespace h3::dit {

class DitStepRunner {
 public:
  // model, text and layout must outlive the runner (one runner per denoising loop).
  DitStepRunner(const DitModel& model, const DitTextContext& text, const DitLayout& layout);
  ~DitStepRunner();
  DitStepRunner(const DitStepRunner&) = delete;
  DitStepRunner& operator=(const DitStepRunner&) = delete;

  // DitModel::forward(text, layout, ...) for this runner's text and layout.
  DitOutputs forward(const Tensor& video_rows, const Tensor& audio_rows, const Tensor& timesteps,
                     const Tensor& timestep_indices, int64_t step_index);

  bool graphs_enabled() const;
  // "on", or why graphs are off ("off: H3_CUDA_GRAPHS=0", ...).
  const std::string& graphs_state() const;
  int64_t captures() const;
  int64_t replays() const;
  double capture_ms() const;   // host time spent recording and instantiating
  size_t graph_nodes() const;  // nodes of the graphs captured so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace h3::dit
