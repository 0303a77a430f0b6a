// CUDA graphs on the GPU: the capture machinery (core/cuda_graph.h) on a few ops, and the DiT step
// runner (models/h3_dit/dit_graph.h) on a golden `dit` case.
//   - a recorded sequence replays the ops' results bit for bit and follows new input values
//     written into its input buffers;
//   - an index check inside a graph reports through the capture's flag after the replay (the
//     eager op throws at once);
//   - work that cannot be captured (a synchronous copy) fails the capture with an error, and eager
//     work afterwards runs as before;
//   - the runner's outputs equal the eager forward's bit for bit, and the outputs of one step are
//     still intact after later replays (each forward returns its own tensors).
// The end-to-end comparison (a whole generation with and without graphs) is in test_e2e_gpu.cpp.
// Skips visibly without a CUDA device or golden data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda_graph.h"
#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/status.h"
#include "models/h3_dit/dit_graph.h"
#include "models/h3_dit/dit_model.h"
#include "ops/ops.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

using test::same_bytes;

Tensor ramp(int64_t rows, int64_t cols, float phase) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return Tensor::from_f32(v, {rows, cols});
}

int32_t read_flag(const Tensor& flag) { return flag.to(Device::cpu()).data<int32_t>()[0]; }

TEST(GpuCudaGraph, ReplaysRecordedOpsAndFollowsNewInputs) {
  H3_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  Tensor x = ramp(64, 32, 0.0f).to(dev);
  const Tensor idx = Tensor::from_i64({3, 1, 0, 63, 17}, {5}).to(dev);
  Tensor out = Tensor::empty({5, 32}, DType::kF32, dev);
  Tensor flag = Tensor::zeros({1}, DType::kI32, dev);
  const Stream stream = Stream::create(0, /*non_blocking=*/false);
  auto work = [&] { return ops::scale(ops::silu(ops::gather_rows(x, idx)), 0.5f); };
  const CudaGraph g = CudaGraph::capture(stream, static_cast<int*>(flag.raw()), [&] {
    const Tensor zero = Tensor::zeros({5, 32}, DType::kF32, dev);  // a fill inside the graph
    ops::copy_into(out, ops::add(work(), zero));
  });
  ASSERT_TRUE(g.valid());
  EXPECT_GT(g.num_nodes(), 3u);
  EXPECT_EQ(current_cuda_stream(), nullptr);
  EXPECT_EQ(deferred_index_flag(), nullptr);
  g.launch(stream);
  EXPECT_TRUE(same_bytes(out, work()));
  EXPECT_EQ(read_flag(flag), 0);
  // New values in the graph's input buffer: the replay computes with them.
  ops::copy_into(x, ramp(64, 32, 1.0f).to(dev));
  g.launch(stream);
  EXPECT_TRUE(same_bytes(out, work()));
  EXPECT_EQ(read_flag(flag), 0);
}

TEST(GpuCudaGraph, IndexChecksReportAfterTheReplay) {
  H3_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const Tensor x = ramp(8, 4, 0.0f).to(dev);
  const Tensor bad = Tensor::from_i64({2, 8}, {2}).to(dev);  // 8 is past the 8 rows
  EXPECT_THROW(ops::gather_rows(x, bad), Error);             // eager: at once
  Tensor flag = Tensor::zeros({1}, DType::kI32, dev);
  Tensor out = Tensor::empty({2, 4}, DType::kF32, dev);
  const Stream stream = Stream::create(0, false);
  const CudaGraph g = CudaGraph::capture(stream, static_cast<int*>(flag.raw()),
                                         [&] { ops::copy_into(out, ops::gather_rows(x, bad)); });
  EXPECT_EQ(read_flag(flag), 0);
  g.launch(stream);
  EXPECT_EQ(read_flag(flag), 1);
}

TEST(GpuCudaGraph, UncapturableWorkFailsTheCaptureCleanly) {
  H3_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const Tensor x = ramp(16, 16, 0.0f).to(dev);
  Tensor flag = Tensor::zeros({1}, DType::kI32, dev);
  const Stream stream = Stream::create(0, false);
  // A synchronous device-to-host copy cannot be part of a graph.
  EXPECT_THROW(CudaGraph::capture(stream, static_cast<int*>(flag.raw()),
                                  [&] { (void)ops::silu(x).to(Device::cpu()); }),
               Error);
  EXPECT_EQ(current_cuda_stream(), nullptr);
  EXPECT_EQ(deferred_index_flag(), nullptr);
  // Eager work is unaffected, and a later capture on the same stream works.
  const Tensor y = ops::silu(x).to(Device::cpu());
  EXPECT_EQ(y.numel(), 256);
  Tensor out = Tensor::empty({16, 16}, DType::kF32, dev);
  const CudaGraph g = CudaGraph::capture(stream, static_cast<int*>(flag.raw()),
                                         [&] { ops::copy_into(out, ops::silu(x)); });
  g.launch(stream);
  EXPECT_TRUE(same_bytes(out, ops::silu(x)));
}

TEST(GpuDitGraph, StepsEqualEagerAndOutputsOutliveLaterReplays) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "dit");
  const test::GoldenCase& c = cases.front();
  const auto f = c.open();
  const dit::DitInputs in = test::read_dit_inputs(*f);
  const std::string partition = test::dit_partition_of(c);
  dit::DitOptions o;
  o.device = Device::cuda(0);
  o.precision = dit::DitPrecision::kBF16;
  o.rounding = dit::DitRounding::kFused;
  const dit::DitModel model =
      dit::DitModel::load(test::Golden::get()->checkpoint_dir() + "/" + partition, o);
  const dit::DitTextContext text = model.encode_text(in.encoder_hidden_states);
  const dit::DitLayout layout = model.make_layout(in.position_ids, in.token_tags, in.video_indices,
                                                  in.audio_indices, in.text_indices);
  // Four steps with different latents: a replay that wrote into an earlier step's outputs would
  // show up as a mismatch for that step.
  constexpr int kSteps = 4;
  std::vector<Tensor> video(kSteps), audio(kSteps);
  std::vector<dit::DitOutputs> eager(kSteps);
  for (int k = 0; k < kSteps; ++k) {
    video[k] = ops::scale(in.hidden_states.to(DType::kF32), 1.0f + 0.25f * static_cast<float>(k));
    audio[k] =
        ops::scale(in.audio_hidden_states.to(DType::kF32), 1.0f - 0.2f * static_cast<float>(k));
    eager[k] = model.forward(text, layout, video[k], audio[k], in.timestep, in.timestep_indices);
  }
  dit::DitStepRunner runner(model, text, layout);
  ASSERT_EQ(runner.graphs_state(), "on");
  std::vector<dit::DitOutputs> graphed;
  for (int k = 0; k < kSteps; ++k) {
    graphed.push_back(runner.forward(video[k], audio[k], in.timestep, in.timestep_indices, k));
  }
  EXPECT_EQ(runner.captures(), 1);
  EXPECT_EQ(runner.replays(), kSteps - 1);
  EXPECT_GT(runner.graph_nodes(), 0u);
  for (int k = 0; k < kSteps; ++k) {
    EXPECT_TRUE(same_bytes(graphed[k].video, eager[k].video)) << "video, step " << k;
    EXPECT_TRUE(same_bytes(graphed[k].audio, eager[k].audio)) << "audio, step " << k;
  }
  EXPECT_FALSE(same_bytes(graphed[1].video, graphed[2].video)) << "the steps' inputs differ";
}

}  // namespace
}  // namespace h3
