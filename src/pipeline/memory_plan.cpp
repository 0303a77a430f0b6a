#include "pipeline/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "pipeline/geometry.h"

namespace h3::pipeline {

SequentialLoad parse_sequential_load(const std::string& text) {
  if (text == "auto") return SequentialLoad::kAuto;
  if (text == "on") return SequentialLoad::kOn;
  if (text == "off") return SequentialLoad::kOff;
  fail(ErrorCode::kInvalidArgument, "sequential load must be auto, on or off, got '", text, "'");
}

const char* sequential_load_name(SequentialLoad s) {
  switch (s) {
    case SequentialLoad::kAuto: return "auto";
    case SequentialLoad::kOn: return "on";
    case SequentialLoad::kOff: return "off";
  }
  return "?";
}

const ComponentBytes* MemoryPlan::find(const std::string& name) const {
  for (const ComponentBytes& c : components)
    if (c.name == name) return &c;
  return nullptr;
}

namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

int64_t cfg_int(const nlohmann::json& j, const char* key, int64_t fallback) {
  if (j.is_object() && j.contains(key) && j.at(key).is_number_integer()) return j.at(key).get<int64_t>();
  return fallback;
}

// A component's weights as it will run: bf16-stored tensors widen to float32 when the component
// runs in float32 (float32 islands stay float32). `blocks_*`: the DiT's main blocks
// (transformer_blocks.N.*), the part --cpu-offload streams from host memory.
struct Weights {
  uint64_t run = 0;      // all tensors, in run dtype
  uint64_t file = 0;     // as stored
  uint64_t blocks = 0;   // main blocks, run dtype
  uint64_t largest_block = 0;
};

Weights weights_of(const io::Repository& repo, const std::string& name, bool bf16) {
  Weights w;
  if (!repo.has(name)) return w;
  const io::Checkpoint ck = repo.checkpoint(name);
  std::map<std::string, uint64_t> per_block;
  for (const std::string& t : ck.names()) {
    const io::TensorInfo& info = ck.info(t);
    const uint64_t n = static_cast<uint64_t>(shape_numel(info.shape));
    const uint64_t elem = dtype_size(info.dtype);
    const uint64_t run = bf16 ? n * elem : n * std::max<uint64_t>(elem, 4);
    w.run += run;
    w.file += info.nbytes;
    static const std::string kBlock = "transformer_blocks.";
    if (t.rfind(kBlock, 0) == 0) {
      const size_t dot = t.find('.', kBlock.size());
      per_block[t.substr(0, dot)] += run;
      w.blocks += run;
    }
  }
  for (const auto& [b, bytes] : per_block) w.largest_block = std::max(w.largest_block, bytes);
  return w;
}

// DiT activations (h3_dit_spec.md §3-§4): the packed joint sequence is text + video + audio rows.
// One block keeps alive, per row: the float32 residual stream and its modulated norm (2 x d x 4 B),
// q, k, v, the attention output and the projection (5 x d x es), the FFN input and its SwiGLU
// halves (3 x ffn x es). Doubled for the classifier-free-guidance branch and the step's latents
// and velocities held across the block loop; plus the attention's per-row, per-head softmax
// statistics (flash / VSA workspaces are O(rows x heads)).
uint64_t dit_activation_bytes(const nlohmann::json& cfg, const PlanRequest& r, bool bf16) {
  const int64_t d = cfg_int(cfg, "hidden_size", 5376);
  const int64_t ffn = cfg_int(cfg, "ffn_dim", 4 * d);
  const int64_t heads = cfg_int(cfg, "num_attention_heads", 56);
  const int64_t es = bf16 ? 2 : 4;
  const TargetGeometry g =
      make_target_geometry(Canvas{r.height, r.width}, align_num_frames(std::max<int64_t>(r.num_frames, 1)));
  const int64_t rows = g.video_rows() + g.audio_rows() + r.text_tokens;
  const int64_t per_row = 2 * d * 4 + 5 * d * es + 3 * ffn * es;
  return static_cast<uint64_t>(2 * rows * per_row + rows * heads * 4 * 4);
}

// Conditioner (h3_components_spec.md §1): prompt tokens through the Qwen3-VL text stack. The
// hidden states of every layer may be kept (the DiT reads selected layers), plus one layer's
// working set (q/k/v/o: 4 x d, MLP: 3 x intermediate) and eager attention scores
// (heads x T x T float32).
uint64_t conditioner_activation_bytes(const nlohmann::json& cfg, const PlanRequest& r, bool bf16) {
  const nlohmann::json t = cfg.is_object() && cfg.contains("text_config") ? cfg.at("text_config") : cfg;
  const int64_t d = cfg_int(t, "hidden_size", 5120);
  const int64_t layers = cfg_int(t, "num_hidden_layers", 64);
  const int64_t inter = cfg_int(t, "intermediate_size", 5 * d);
  const int64_t heads = cfg_int(t, "num_attention_heads", 64);
  const int64_t es = bf16 ? 2 : 4;
  const int64_t tok = std::max<int64_t>(r.text_tokens, 1);
  return static_cast<uint64_t>(tok * d * es * (layers + 1) + tok * (4 * d + 3 * inter) * es * 2 +
                               heads * tok * tok * 4);
}

// Video VAE decode (h3_components_spec.md §2.6-§2.8): tiles of 256 px (16 x 16 latents) over a
// 7-latent window are decoded in batches. Per token row the transformer decoder keeps a float32
// stream (5 x width) and half-precision q/k/v/attention/FFN buffers (9 x width + 3 x ffn), counted
// for a batch of 16 tiles (more than the automatic batch takes) and doubled for the pixel head's
// upsampling; plus the whole decoded clip in float32 (3 x frames x H x W), which the stitcher
// holds before the frames leave the device.
uint64_t vae_activation_bytes(const nlohmann::json& cfg, const PlanRequest& r) {
  const int64_t width = cfg_int(cfg, "decoder_num_attention_heads", 32) *
                        cfg_int(cfg, "decoder_attention_head_dim", 64);
  const int64_t ffn = width * cfg_int(cfg, "decoder_ffn_mult", 4);
  const int64_t rows = 16 * 7 * 16 * 16;
  const int64_t per_row = 5 * width * 4 + (9 * width + 3 * ffn) * 2;
  const int64_t clip = 3 * std::max<int64_t>(r.num_frames, 1) * r.height * r.width * 4;
  return static_cast<uint64_t>(2 * rows * per_row + clip);
}

// Audio VAE decode (h3_components_spec.md §3): the upsampling stack multiplies the length by each
// rate while halving the channels; the largest stage (length x channels, float32, stereo) times 8
// buffers (the residual blocks' branches and the snake activations).
uint64_t audio_vae_activation_bytes(const nlohmann::json& cfg, const PlanRequest& r) {
  const int64_t n = audio_latent_count(align_num_frames(std::max<int64_t>(r.num_frames, 1)));
  int64_t ch = cfg_int(cfg, "decoder_dim", 1024);
  int64_t len = n, largest = n * ch;
  if (cfg.is_object() && cfg.contains("decoder_rates") && cfg.at("decoder_rates").is_array()) {
    for (const auto& rate : cfg.at("decoder_rates")) {
      if (!rate.is_number_integer()) break;
      len *= rate.get<int64_t>();
      ch = std::max<int64_t>(ch / 2, 1);
      largest = std::max(largest, len * ch);
    }
  }
  return static_cast<uint64_t>(largest * 4 * kAudioChannels * 8);
}

const nlohmann::json& config_of(const io::Repository& repo, const std::string& name) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  return repo.has(name) ? repo.component(name).config : kEmpty;
}

