// The one CUDA call of layer streaming (core/layer_stream.h).
#include <cuda_runtime.h>

#include "core/layer_stream.h"
#include "core/status.h"

namespace h3 {

void copy_to_device_async(void* dst, const void* src, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                          static_cast<cudaStream_t>(stream.handle()));
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::kInternal, "layer stream: copy of ", bytes,
         " bytes of layer weights to the device failed: ", cudaGetErrorString(err));
  }
}

}  // namespace h3
