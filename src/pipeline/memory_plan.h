// The memory planner (h3_components_spec.md §5; issue "memory runtime"): from the checkpoint
// headers (no weight is read) and the request's geometry it counts what each component needs as
// it runs (the tensors actually loaded, in the dtypes they run in), estimates each stage's working
// memory, and decides, before anything is loaded, where the weights live:
//
//   resident            everything on the device, kept between generations;
//   stream-conditioner  the conditioner's decoder layers in pinned host memory, streamed through
//   two
//                       device slots (its embeddings and vision tower stay on the device); the rest
//                       resident;
//   cpu-offload         the conditioner streamed as above, and the DiT keeps as many blocks on the
//                       device as fit, the rest in pinned host memory streamed through two slots;
//   sequential          each stage's components alone on the device, released after use and read
//                       from disk again (warm generations read the weights from disk);
//   refused             nothing fits: check_fits() throws with the numbers.
//
// Warm generations of the first three read nothing from disk; the order above is the automatic
// preference. A CPU plan keeps everything in host memory (resident, or sequential when it does not
// fit).
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

enum class PlanDecision { kResident, kStreamConditioner, kCpuOffload, kSequential, kRefused };
// "resident", "stream-conditioner", "cpu-offload", "sequential", "refused".
const char* plan_decision_name(PlanDecision d);

// Where a component's weights live under a plan.
enum class Placement {
  kDevice,    // on the device for the engine's lifetime
  kStreamed,  // conditioner: decoder layers in pinned host memory, two device slots
  kOffload,   // DiT: dit_resident_blocks blocks on the device, the others streamed from pinned host
  kReleased,  // sequential: loaded for its stage, released after use, re-read from disk
  kHost,      // CPU plans: in host memory
};
// "device", "streamed", "offload", "released", "host".
const char* placement_name(Placement p);

// The largest request the plan must hold activations for (defaults: the released 1344x768x124).
struct PlanRequest {
  int64_t height = 768;
  int64_t width = 1344;
  int64_t num_frames = 124;
  int64_t text_tokens = 300;
  // "t2va" | "fl2va" | "ref2va". fl2va and ref2va also need the conditioner's vision tower and
  // the video VAE's encoder; ref2va runs transformer_ref/ and the audio VAE's encoder.
  std::string workflow = "t2va";
  // Canvas-sized images the request conditions on (keyframes or references): they add packed DiT
  // rows and vision-tower patches. -1: the workflow's default (t2va 0, fl2va 2, ref2va 3).
  int64_t condition_images = -1;
};

struct ComponentPlan {
  std::string name;    // "conditioner", "transformer", "vae", "audio_vae"
  std::string folder;  // the repository component: "text_encoder", "transformer" or
                       // "transformer_ref", "vae", "audio_vae"
  Placement placement = Placement::kDevice;
  uint64_t weights_bytes = 0;  // on the device under this plan, streaming slots included
  uint64_t full_bytes = 0;     // every tensor the request needs, in the dtype it runs in
  uint64_t host_bytes = 0;     // pinned host memory (streamed layers or blocks)
  uint64_t work_bytes = 0;     // peak working memory of its stages
  uint64_t file_bytes = 0;     // the needed tensors as stored (what a load reads)
};

// One stage's estimate, separately named so that the engine can compare it with the memory pool's
// high-water mark over the stage. Stages: "conditioner", "vae encode" (fl2va, ref2va),
// "audio encode" (ref2va), "denoise", "vae decode", "audio decode".
struct StagePeak {
  std::string name;
  uint64_t work_bytes = 0;     // the stage's own working set (activations and workspaces)
  uint64_t weights_bytes = 0;  // device weights resident during the stage under this plan
  uint64_t device_bytes() const { return weights_bytes + work_bytes; }  // reserve not included
};

// What one decision would need; the plan keeps all of them for the reason and check_fits.
struct PlanAlternative {
  PlanDecision decision = PlanDecision::kResident;
  bool possible = false;    // applicable at all (forced flags and unified memory exclude some)
  bool fits = false;        // device peak and pinned host memory both fit
  uint64_t peak_bytes = 0;  // device peak, reserve included
  uint64_t host_pinned_bytes = 0;
  int64_t dit_resident_blocks = 0;  // cpu-offload: blocks that stay on the device
};