// Host memory for CPU plans (what the OS reports available now).
void host_memory(uint64_t* free_b, uint64_t* total_b) {
  const long page = ::sysconf(_SC_PAGESIZE);
  const long total = ::sysconf(_SC_PHYS_PAGES);
  const long avail = ::sysconf(_SC_AVPHYS_PAGES);
  *total_b = page > 0 && total > 0 ? static_cast<uint64_t>(page) * static_cast<uint64_t>(total) : 0;
  *free_b = page > 0 && avail > 0 ? static_cast<uint64_t>(page) * static_cast<uint64_t>(avail) : 0;
}

}  // namespace

MemoryPlan plan_memory(const io::Repository& repo, const PlanOptions& o) {
  MemoryPlan plan;
  plan.device = o.device;
  plan.cpu_offload = o.cpu_offload;
  const PlanRequest& r = o.request;
  H3_CHECK(r.height > 0 && r.width > 0 && r.num_frames > 0 && r.text_tokens >= 0,
           ErrorCode::kInvalidArgument, "memory plan: request ", r.width, "x", r.height, "x",
           r.num_frames, " frames with ", r.text_tokens, " text tokens is not a valid size");
  const bool ref = r.workflow == "ref2va";
  const std::string dit_name = ref && repo.has("transformer_ref") ? "transformer_ref" : "transformer";

  const Weights cond = weights_of(repo, "text_encoder", o.conditioner_bf16);
  const Weights dit = weights_of(repo, dit_name, o.dit_bf16);
  // The VAEs keep float32 weights (the video VAE's fp16 autocast casts per op), encoder included.
  const Weights vae = weights_of(repo, "vae", false);
  const Weights avae = weights_of(repo, "audio_vae", false);

  // --cpu-offload: the main blocks stay in pinned host memory; the device holds the rest of the
  // DiT and two blocks (the one computing and the one being copied in).
  plan.dit_weights_full = dit.run;
  plan.dit_weights_offload = dit.run - dit.blocks + 2 * dit.largest_block;
  const uint64_t dit_resident = o.cpu_offload ? plan.dit_weights_offload : plan.dit_weights_full;

  plan.components.push_back({"conditioner", cond.run,
                             conditioner_activation_bytes(config_of(repo, "text_encoder"), r,
                                                          o.conditioner_bf16),
                             cond.file});
  plan.components.push_back({"transformer", dit_resident,
                             dit_activation_bytes(config_of(repo, dit_name), r, o.dit_bf16), dit.file});
  plan.components.push_back({"vae", vae.run, vae_activation_bytes(config_of(repo, "vae"), r), vae.file});
  plan.components.push_back({"audio_vae", avae.run,
                             audio_vae_activation_bytes(config_of(repo, "audio_vae"), r), avae.file});
  const ComponentBytes& c_cond = plan.components[0];
  const ComponentBytes& c_dit = plan.components[1];
  const ComponentBytes& c_vae = plan.components[2];
  const ComponentBytes& c_avae = plan.components[3];

  // Stages run one after another, so activations do not add up; weights resident together do.
  const uint64_t late_weights = c_dit.weights + c_vae.weights + c_avae.weights;
  const uint64_t late_act = std::max({c_dit.activations, c_vae.activations, c_avae.activations});
  const uint64_t together_raw = c_cond.weights + late_weights + std::max(late_act, c_cond.activations);
  const uint64_t sequential_raw =
      std::max(c_cond.weights + c_cond.activations, late_weights + late_act);

  if (!o.device.is_cuda()) {
    uint64_t free_b = 0, total_b = 0;
    host_memory(&free_b, &total_b);
    plan.device_free = free_b;
    plan.device_total = total_b;
    plan.peak_together = together_raw;
    plan.peak_sequential = sequential_raw;
    const bool fits = free_b == 0 || together_raw <= free_b;
    switch (o.sequential) {
      case SequentialLoad::kOn: plan.sequential = true; plan.reason = "cpu: forced on"; break;
      case SequentialLoad::kOff: plan.sequential = false; plan.reason = "cpu: forced off"; break;
      case SequentialLoad::kAuto:
        plan.sequential = !fits;
        plan.reason = fits ? "cpu: all components fit in available host memory"
                           : "cpu: components do not fit together in available host memory";
        break;
    }
    plan.peak_bytes = plan.sequential ? sequential_raw : together_raw;
    return plan;
  }

  if (o.device_free_override) {
    plan.device_free = *o.device_free_override;
    plan.device_total = o.device_total_override.value_or(*o.device_free_override);
  } else {
    size_t free_b = 0, total_b = 0;
    cuda_memory_info(o.device.index, &free_b, &total_b);
    plan.device_free = free_b;
    plan.device_total = total_b;
  }
  plan.unified_memory = o.unified_memory_override
                            ? *o.unified_memory_override
                            : (o.device_free_override ? false : device_has_unified_memory(o.device.index));
  // Headroom beyond the estimates: cuBLAS/cuBLASLt workspaces, the caching of freed blocks and
  // fragmentation (1 GiB + 3% of the device).
  plan.reserve = kGiB + plan.device_total / 33;
  plan.peak_together = together_raw + plan.reserve;
  plan.peak_sequential = sequential_raw + plan.reserve;
  const bool fits_together = plan.peak_together <= plan.device_free;
  switch (o.sequential) {
    case SequentialLoad::kOn: plan.sequential = true; plan.reason = "forced on"; break;
    case SequentialLoad::kOff: plan.sequential = false; plan.reason = "forced off"; break;
    case SequentialLoad::kAuto:
      if (plan.unified_memory) {
        plan.sequential = true;
        plan.reason = "unified memory: the device shares the host's memory";
      } else {
        plan.sequential = !fits_together;
        plan.reason = fits_together ? "all components fit together"
                                    : "components do not fit together (" + gb(plan.peak_together) +
                                          " > " + gb(plan.device_free) + " free)";
      }
      break;
  }
  plan.peak_bytes = plan.sequential ? plan.peak_sequential : plan.peak_together;
  return plan;
}

