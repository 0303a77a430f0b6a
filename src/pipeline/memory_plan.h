// The memory planner (h3_components_spec.md §5; issue "memory runtime"): from the checkpoint
// headers (no weight is read) and the request's geometry it estimates what each component needs
// on the device, decides whether the start must be sequential (conditioner released before the
// DiT and VAEs load) and refuses, before anything is loaded, a plan that cannot fit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "io/repo.h"

namespace h3::pipeline {

enum class SequentialLoad { kAuto, kOn, kOff };
SequentialLoad parse_sequential_load(const std::string& text);  // "auto" | "on" | "off"
const char* sequential_load_name(SequentialLoad s);

// The largest request the plan must hold activations for (defaults: the released 1344x768x124).
struct PlanRequest {
  int64_t height = 768;
  int64_t width = 1344;
  int64_t num_frames = 124;
  int64_t text_tokens = 300;
  std::string workflow = "t2va";  // ref2va also loads transformer_ref/ and the encoders
};

struct ComponentBytes {
  std::string name;          // "conditioner", "transformer", "vae", "audio_vae"
  uint64_t weights = 0;      // on the device, in the dtype it runs in (after --cpu-offload)
  uint64_t activations = 0;  // peak working memory of its stage
  uint64_t file_bytes = 0;   // the checkpoint's tensor bytes as stored (what a load reads)
};

struct MemoryPlan {
  Device device = Device::cpu();
  bool unified_memory = false;  // integrated GPU / pageable memory access (GB10 and the like)
  bool sequential = false;
  bool cpu_offload = false;
  uint64_t device_total = 0;
  uint64_t device_free = 0;
  uint64_t peak_bytes = 0;  // the plan's estimated peak on the device (reserve included)
  std::vector<ComponentBytes> components;
  std::string reason;  // one line: why sequential is on or off
  // Both alternatives, for the decision and for check_fits's suggestions.
  uint64_t peak_together = 0;    // every component resident at once
  uint64_t peak_sequential = 0;  // conditioner alone, then DiT + VAEs
  uint64_t reserve = 0;          // headroom for the CUDA libraries' workspaces and fragmentation
  // The DiT's resident weights with and without --cpu-offload (0 when it has no blocks).
  uint64_t dit_weights_full = 0;
  uint64_t dit_weights_offload = 0;
  const ComponentBytes* find(const std::string& name) const;  // nullptr when absent
};

struct PlanOptions {
  Device device = Device::cpu();
  SequentialLoad sequential = SequentialLoad::kAuto;
  bool cpu_offload = false;
  PlanRequest request{};
  // Weight dtypes the components will run in (bytes are counted in these).
  bool dit_bf16 = false;
  bool conditioner_bf16 = false;
  // Tests (and what-if tools) inject a device here instead of asking the driver: with
  // device_free_override set, no CUDA call is made at all.
  std::optional<uint64_t> device_free_override;
  std::optional<uint64_t> device_total_override;  // defaults to the free override
  std::optional<bool> unified_memory_override;
};

// Unified memory (an integrated GPU, or a device that reads pageable host memory through the
// host's page tables, e.g. GB10 / Grace): device and host share one pool, so auto goes sequential.
// False in builds without CUDA.
bool device_has_unified_memory(int device);

MemoryPlan plan_memory(const io::Repository& repo, const PlanOptions& options);

// Throws ErrorCode::kOutOfMemory naming the components, the bytes needed and the bytes free,
// and what to try (--sequential-load, --cpu-offload, a smaller canvas), when the plan's peak
// exceeds the device's free memory. A CPU plan always fits.
void check_fits(const MemoryPlan& plan);

// One line per component and the decision, for the log (`h3 generate -v`) and the receipt.
std::string describe(const MemoryPlan& plan);

}  // namespace h3::pipeline
