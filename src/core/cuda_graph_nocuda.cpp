// Stand-ins for core/cuda_graph.h in builds without CUDA: nothing is ever captured.
#include "core/cuda_graph.h"
#include "core/status.h"

namespace h3 {

void* current_cuda_stream() { return nullptr; }
int* deferred_index_flag() { return nullptr; }

CudaGraph CudaGraph::capture(const Stream&, int*, const std::function<void()>&) {
  fail(ErrorCode::kUnsupported, "this build of h3 has no CUDA support (CUDA graphs need it)");
}
CudaGraph::~CudaGraph() = default;
CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : graph_(o.graph_), exec_(o.exec_), device_(o.device_), nodes_(o.nodes_) {
  o.graph_ = o.exec_ = nullptr;
}
CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  graph_ = o.graph_;
  exec_ = o.exec_;
  device_ = o.device_;
  nodes_ = o.nodes_;
  o.graph_ = o.exec_ = nullptr;
  return *this;
}
void CudaGraph::launch(const Stream&) const {
  fail(ErrorCode::kUnsupported, "this build of h3 has no CUDA support (CUDA graphs need it)");
}
void cuda_graph_trim(int) {}

}  // namespace h3