void check_fits(const MemoryPlan& plan) {
  if (!plan.device.is_cuda()) return;
  if (plan.peak_bytes <= plan.device_free) return;
  std::string hints;
  if (!plan.sequential)
    hints += "; --sequential-load on would need " + gb(plan.peak_sequential);
  // --cpu-offload keeps the DiT's blocks in pinned host memory (dit_weights_offload resident).
  if (!plan.cpu_offload && plan.dit_weights_full > plan.dit_weights_offload)
    hints += "; --cpu-offload would keep " + gb(plan.dit_weights_full - plan.dit_weights_offload) +
             " of DiT weights in host memory";
  const ComponentBytes* dit = plan.find("transformer");
  hints += "; a smaller canvas or fewer frames lowers the activations (DiT " +
           gb(dit ? dit->activations : 0) + ")";
  fail(ErrorCode::kOutOfMemory, "the memory plan does not fit ", plan.device.str(), ": it needs ",
       gb(plan.peak_bytes), " at its peak but ", gb(plan.device_free), " of ",
       gb(plan.device_total), " are free (", describe(plan), ")", hints);
}

std::string describe(const MemoryPlan& plan) {
  std::ostringstream os;
  os << "sequential=" << (plan.sequential ? "on" : "off") << " (" << plan.reason << ")";
  if (plan.cpu_offload) os << ", cpu-offload";
  for (const ComponentBytes& c : plan.components)
    os << ", " << c.name << " " << gb(c.weights) << " weights + " << gb(c.activations) << " work";
  os << ", peak " << gb(plan.peak_bytes);
  if (plan.reserve) os << " (reserve " << gb(plan.reserve) << " included)";
  return os.str();
}

}  // namespace h3::pipeline
