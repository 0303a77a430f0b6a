// CUDA runtime side of core/cuda_graph.h. Compiled only when the build has CUDA.
#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_graph.h"
#include "core/cuda_stream.h"
#include "core/status.h"

namespace h3 {

namespace {

thread_local void* t_stream = nullptr;
thread_local int* t_index_flag = nullptr;

// Points this thread's ops at the capture for the scope of `record`, and back afterwards, also
// when `record` throws.
class Redirect {
 public:
  Redirect(void* stream, int* flag) : stream_(t_stream), flag_(t_index_flag) {
    t_stream = stream;
    t_index_flag = flag;
  }
  ~Redirect() {
    t_stream = stream_;
    t_index_flag = flag_;
  }
  Redirect(const Redirect&) = delete;
  Redirect& operator=(const Redirect&) = delete;

 private:
  void* stream_;
  int* flag_;
};

[[noreturn]] void graph_failed(const char* what, cudaError_t err) {
  cudaGetLastError();  // capture errors are not sticky: later eager work must not be blamed
  fail(ErrorCode::kInternal, "CUDA graph: ", what, " failed: ", cudaGetErrorName(err), " (",
       cudaGetErrorString(err), ")");
}

}  // namespace

void* current_cuda_stream() { return t_stream; }
int* deferred_index_flag() { return t_index_flag; }

CudaGraph CudaGraph::capture(const Stream& stream, int* index_flag,
                             const std::function<void()>& record) {
  H3_CHECK(stream.owned() && stream.handle() != nullptr, ErrorCode::kInvalidArgument,
           "CudaGraph::capture needs a created stream (the legacy default stream cannot capture)");
  H3_CHECK(index_flag != nullptr, ErrorCode::kInvalidArgument,
           "CudaGraph::capture needs a device flag for the index checks");
  H3_CHECK(t_stream == nullptr, ErrorCode::kInternal, "CudaGraph::capture inside a capture");
  H3_CHECK(cudaSetDevice(stream.device()) == cudaSuccess, ErrorCode::kUnsupported,
           "cuda:", stream.device(), " is not available");
  auto* s = static_cast<cudaStream_t>(stream.handle());
  // Thread-local mode: a call of this thread that cannot be captured (a synchronous copy, a
  // legacy-stream launch) fails loudly instead of silently running outside the graph.
  cudaError_t err = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) graph_failed("cudaStreamBeginCapture", err);
  cudaGraph_t g = nullptr;
  try {
    Redirect redirect(s, index_flag);
    record();
  } catch (...) {
    if (cudaStreamEndCapture(s, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  err = cudaStreamEndCapture(s, &g);
  if (err != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    graph_failed("capture (something recorded cannot be captured)", err);
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, g, 0);
  if (err != cudaSuccess) {
    cudaGraphDestroy(g);
    graph_failed("cudaGraphInstantiate", err);
  }
  CudaGraph out;
  out.graph_ = g;
  out.exec_ = exec;
  out.device_ = stream.device();
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess) out.nodes_ = n;
  cudaGetLastError();
  return out;
}

CudaGraph::~CudaGraph() {
  if (!exec_ && !graph_) return;
  cudaSetDevice(device_);
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : graph_(std::exchange(o.graph_, nullptr)),
      exec_(std::exchange(o.exec_, nullptr)),
      device_(o.device_),
      nodes_(o.nodes_) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    CudaGraph tmp(std::move(*this));
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
    device_ = o.device_;
    nodes_ = o.nodes_;
  }
  return *this;
}

void CudaGraph::launch(const Stream& stream) const {
  H3_CHECK(valid(), ErrorCode::kInternal, "CudaGraph::launch on an empty graph");
  H3_CHECK(cudaSetDevice(device_) == cudaSuccess, ErrorCode::kUnsupported, "cuda:", device_,
           " is not available");
  const cudaError_t err = cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                          static_cast<cudaStream_t>(stream.handle()));
  if (err != cudaSuccess) graph_failed("cudaGraphLaunch", err);
}

void cuda_graph_trim(int device) {
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  cudaDeviceSynchronize();
  cudaDeviceGraphMemTrim(device);
  cudaGetLastError();
}

}  // namespace h3
