// Builds without CUDA have no device to share memory with.
#include "pipeline/memory_plan.h"

namespace h3::pipeline {

bool device_has_unified_memory(int) { return false; }

}  // namespace h3::pipeline