struct MemoryPlan {
  Device device = Device::cpu();
  PlanDecision decision = PlanDecision::kResident;
  // Derived from the decision; what the engine reads.
  bool sequential = false;            // release after use (kSequential)
  bool cpu_offload = false;           // the DiT streams blocks from pinned host memory
  bool conditioner_streamed = false;  // the conditioner's layers stream from pinned host memory
  bool unified_memory = false;        // integrated GPU / host page tables (GB10 and the like)
  int64_t dit_num_blocks = 0;
  int64_t dit_resident_blocks = 0;  // == dit_num_blocks unless the DiT is offloaded
  // Device figures (CPU plans: the host's).
  uint64_t device_total = 0;
  uint64_t device_free = 0;
  uint64_t host_total = 0;
  uint64_t host_available = 0;
  uint64_t host_pinned_bytes = 0;  // what the plan pins
  uint64_t peak_bytes = 0;         // device peak of the chosen plan, reserve included
  uint64_t reserve = 0;            // device headroom: library workspaces, pool fragmentation
  uint64_t host_reserve = 0;       // host memory never pinned: the process and the OS
  std::vector<ComponentPlan> components;
  std::vector<StagePeak> stage_peaks;
  // What each choice would need, in the automatic order: resident, stream-conditioner,
  // cpu-offload, sequential (CPU plans: resident, sequential).
  std::vector<PlanAlternative> alternatives;
  std::string reason;  // why this decision, with numbers

  const ComponentPlan* find(const std::string& name) const;  // nullptr when absent
  const StagePeak* stage(const std::string& name) const;     // nullptr when absent
  const PlanAlternative* alternative(PlanDecision d) const;  // nullptr when absent
};

struct PlanOptions {
  Device device = Device::cpu();
  SequentialLoad sequential = SequentialLoad::kAuto;  // kOn forces sequential, kOff forbids it
  bool cpu_offload = false;  // forces at least cpu-offload; every DiT block then streams
  PlanRequest request{};
  // Dtypes the components run in (bytes are counted in these). On CUDA the engine runs the DiT in
  // bf16 (float32 islands stay float32, h3_dit_spec.md §1.7), the conditioner in bf16 and the video
  // VAE decoder's GEMM operands in float16 (the reference's autocast); the CPU runs float32.
  bool dit_bf16 = false;
  bool dit_fp8 = false;  // --dit-dtype fp8: the blocks' projections at one byte per value
  bool conditioner_fp8 = false;  // --text-encoder-dtype fp8: the decoder layers' projections too
  bool conditioner_bf16 = false;
  bool vae_f16_gemm = false;
  int64_t vae_tile_batch = 0;  // --vae-tile-batch (0: automatic, as the video VAE decides)
  // The DiT forward's shape of working memory: the engine runs bf16 with eager rounding
  // (DitRounding::kEager, more temporaries than the fused ops) and dense or VSA-H3 attention.
  bool dit_fused_rounding = false;
  bool vsa_attention = false;
  // Tests and what-if tools inject memory sizes here instead of asking the driver and the OS: with
  // device_free_override set, no CUDA call is made at all.
  std::optional<uint64_t> device_free_override;
  std::optional<uint64_t> device_total_override;  // defaults to the free override
  std::optional<bool> unified_memory_override;
  std::optional<uint64_t> host_available_override;
  std::optional<uint64_t> host_total_override;  // defaults to the available override
};

// Unified memory (an integrated GPU, or a device that reads pageable host memory through the
// host's page tables, e.g. GB10 / Grace): device and host share one pool, so auto goes sequential.
// False in builds without CUDA.
bool device_has_unified_memory(int device);

// The host's memory: MemTotal and MemAvailable from /proc/meminfo (sysconf when unreadable).
void host_memory_info(uint64_t* available_bytes, uint64_t* total_bytes);

MemoryPlan plan_memory(const io::Repository& repo, const PlanOptions& options);

// Throws ErrorCode::kOutOfMemory with the plan's reason (device needed vs free, host needed vs
// available, what each alternative would need) when the plan is refused, and for a CUDA plan whose
// peak exceeds the device's free memory (a plan edited by hand). Other plans return.
void check_fits(const MemoryPlan& plan);

// One line: decision, components, peak, reason; for the log (`h3 generate -v`) and the receipt.
std::string describe(const MemoryPlan& plan);

// "46.9 GiB", "312.0 MiB", "0 B".
std::string format_bytes(uint64_t bytes);
// Parses a size such as "140GiB", "80GB", "24 GiB", "512MiB", "1.5TB" (units B, KB, MB, GB, TB,
// KiB, MiB, GiB, TiB; case-insensitive). Throws kInvalidArgument naming `flag` otherwise.
uint64_t parse_memory_size(const std::string& text, const std::string& flag);

}  // namespace h3::pipeline
