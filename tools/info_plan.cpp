// `h3 info --plan MODEL`: the memory plan of a request on a device, from the checkpoint headers
// alone (no weight is read, no GPU needed when --device-memory is given).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "io/repo.h"
#include "pipeline/geometry.h"
#include "pipeline/memory_plan.h"

namespace h3::cli {

namespace {

namespace pl = h3::pipeline;

int64_t parse_count(const std::string& flag, const std::string& value) {
  H3_CHECK(!value.empty() && value.size() < 10 &&
               value.find_first_not_of("0123456789") == std::string::npos,
           ErrorCode::kInvalidArgument, flag, " expects a positive integer, got '", value, "'");
  return std::stoll(value);
}

void print_usage() {
  std::printf(
      "usage: h3 info --plan MODEL [--device-memory SIZE] [--host-memory SIZE] [--device D]\n"
      "                 [--workflow t2va|fl2va|ref2va] [--height H --width W] [--num-frames F]\n"
      "                 [--text-tokens N] [--sequential-load | --no-sequential-load]\n"
      "                 [--cpu-offload] [--unified-memory] [--dit-dtype bf16|fp8]\n"
      "                 [--text-encoder-dtype bf16|fp8] [--json]\n\n"
      "Plans where each component of MODEL lives for one request, as `h3 generate` would, from\n"
      "the checkpoint headers alone: the weights as they run (the tensors loaded, in their run\n"
      "dtypes), each stage's working memory, and the decision: resident, stream-conditioner,\n"
      "cpu-offload, sequential or refused. Exit status 1 when the plan is refused.\n\n"
      "  --device-memory SIZE  plan for a CUDA device of SIZE free memory (140GiB, 80GB, ...);\n"
      "                        without it: GPU 0 when this build sees one, else the CPU\n"
      "  --host-memory SIZE    host memory available for pinning (default: this machine's)\n"
      "  --device D            cpu or cuda[:N] (default: cuda:0 when planning for a GPU)\n"
      "  --unified-memory      the device shares the host's memory (GB10 and the like)\n"
      "  --dit-dtype, --text-encoder-dtype  fp8: the projections at one byte (as h3 generate)\n"
      "  --json                print only the plan as JSON\n"
      "Request defaults: t2va, 1344x768, 124 frames (fl2va: 192), 300 text tokens.\n");
}

nlohmann::ordered_json plan_json(const pl::MemoryPlan& p, const pl::PlanRequest& r,
                                 const std::string& note) {
  nlohmann::ordered_json j;
  j["decision"] = pl::plan_decision_name(p.decision);
  j["peak_bytes"] = p.peak_bytes;
  j["reason"] = p.reason;
  j["device"] = p.device.str();
  j["device_memory"] = p.device_free;
  j["device_total"] = p.device_total;
  j["host_memory"] = p.host_available;
  j["host_total"] = p.host_total;
  j["host_pinned_bytes"] = p.host_pinned_bytes;
  j["reserve_bytes"] = p.reserve;
  j["unified_memory"] = p.unified_memory;
  j["sequential"] = p.sequential;
  j["cpu_offload"] = p.cpu_offload;
  j["conditioner_streamed"] = p.conditioner_streamed;
  j["dit_resident_blocks"] = p.dit_resident_blocks;
  j["dit_num_blocks"] = p.dit_num_blocks;
  j["request"] = {{"workflow", r.workflow},
                  {"height", r.height},
                  {"width", r.width},
                  {"num_frames", r.num_frames},
                  {"text_tokens", r.text_tokens}};
  nlohmann::ordered_json comps = nlohmann::ordered_json::array();
  for (const pl::ComponentPlan& c : p.components) {
    comps.push_back({{"name", c.name},
                     {"folder", c.folder},
                     {"weights_bytes", c.weights_bytes},
                     {"full_bytes", c.full_bytes},
                     {"work_bytes", c.work_bytes},
                     {"host_bytes", c.host_bytes},
                     {"file_bytes", c.file_bytes},
                     {"placement", pl::placement_name(c.placement)}});
  }
  j["components"] = comps;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const pl::StagePeak& s : p.stage_peaks) {
    stages.push_back({{"name", s.name},
                      {"work_bytes", s.work_bytes},
                      {"weights_bytes", s.weights_bytes},
                      {"device_bytes", s.device_bytes()}});
  }
  j["stage_peaks"] = stages;
  nlohmann::ordered_json alts = nlohmann::ordered_json::array();
  for (const pl::PlanAlternative& a : p.alternatives) {
    alts.push_back({{"decision", pl::plan_decision_name(a.decision)},
                    {"possible", a.possible},
                    {"fits", a.fits},
                    {"peak_bytes", a.peak_bytes},
                    {"host_pinned_bytes", a.host_pinned_bytes},
                    {"dit_resident_blocks", a.dit_resident_blocks}});
  }
  j["alternatives"] = alts;
  if (!note.empty()) j["note"] = note;
  return j;
}

void print_text(const std::string& model, const pl::MemoryPlan& p, const pl::PlanRequest& r,
                const std::string& note) {
  using pl::format_bytes;
  std::printf("memory plan for %s: %s, %lldx%lld, %lld frames, %lld text tokens\n", model.c_str(),
              r.workflow.c_str(), static_cast<long long>(r.width), static_cast<long long>(r.height),
              static_cast<long long>(r.num_frames), static_cast<long long>(r.text_tokens));
  if (!note.empty()) std::printf("note: %s\n", note.c_str());
  if (p.device.is_cuda()) {
    std::printf("device: %s, %s free of %s%s; host: %s available of %s\n", p.device.str().c_str(),
                format_bytes(p.device_free).c_str(), format_bytes(p.device_total).c_str(),
                p.unified_memory ? " (unified memory)" : "", format_bytes(p.host_available).c_str(),
                format_bytes(p.host_total).c_str());
  } else {
    std::printf("device: cpu, host memory %s available of %s\n",
                format_bytes(p.host_available).c_str(), format_bytes(p.host_total).c_str());
  }
  std::printf("\n%-12s %-15s %12s %12s %12s %12s\n", "component", "folder", "weights", "work",
              "pinned host", "placement");
  for (const pl::ComponentPlan& c : p.components) {
    std::printf("%-12s %-15s %12s %12s %12s %12s\n", c.name.c_str(), c.folder.c_str(),
                format_bytes(c.weights_bytes).c_str(), format_bytes(c.work_bytes).c_str(),
                c.host_bytes ? format_bytes(c.host_bytes).c_str() : "-",
                pl::placement_name(c.placement));
  }
  std::printf("\n%-14s %12s %12s %12s\n", "stage", "weights", "work", "device");
  for (const pl::StagePeak& s : p.stage_peaks) {
    std::printf("%-14s %12s %12s %12s\n", s.name.c_str(), format_bytes(s.weights_bytes).c_str(),
                format_bytes(s.work_bytes).c_str(), format_bytes(s.device_bytes()).c_str());
  }
  std::printf("\ndecision: %s\n", pl::plan_decision_name(p.decision));
  if (p.decision == pl::PlanDecision::kRefused) {
    // The table shows the layout of the choice that needs the least device memory.
    for (const pl::PlanAlternative& a : p.alternatives) {
      if (a.possible && a.peak_bytes == p.peak_bytes) {
        std::printf("closest choice (shown above): %s\n", pl::plan_decision_name(a.decision));
        break;
      }
    }
  }
  if (p.cpu_offload) {
    std::printf("DiT blocks on the device: %lld of %lld\n",
                static_cast<long long>(p.dit_resident_blocks),
                static_cast<long long>(p.dit_num_blocks));
  }
  std::printf("peak: %s", format_bytes(p.peak_bytes).c_str());
  if (p.reserve) std::printf(" (reserve %s included)", format_bytes(p.reserve).c_str());
  std::printf("; pinned host: %s\n", format_bytes(p.host_pinned_bytes).c_str());
  std::printf("reason: %s\n", p.reason.c_str());
}

}  // namespace

