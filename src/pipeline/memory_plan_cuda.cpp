// Unified memory detection for the memory planner (CUDA builds).
#include <cuda_runtime.h>

#include "pipeline/memory_plan.h"

namespace h3::pipeline {

// Integrated GPUs, and devices that read pageable memory through the host's own page tables
// (ATS: Grace Hopper, GB10), share one pool with the host. Plain cudaDevAttrPageableMemoryAccess
// is not used: on x86 hosts with HMM a discrete GPU reports it too, yet has its own memory.
bool device_has_unified_memory(int device) {
  int integrated = 0, host_tables = 0;
  if (cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device) != cudaSuccess) {
    cudaGetLastError();
    integrated = 0;
  }
  if (cudaDeviceGetAttribute(&host_tables, cudaDevAttrPageableMemoryAccessUsesHostPageTables,
                             device) != cudaSuccess) {
    cudaGetLastError();
    host_tables = 0;
  }
  return integrated != 0 || host_tables != 0;
}

}  // namespace h3::pipeline
