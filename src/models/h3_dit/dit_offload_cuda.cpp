// The one CUDA call of the DiT's block streaming (dit_offload.h).
#include <cuda_runtime.h>

#include "core/status.h"
#include "models/h3_dit/dit_offload.h"

namespace h3::dit {

void copy_to_device_async(void* dst, const void* src, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                          static_cast<cudaStream_t>(stream.handle()));
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::kInternal, "DiT offload: copy of ", bytes,
         " bytes of block weights to the device failed: ", cudaGetErrorString(err));
  }
}

}  // namespace h3::dit