int run_info_plan(const std::vector<std::string>& args) {
  std::string model;
  std::optional<uint64_t> device_memory, host_memory;
  std::optional<std::string> device_text;
  pl::PlanOptions po;
  pl::PlanRequest& r = po.request;
  bool as_json = false, unified = false;
  std::optional<int64_t> height, width, num_frames;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--plan") continue;
    if (a == "--help" || a == "-h") {
      print_usage();
      return 0;
    }
    if (a == "--json") {
      as_json = true;
      continue;
    }
    if (a == "--sequential-load" || a == "--no-sequential-load") {
      po.sequential = a == "--sequential-load" ? pl::SequentialLoad::kOn : pl::SequentialLoad::kOff;
      continue;
    }
    if (a == "--cpu-offload") {
      po.cpu_offload = true;
      continue;
    }
    if (a == "--unified-memory") {
      unified = true;
      continue;
    }
    if (a.empty() || a[0] != '-') {
      H3_CHECK(model.empty(), ErrorCode::kInvalidArgument, "expected one model path, got '", model,
               "' and '", a, "'");
      model = a;
      continue;
    }
    H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a, " needs a value");
    const std::string& v = args[++i];
    if (a == "--device-memory") {
      device_memory = pl::parse_memory_size(v, a);
    } else if (a == "--host-memory") {
      host_memory = pl::parse_memory_size(v, a);
    } else if (a == "--device") {
      device_text = v;
    } else if (a == "--workflow") {
      H3_CHECK(v == "t2va" || v == "fl2va" || v == "ref2va", ErrorCode::kInvalidArgument,
               "--workflow is t2va, fl2va or ref2va, got '", v, "'");
      r.workflow = v;
    } else if (a == "--height") {
      height = parse_count(a, v);
    } else if (a == "--width") {
      width = parse_count(a, v);
    } else if (a == "--num-frames") {
      num_frames = parse_count(a, v);
    } else if (a == "--text-tokens") {
      r.text_tokens = parse_count(a, v);
    } else if (a == "--dit-dtype" || a == "--text-encoder-dtype") {
      H3_CHECK(v == "bf16" || v == "fp8", ErrorCode::kInvalidArgument, a,
               " must be bf16 or fp8, got '", v, "'");
      (a == "--dit-dtype" ? po.dit_fp8 : po.conditioner_fp8) = v == "fp8";
    } else {
      fail(ErrorCode::kInvalidArgument, "unknown option '", a,
           "' for h3 info --plan (see h3 info --plan --help)");
    }
  }
  H3_CHECK(!model.empty(), ErrorCode::kInvalidArgument,
           "missing model path (usage: h3 info --plan MODEL [--device-memory SIZE] ...)");
  H3_CHECK(height.has_value() == width.has_value(), ErrorCode::kInvalidArgument,
           "--height and --width go together");
  if (height) {
    // Multiples of the model's canvas multiple (its VAE ratio times the DiT patch): the plan's
    // geometry checks that against the repository's VAE.
    H3_CHECK(*height > 0 && *width > 0, ErrorCode::kInvalidArgument,
             "--height/--width must be positive, got ", *height, "x", *width);
    r.height = *height;
    r.width = *width;
  }
  // As `h3 generate`: FL2VA's preset is 8 s (h3_components_spec.md §4.2), the others 124 frames.
  r.num_frames = num_frames.value_or(r.workflow == "fl2va" ? 192 : r.num_frames);
  H3_CHECK(r.num_frames >= 1, ErrorCode::kInvalidArgument, "--num-frames must be >= 1");

  // The device: what was asked, else GPU 0 when a CUDA build sees one or --device-memory is given,
  // else the CPU.
  std::string note;
  Device device = Device::cpu();
  if (device_text) {
    device = parse_device(*device_text);
  } else if (device_memory || cuda_available()) {
    device = Device::cuda(0);
  } else {
    note = "no GPU found and no --device-memory given: planning for the CPU";
  }
  H3_CHECK(!device_memory || device.is_cuda(), ErrorCode::kInvalidArgument,
           "--device-memory applies to a CUDA device, not to ", device.str());
  po.device = device;
  if (device.is_cuda()) {
    // The engine's CUDA defaults: bf16 DiT and conditioner, fp16-autocast VAE decoder.
    po.dit_bf16 = true;
    po.conditioner_bf16 = true;
    po.vae_f16_gemm = true;
    if (device_memory) {
      po.device_free_override = *device_memory;
      po.device_total_override = *device_memory;
      po.unified_memory_override = unified;
    } else if (unified) {
      po.unified_memory_override = true;
    }
  } else {
    H3_CHECK(!unified, ErrorCode::kInvalidArgument, "--unified-memory applies to a CUDA device");
  }
  if (host_memory) {
    po.host_available_override = *host_memory;
    po.host_total_override = *host_memory;
  }

  const io::Repository repo = io::Repository::open(model);
  const pl::MemoryPlan plan = pl::plan_memory(repo, po);
  if (as_json) {
    std::printf("%s\n", plan_json(plan, r, note).dump(2).c_str());
  } else {
    print_text(model, plan, r, note);
  }
  if (plan.decision == pl::PlanDecision::kRefused) {
    if (!as_json) std::fprintf(stderr, "h3 info: error: the memory plan is refused\n");
    return 1;
  }
  return 0;
}

}  // namespace h3::cli
