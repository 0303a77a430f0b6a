// CUDA graphs: a sequence of device work recorded once and replayed with one launch.
//
// Capture works on the ops unchanged because everything they issue goes through two per-thread
// settings that a capture redirects:
//   - current_cuda_stream(): the stream the ops, the allocator and Tensor::zeros issue work on.
//     Outside a capture it is the legacy default stream, which orders the ops with Tensor's
//     synchronous copies; a legacy-stream call cannot be captured, so a capture switches it to its
//     own stream.
//   - deferred_index_flag(): ops that validate row indices on the device normally read a flag
//     back after each call; a read-back cannot be captured either, so during a capture the
//     kernels write into one device flag that the graph's owner reads after each replay.
// Memory the recorded ops allocate and free comes from the driver's graph memory pool, reserved
// while the graph lives; cuda_graph_trim() returns it once the graphs are gone.
//
// In builds without CUDA nothing can be captured (kUnsupported) and the settings stay null.
#pragma once

#include <functional>

namespace h3 {

class Stream;

// The stream of this thread's device work (cudaStream_t; null: the legacy default stream).
void* current_cuda_stream();
// The device flag the ops' index checks write while this thread captures (null otherwise).
int* deferred_index_flag();

class CudaGraph {
 public:
  CudaGraph() = default;  // empty
  // Records everything `record` issues on this thread into a graph and instantiates it. `stream`
  // must be a created stream that synchronizes with the legacy default stream (Stream::create
  // with non_blocking = false), so that launches are ordered with the eager work around them;
  // `index_flag` is a device int the caller owns. Throws (with the capture ended and nothing
  // leaked) when `record` throws or issues something that cannot be captured.
  static CudaGraph capture(const Stream& stream, int* index_flag,
                           const std::function<void()>& record);
  ~CudaGraph();
  CudaGraph(CudaGraph&& o) noexcept;
  CudaGraph& operator=(CudaGraph&& o) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  bool valid() const { return exec_ != nullptr; }
  size_t num_nodes() const { return nodes_; }
  // Queues one replay on `stream`.
  void launch(const Stream& stream) const;

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  int device_ = 0;
  size_t nodes_ = 0;
};

// Gives the device's unused graph memory back to the driver (after the graphs that used it were
// destroyed), so that later eager work can allocate it.
void cuda_graph_trim(int device);

}  // namespace h3
