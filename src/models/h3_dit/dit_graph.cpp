#include "models/h3_dit/dit_graph.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "core/cuda_graph.h"
#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/log.h"
#include "core/status.h"
#include "ops/ops.h"

namespace h3::dit {

namespace {

// One captured shape: the graph, the buffers it reads its inputs from and writes its outputs to
// (fixed addresses, owned here).
struct Entry {
  bool failed = false;
  CudaGraph graph;
  DitStepInputs in;
  Tensor out_video, out_audio;
};

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

}  // namespace

struct DitStepRunner::Impl {
  const DitModel& model;
  const DitTextContext& text;
  const DitLayout& layout;
  std::string state = "on";
  Stream stream;
  Tensor flag;  // i32 [1]: set by any recorded index check that failed
  std::map<std::string, Entry> entries;
  bool warm = false;  // an eager forward ran: lazily built op state exists
  int64_t captures = 0, replays = 0;
  double capture_ms = 0.0;
  size_t nodes = 0;

  Impl(const DitModel& m, const DitTextContext& t, const DitLayout& l)
      : model(m), text(t), layout(l) {}

  bool on() const { return state == "on"; }

  // The shape a graph is valid for: row counts, distinct timesteps, each block's sparsity.
  std::string key(const DitStepInputs& in, int64_t step_index) const {
    std::ostringstream k;
    k << in.video_rows.size(0) << ':' << in.audio_rows.size(0) << ':' << in.sinusoid.size(0) << ':'
      << dtype_name(in.video_rows.dtype()) << dtype_name(in.audio_rows.dtype());
    if (model.options().attention == DitAttentionBackend::kVsa) {
      for (int64_t b = 0; b < model.config().num_layers; ++b)
        k << ':' << model.vsa_sparsity_for(b, step_index);
    }
    return k.str();
  }

  void capture(Entry& e, const DitStepInputs& in, int64_t step_index) {
    const Device dev = model.options().device;
    e.in.video_rows = empty_like(in.video_rows);
    e.in.audio_rows = empty_like(in.audio_rows);
    e.in.sinusoid = empty_like(in.sinusoid);
    e.in.adaln_rows = empty_like(in.adaln_rows);
    e.in.t_rows = empty_like(in.t_rows);
    e.out_video =
        Tensor::empty({in.video_rows.size(0), model.config().video_patch_dim()}, DType::kF32, dev);
    e.out_audio =
        Tensor::empty({in.audio_rows.size(0), model.config().audio_in_channels}, DType::kF32, dev);
    // The graph's activations come from the driver's graph pool, not from the device pool that
    // still caches the eager forward's: hand that back first, or the two would hold a forward's
    // working memory each.
    cuda_release_cached(dev.index);
    const auto t0 = std::chrono::steady_clock::now();
    e.graph = CudaGraph::capture(stream, static_cast<int*>(flag.raw()), [&] {
      const DitOutputs o = model.run_step(text, layout, e.in, nullptr, step_index);
      ops::copy_into(e.out_video, o.video);
      ops::copy_into(e.out_audio, o.audio);
    });
    capture_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++captures;
    nodes += e.graph.num_nodes();
  }

  DitOutputs replay(Entry& e, const DitStepInputs& in) {
    ops::copy_into(e.in.video_rows, in.video_rows);
    ops::copy_into(e.in.audio_rows, in.audio_rows);
    ops::copy_into(e.in.sinusoid, in.sinusoid);
    ops::copy_into(e.in.adaln_rows, in.adaln_rows);
    ops::copy_into(e.in.t_rows, in.t_rows);
    // The stream synchronizes with the legacy default stream: the copies above come first, and
    // the reads below wait for the replay.
    e.graph.launch(stream);
    ++replays;
    const int32_t bad = flag.to(Device::cpu()).data<int32_t>()[0];
    if (bad != 0) {
      flag = Tensor::zeros({1}, DType::kI32, flag.device());
      fail(ErrorCode::kInvalidArgument,
           "DiT forward (CUDA graph replay): a row index is outside its table (the index checks "
           "of the recorded ops are read after the replay)");
    }
    DitOutputs out;
    out.video = ops::copy(e.out_video);
    out.audio = ops::copy(e.out_audio);
    return out;
  }
};

DitStepRunner::DitStepRunner(const DitModel& model, const DitTextContext& text,
                             const DitLayout& layout)
    : impl_(std::make_unique<Impl>(model, text, layout)) {
  const char* env = std::getenv("H3_CUDA_GRAPHS");
  const Device dev = model.options().device;
  if (env && std::strcmp(env, "0") == 0) {
    impl_->state = "off: H3_CUDA_GRAPHS=0";
  } else if (!dev.is_cuda()) {
    impl_->state = "off: the DiT runs on the CPU";
  } else if (model.streamed_blocks() > 0) {
    impl_->state = "off: DiT blocks stream from host memory";
  } else {
    impl_->stream = Stream::create(dev.index, /*non_blocking=*/false);
    impl_->flag = Tensor::zeros({1}, DType::kI32, dev);
  }
}

DitStepRunner::~DitStepRunner() {
  if (!impl_ || !impl_->on()) return;
  const int device = impl_->model.options().device.index;
  impl_->entries.clear();
  cuda_graph_trim(device);
}

DitOutputs DitStepRunner::forward(const Tensor& video_rows, const Tensor& audio_rows,
                                  const Tensor& timesteps, const Tensor& timestep_indices,
                                  int64_t step_index) {
  Impl& m = *impl_;
  const DitStepInputs in =
      m.model.prepare_step(m.text, m.layout, video_rows, audio_rows, timesteps, timestep_indices);
  if (!m.on()) return m.model.run_step(m.text, m.layout, in, nullptr, step_index);
  if (!m.warm) {
    m.warm = true;
    return m.model.run_step(m.text, m.layout, in, nullptr, step_index);
  }
  Entry& e = m.entries[m.key(in, step_index)];
  if (e.failed) return m.model.run_step(m.text, m.layout, in, nullptr, step_index);
  if (!e.graph.valid()) {
    try {
      m.capture(e, in, step_index);
    } catch (const Error& err) {
      H3_LOG_WARN("CUDA graph of the DiT step not captured (", err.what(),
                  "); this shape runs without a graph");
      e = Entry{};
      e.failed = true;
      return m.model.run_step(m.text, m.layout, in, nullptr, step_index);
    }
  }
  return m.replay(e, in);
}

bool DitStepRunner::graphs_enabled() const { return impl_->on(); }
const std::string& DitStepRunner::graphs_state() const { return impl_->state; }
int64_t DitStepRunner::captures() const { return impl_->captures; }
int64_t DitStepRunner::replays() const { return impl_->replays; }
double DitStepRunner::capture_ms() const { return impl_->capture_ms; }
size_t DitStepRunner::graph_nodes() const { return impl_->nodes; }

}  // namespace h3::dit
