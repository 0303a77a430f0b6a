#include "pipeline/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "models/fp8_checkpoint.h"
#include "models/schema.h"
#include "models/video_vae/video_vae_config.h"
#include "models/video_vae/video_vae_decoder.h"
#include "models/video_vae/video_vae_tiling.h"
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
    case SequentialLoad::kAuto:
      return "auto";
    case SequentialLoad::kOn:
      return "on";
    case SequentialLoad::kOff:
      return "off";
  }
  return "?";
}

const char* plan_decision_name(PlanDecision d) {
  switch (d) {
    case PlanDecision::kResident:
      return "resident";
    case PlanDecision::kStreamConditioner:
      return "stream-conditioner";
    case PlanDecision::kCpuOffload:
      return "cpu-offload";
    case PlanDecision::kSequential:
      return "sequential";
    case PlanDecision::kRefused:
      return "refused";
  }
  return "?";
}

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kDevice:
      return "device";
    case Placement::kStreamed:
      return "streamed";
    case Placement::kOffload:
      return "offload";
    case Placement::kReleased:
      return "released";
    case Placement::kHost:
      return "host";
  }
  return "?";
}

const ComponentPlan* MemoryPlan::find(const std::string& name) const {
  for (const ComponentPlan& c : components)
    if (c.name == name) return &c;
  return nullptr;
}

const StagePeak* MemoryPlan::stage(const std::string& name) const {
  for (const StagePeak& s : stage_peaks)
    if (s.name == name) return &s;
  return nullptr;
}

const PlanAlternative* MemoryPlan::alternative(PlanDecision d) const {
  for (const PlanAlternative& a : alternatives)
    if (a.decision == d) return &a;
  return nullptr;
}

std::string format_bytes(uint64_t bytes) {
  constexpr double kKiB = 1024.0;
  const double b = static_cast<double>(bytes);
  char buf[32];
  if (b >= kKiB * kKiB * kKiB) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", b / (kKiB * kKiB * kKiB));
  } else if (b >= kKiB * kKiB) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (kKiB * kKiB));
  } else if (b >= kKiB) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / kKiB);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

uint64_t parse_memory_size(const std::string& text, const std::string& flag) {
  auto bad = [&]() -> uint64_t {
    fail(ErrorCode::kInvalidArgument, flag, " expects a size such as 140GiB, 80GB or 512MiB, got '",
         text, "'");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  const std::string number = text.substr(0, i);
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".")
    return bad();
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit;
  for (; i < text.size(); ++i)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  static const std::map<std::string, double> kUnits = {
      {"b", 1.0},         {"kb", 1e3},           {"mb", 1e6},
      {"gb", 1e9},        {"tb", 1e12},          {"kib", 1024.0},
      {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  const auto u = kUnits.find(unit);
  if (u == kUnits.end()) return bad();
  const double value = std::strtod(number.c_str(), nullptr) * u->second;
  if (!(value >= 1.0) || value > 1e18) return bad();
  return static_cast<uint64_t>(std::llround(value));
}

void host_memory_info(uint64_t* available_bytes, uint64_t* total_bytes) {
  uint64_t total = 0, available = 0;
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = value * 1024;
    if (key == "MemAvailable:") available = value * 1024;
  }
  if (total == 0 || available == 0) {
    const long page = ::sysconf(_SC_PAGESIZE);
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long avail = ::sysconf(_SC_AVPHYS_PAGES);
    if (total == 0 && page > 0 && pages > 0)
      total = static_cast<uint64_t>(page) * static_cast<uint64_t>(pages);
    if (available == 0 && page > 0 && avail > 0)
      available = static_cast<uint64_t>(page) * static_cast<uint64_t>(avail);
  }
  *available_bytes = available;
  *total_bytes = total;
}

namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

int64_t cfg_int(const nlohmann::json& j, const char* key, int64_t fallback) {
  if (j.is_object() && j.contains(key) && j.at(key).is_number_integer())
    return j.at(key).get<int64_t>();
  return fallback;
}

const nlohmann::json& cfg_obj(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  return j.is_object() && j.contains(key) && j.at(key).is_object() ? j.at(key) : kEmpty;
}

std::vector<int64_t> cfg_ints(const nlohmann::json& j, const char* key,
                              std::vector<int64_t> fallback) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_array()) return fallback;
  std::vector<int64_t> v;
  for (const auto& x : j.at(key)) {
    if (!x.is_number_integer()) return fallback;
    v.push_back(x.get<int64_t>());
  }
  return v;
}

const nlohmann::json& config_of(const io::Repository& repo, const std::string& name) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  return repo.has(name) ? repo.component(name).config : kEmpty;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Index N of "<prefix>N.rest", or -1.
int64_t unit_index(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return -1;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return -1;
  int64_t n = 0;
  for (size_t i = prefix.size(); i < dot; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

// One component's weights as the engine loads them: only the tensors it reads, each in the dtype
// it runs in. `units` are what can stream (the conditioner's decoder layers, the DiT's blocks);
// `fixed` is the rest.
struct Inventory {
  uint64_t fixed = 0;                 // run dtype
  std::map<int64_t, uint64_t> units;  // unit index -> run-dtype bytes
  uint64_t file = 0;                  // the needed tensors as stored
  uint64_t run() const {
    uint64_t n = fixed;
    for (const auto& [i, b] : units) n += b;
    return n;
  }
  uint64_t units_total() const { return run() - fixed; }
  uint64_t largest_unit() const {
    uint64_t m = 0;
    for (const auto& [i, b] : units) m = std::max(m, b);
    return m;
  }
};

// Visits every tensor of a component: `classify` returns the bytes per element the tensor takes
// as it runs (0: not loaded) and its streaming unit (-1: fixed).
template <typename Classify>
Inventory inventory(const io::Repository& repo, const std::string& name, Classify classify) {
  Inventory inv;
  if (!repo.has(name)) return inv;
  const io::Checkpoint ck = repo.checkpoint(name);
  for (const std::string& t : ck.names()) {
    const io::TensorInfo& info = ck.info(t);
    int64_t unit = -1;
    const uint64_t es = classify(t, info, &unit);
    if (es == 0) continue;
    const uint64_t run = static_cast<uint64_t>(shape_numel(info.shape)) * es;
    inv.file += info.nbytes;
    if (unit >= 0) {
      inv.units[unit] += run;
    } else {
      inv.fixed += run;
    }
  }
  return inv;
}

// The workflow's fixed facts: what it loads beyond t2va.
struct WorkflowNeeds {
  bool vision = false;         // the conditioner's vision tower
  bool video_encoder = false;  // keyframes / references through the video VAE's encoder
  bool audio_encoder = false;  // reference audio through the audio VAE's encoder
  bool reference_dit = false;  // transformer_ref/
  int64_t images = 0;          // canvas-sized condition images (DiT rows, vision patches)
};

WorkflowNeeds needs_of(const PlanRequest& r) {
  WorkflowNeeds n;
  if (r.workflow == "t2va") {
    n.images = 0;
  } else if (r.workflow == "fl2va") {
    n.vision = n.video_encoder = true;
    n.images = 2;  // first and last keyframe
  } else if (r.workflow == "ref2va") {
    n.vision = n.video_encoder = n.audio_encoder = n.reference_dit = true;
    n.images = 3;  // a planning assumption: references vary (up to 9 images, 3 videos, 3 audios)
  } else {
    fail(ErrorCode::kInvalidArgument, "memory plan: workflow '", r.workflow,
         "' is not one of t2va, fl2va, ref2va");
  }
  if (r.condition_images >= 0) n.images = r.condition_images;
  return n;
}

// ---- working-memory estimates ----
// Each counts the buffers the implementation keeps alive at the stage's peak, in program order
// (what the stream-ordered pool's high-water mark sees). Temporaries of one C++ full expression
// live until its end; locals until their scope ends.

// DiT forward (models/h3_dit/dit_model.cpp, h3_dit_spec.md §2.9-§2.11), per packed row with
// es-byte activations, d = hidden, f = ffn_dim, i = heads x head_dim:
//  - eager bf16 rounding (the engine's default): the SwiGLU statement keeps the block input, the
//    modulated attention input a, the residual x, the modulated FFN input h (4d), the fused
//    projection u (2f), its two halves copied out, silu(gate) and their product (4f): 4d + 6f;
//  - fused ops (float32 or kFused): at the output projection x_in, a, x, h, u (2f), swiglu (f),
//    out (d): 5d + 3f;
//  - attention, dense: x_in, a, q, k, v, o and the projection: 3d + 4i; VSA-H3 adds the gate g and
//    the tile-ordered copies of q, k, v: 2d + 8i, plus O(heads x tiles^2) scores and lists;
// plus what lives through the whole forward: RoPE cos/sin (2 x rotary), the AdaLN/timestep row
// indices (int64), the float32 input rows and output velocities, the attention's per-row softmax
// statistics (float32 max and sum per head).
uint64_t dit_work(const nlohmann::json& cfg, int64_t rows, int64_t video_rows, int64_t audio_rows,
                  int64_t es, bool eager, bool vsa) {
  const int64_t d = cfg_int(cfg, "hidden_size", 5376);
  const int64_t f = cfg_int(cfg, "ffn_dim", 14336);
  const int64_t heads = cfg_int(cfg, "num_attention_heads", 56);
  const int64_t i = heads * cfg_int(cfg, "attention_head_dim", 128);
  const int64_t rotary = 6 * cfg_int(cfg, "rope_freq_dim", 16);
  const std::vector<int64_t> patch = cfg_ints(cfg, "patch_size", {1, 2, 2});
  int64_t patch_dim = cfg_int(cfg, "in_channels", 24);
  for (int64_t p : patch) patch_dim *= p;
  const int64_t audio_dim = cfg_int(cfg, "audio_in_channels", 32);
  const int64_t ffn_phase = eager ? 4 * d + 6 * f : 5 * d + 3 * f;
  int64_t attn_phase = 3 * d + 4 * i;
  int64_t vsa_scores = 0;
  if (vsa) {
    attn_phase = std::max(attn_phase, 2 * d + 8 * i);
    const int64_t tiles = (rows + 63) / 64;            // tile 64, the larger count
    vsa_scores = heads * tiles * tiles * (4 + 1 + 4);  // float32 scores, mask, int32 lists
  }
  const int64_t per_row =
      std::max(ffn_phase, attn_phase) * es + 2 * rotary * es + 3 * 8 + heads * 2 * 4;
  return static_cast<uint64_t>(
      rows * per_row + (video_rows * patch_dim + audio_rows * audio_dim) * 4 * 2 + vsa_scores);
}

// Qwen3-VL conditioner (models/qwen3_vl/qwen3_vl_model.cpp forward, h3_components_spec.md §1.7): at
// the MLP's down projection a layer keeps the embeddings e, the residual x, h, q, k, v, the
// attention output a, h2, silu(gate), up, their product, the projection and the new residual
// (6d + 2 x q width + 2 x kv width + 3 x intermediate per token; temporaries of the statement live
// to its end); plus the RoPE tables. The vision tower (fl2va, ref2va; §1.5), per patch: the
// residual, norms, qkv, attention output and projections (12 x hidden) and the MLP (2 x
// intermediate), plus the merged tokens and DeepStack features handed to the language model.
uint64_t conditioner_work(const nlohmann::json& cfg, int64_t text_tokens, int64_t patches,
                          int64_t es) {
  const nlohmann::json& t = cfg_obj(cfg, "text_config");
  const int64_t d = cfg_int(t, "hidden_size", 5120);
  const int64_t inter = cfg_int(t, "intermediate_size", 25600);
  const int64_t hd = cfg_int(t, "head_dim", 128);
  const int64_t q_width = cfg_int(t, "num_attention_heads", 64) * hd;
  const int64_t kv_width = cfg_int(t, "num_key_value_heads", 8) * hd;
  const nlohmann::json& v = cfg_obj(cfg, "vision_config");
  const int64_t merge = cfg_int(v, "spatial_merge_size", 2);
  const int64_t tokens =
      std::max<int64_t>(text_tokens, 1) + patches / std::max<int64_t>(merge * merge, 1);
  const int64_t lm = tokens * ((6 * d + 2 * q_width + 2 * kv_width + 3 * inter) * es + 2 * hd * es);
  if (patches == 0) return static_cast<uint64_t>(lm);
  const int64_t vh = cfg_int(v, "hidden_size", 1152);
  const int64_t vi = cfg_int(v, "intermediate_size", 4304);
  const int64_t deepstack =
      static_cast<int64_t>(cfg_ints(v, "deepstack_visual_indexes", {8, 16, 24}).size());
  const int64_t merged = patches / std::max<int64_t>(merge * merge, 1) * d * (1 + deepstack) * es;
  // The merged tokens and DeepStack features stay alive from the vision tower into the LM.
  return static_cast<uint64_t>(std::max(lm, patches * (12 * vh + 2 * vi) * es) + merged);
}

// Video VAE decode (models/video_vae/video_vae_model.cpp decode_clip, h3_components_spec.md
// §2.6-§2.8): the tiles of one temporal window are decoded in batches sized as the model sizes
// them (video_vae::auto_tile_batch on CUDA, one tile at a time on the CPU, or the batch asked for:
// PlanOptions::vae_tile_batch); plus the window's decoded tiles and stitched clip, and the whole
// video in the decoder's dtype (what a non-streaming decode holds: the engine plans before it knows
// whether a request streams). Under the float16 autocast that video is widened to float32 at the
// end (VideoVae::decode_assembled), when both copies are live but the window's buffers are gone:
// the peak is the larger of the two moments. At the released size with 4 tiles: 2.16 GB while
// decoding, 2.30 GB at the end. `h3 bench vae` measured the pool's high-water mark 3.85 GB above
// the weights for that decode (bench/RESULTS.md, 2026-12-04), at the widening while it still held
// the previous repetition's float32 video (1.54 GB; 0.77 + 1.54 + 1.54 = 3.85), which it no longer
// does; and 1.12 GB for the streamed decode.
uint64_t vae_decode_work(const video_vae::VideoVaeConfig& c, const TargetGeometry& g, bool cuda,
                         bool f16, uint64_t device_free, int64_t tile_batch) {
  const int64_t r = c.spatial_ratio();
  const video_vae::TileAxis ya = video_vae::split_tiles(g.latent_height * r, 256, 64, r);
  const video_vae::TileAxis xa = video_vae::split_tiles(g.latent_width * r, 256, 64, r);
  int64_t tile_h = 0, tile_w = 0;
  for (int64_t l : ya.lengths) tile_h = std::max(tile_h, std::min(g.latent_height, l / r));
  for (int64_t l : xa.lengths) tile_w = std::max(tile_w, std::min(g.latent_width, l / r));
  const int64_t window = c.tokens_chunk_size() + c.token_overlap();
  const int64_t rows_per_tile = window * tile_h * tile_w + c.decoder_num_register_tokens + 1;
  const DType gd = f16 ? DType::kF16 : DType::kF32;
  const int64_t per_tile = video_vae::decoder_activation_bytes(c, gd, rows_per_tile);
  const int64_t count = static_cast<int64_t>(ya.starts.size() * xa.starts.size());
  int64_t limit = 1;
  if (tile_batch > 0) {
    limit = std::min(tile_batch, count);
  } else if (cuda) {
    limit = video_vae::auto_tile_batch(c, gd, count, rows_per_tile, device_free);
  }
  const int64_t batches = (count + limit - 1) / limit;
  const int64_t per_batch = (count + batches - 1) / batches;
  const int64_t es = static_cast<int64_t>(dtype_size(gd));
  const int64_t window_frames = window * c.temporal_ratio();
  const int64_t tiles_px = count * 3 * window_frames * (tile_h * r) * (tile_w * r) * es;
  const int64_t clip_px = 3 * window_frames * g.height * g.width * es;
  const int64_t video_px = 3 * g.num_frames * g.height * g.width * es;
  const int64_t widened = es < 4 ? 3 * g.num_frames * g.height * g.width * 4 : 0;
  const int64_t decoding = per_batch * per_tile + tiles_px + clip_px + video_px;
  return static_cast<uint64_t>(std::max(decoding, video_px + widened));
}

// Video VAE encode (fl2va keyframes: one frame; ref2va video references: clips of clip_length
// frames), tile by tile (256 px): a resnet at the first level keeps its input, the norm and SiLU
// output, the convolution output and the sum (plus one spare) at block_out_channels[0] channels in
// float32; the convolution's im2col columns and float32 accumulator (256 MiB budget each); the
// clip's pixels on the device.
uint64_t vae_encode_work(const video_vae::VideoVaeConfig& c, const TargetGeometry& g, bool clips) {
  const int64_t frames = clips ? c.clip_length : 1;
  const int64_t c0 = c.block_out_channels.empty() ? 128 : c.block_out_channels[0];
  const int64_t level0 = c0 * frames * 256 * 256 * 4;
  return static_cast<uint64_t>(5 * level0 + 2 * (256LL << 20) +
                               3 * frames * g.height * g.width * 4);
}

// Audio VAE decode (models/audio_vae/audio_vae_decoder.cpp, h3_components_spec.md §3.4), stereo as
// a batch of 2, float32: at the widest level (channels x length) the level input, the sum of the
// resblocks, a resblock's running value and its branch (4 x E), and inside the anti-aliased
// activation the 2x upsampled signal with its cropped copy (4 x E); plus the waveform.
// On CUDA a dense convolution also holds its im2col columns (channels x taps per output sample, at
// most 256 MiB) and a float32 result for one batch item (ops/cuda/conv.cu, conv1d_gemm).
uint64_t audio_decode_work(const nlohmann::json& cfg, int64_t latents) {
  int64_t ch = cfg_int(cfg, "decoder_dim", 1024);
  int64_t len = latents, widest = ch * len;
  for (int64_t rate : cfg_ints(cfg, "decoder_rates", {5, 5, 2, 2, 2, 2, 2})) {
    len *= rate;
    ch = std::max<int64_t>(ch / 2, 1);
    widest = std::max(widest, ch * len);
  }
  int64_t taps = 1;
  for (int64_t k : cfg_ints(cfg, "resblock_kernel_sizes", {3, 7, 11})) taps = std::max(taps, k);
  const int64_t columns = std::min<int64_t>(widest * taps * 4, int64_t{256} << 20) + widest * 4;
  return static_cast<uint64_t>(8 * kAudioChannels * widest * 4 + kAudioChannels * len * 4 +
                               columns);
}

// Audio VAE encode (ref2va with reference audio, §3.3): the reference is cut to the clip's
// duration; its widest stage is the first (encoder_dim channels at the full sample count), counted
// like the decoder (8 buffers of it, stereo).
uint64_t audio_encode_work(const nlohmann::json& cfg, int64_t latents) {
  const int64_t dim = cfg_int(cfg, "encoder_dim", 64);
  const int64_t samples = latents * kAudioSamplesPerLatent;
  return static_cast<uint64_t>(8 * kAudioChannels * dim * samples * 4);
}

std::string alternative_text(const PlanAlternative& a, int64_t num_blocks) {
  std::string s = std::string(plan_decision_name(a.decision)) + " " + format_bytes(a.peak_bytes);
  if (a.host_pinned_bytes) s += " + " + format_bytes(a.host_pinned_bytes) + " pinned";
  if (a.decision == PlanDecision::kCpuOffload)
    s += " (" + std::to_string(a.dit_resident_blocks) + " of " + std::to_string(num_blocks) +
         " DiT blocks resident)";
  return s;
}

// Everything counted for one request: the components' inventories and the stages' work.
struct Counted {
  WorkflowNeeds need;
  std::string dit_name;
  // FP8 projections (the dtype flags, or stored so in the checkpoint): counted at one byte, and
  // their component is not streamed.
  bool dit_fp8 = false, cond_fp8 = false;
  Inventory cond, dit, vae, avae;
  struct Stage {
    const char* name;
    int component;  // index into MemoryPlan::components: conditioner, transformer, vae, audio_vae
    uint64_t work;
  };
  std::vector<Stage> stages;

  uint64_t max_work() const {
    uint64_t m = 0;
    for (const Stage& s : stages) m = std::max(m, s.work);
    return m;
  }
  uint64_t late_work() const {  // every stage after the conditioner
    uint64_t m = 0;
    for (const Stage& s : stages)
      if (s.component != 0) m = std::max(m, s.work);
    return m;
  }
  uint64_t cond_work() const { return stages.front().work; }
  uint64_t vaes() const { return vae.run() + avae.run(); }
  // The conditioner's device part when its layers stream: embeddings, vision, two layer slots.
  uint64_t cond_streamed() const {
    return cond.fixed + (cond.units.empty() ? 0 : 2 * cond.largest_unit());
  }
  int64_t dit_blocks() const { return static_cast<int64_t>(dit.units.size()); }
  // The DiT's device part with `resident` blocks kept (counted at the largest block's size) and
  // two slots for the streamed ones.
  uint64_t dit_offloaded(int64_t resident) const {
    const uint64_t block = dit.largest_unit();
    return dit.fixed + static_cast<uint64_t>(resident) * block +
           (resident < dit_blocks() ? 2 * block : 0);
  }
  // Pinned host bytes of the blocks past the first `resident`.
  uint64_t dit_pinned(int64_t resident) const {
    uint64_t n = 0;
    int64_t k = 0;
    for (const auto& [i, b] : dit.units)
      if (k++ >= resident) n += b;
    return n;
  }
};

bool ends_with_any(const std::string& t, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes) {
    const size_t n = std::char_traits<char>::length(s);
    if (t.size() > n && t.compare(t.size() - n, n, s) == 0) return true;
  }
  return false;
}

Counted count(const io::Repository& repo, const PlanOptions& o, uint64_t device_free) {
  const PlanRequest& r = o.request;
  Counted c;
  c.need = needs_of(r);
  const WorkflowNeeds& need = c.need;
  const bool cuda = o.device.is_cuda();
  c.dit_name =
      need.reference_dit && repo.has("transformer_ref") ? "transformer_ref" : "transformer";

  // ---- weights, as each component runs ----
  // Conditioner (qwen3_vl_model.cpp): token embeddings and decoder layers 0..tap-1 in the compute
  // dtype (tap as qwen3_vl_config.cpp sets it); the vision tower (its position table stays in host
  // memory) only when the workflow shows it images. Later layers, the final norm and the LM head
  // are never read.
  const nlohmann::json& te_cfg = config_of(repo, "text_encoder");
  const int64_t tap = std::min<int64_t>(
      models::kQwen3VlTapLayers, cfg_int(cfg_obj(te_cfg, "text_config"), "num_hidden_layers", 64));
  const uint64_t cond_es = o.conditioner_bf16 ? 2 : 4;
  c.cond = inventory(repo, "text_encoder",
                     [&](const std::string& t, const io::TensorInfo& info, int64_t* unit) -> uint64_t {
                       if (starts_with(t, "model.language_model.embed_tokens.")) return cond_es;
                       const int64_t layer = unit_index(t, "model.language_model.layers.");
                       if (layer >= 0) {
                         if (layer >= tap) return 0;
                         *unit = layer;
                         // FP8 projections: one byte per value (scales, 4 bytes per row of
                         // 5,120 or more values, left to the headroom as for the DiT).
                         std::string weight;
                         if (models::is_fp8_companion(t, &weight)) return 4;  // float32 scales
                         if ((o.conditioner_fp8 || info.dtype == DType::kF8E4M3) &&
                             ends_with_any(t,
                                           {".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
                                            ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
                                            ".mlp.gate_proj.weight", ".mlp.up_proj.weight",
                                            ".mlp.down_proj.weight"})) {
                           c.cond_fp8 = true;
                           return 1;
                         }
                         return cond_es;
                       }
                       if (need.vision && starts_with(t, "model.visual.") &&
                           !starts_with(t, "model.visual.pos_embed."))
                         return cond_es;
                       return 0;
                     });
  // The projections --dit-dtype fp8 quantizes (dit::quantize_block_linears_fp8).
  auto is_block_projection = [](const std::string& t) {
    return (starts_with(t, "transformer_blocks.") ||
            starts_with(t, "token_refiner.refiner_blocks.")) &&
           ends_with_any(
               t, {".attn.to_q.weight", ".attn.to_k.weight", ".attn.to_v.weight",
                   ".attn.to_out.0.weight", ".attn.to_gate_compress.weight",
                   ".ff.net.0.proj.weight", ".ff.net.2.weight", ".adaln_proj.linear.weight"});
  };
  // DiT (dit_weights.cpp): fp32 islands in float32, the rest in the model dtype; the main blocks
  // (transformer_blocks.N) are what offload streams.
  const uint64_t dit_es = o.dit_bf16 ? 2 : 4;
  c.dit =
      inventory(repo, c.dit_name,
                [&](const std::string& t, const io::TensorInfo& info, int64_t* unit) -> uint64_t {
                  const std::string first = t.substr(0, t.find('.'));
                  if (first == "proj_in" || first == "audio_proj_in" || first == "time_embedder" ||
                      first == "proj_out" || first == "audio_proj_out")
                    return 4;
                  *unit = unit_index(t, "transformer_blocks.");
                  // FP8 projections: one byte per value; their float32 scales (4 bytes per row
                  // of at least 3,072 values at the released width, under 0.15 %) are left to
                  // the plan's headroom.
                  std::string weight;
                  if (models::is_fp8_companion(t, &weight)) return 4;  // float32 scales
                  if ((o.dit_fp8 || info.dtype == DType::kF8E4M3) && is_block_projection(t)) {
                    c.dit_fp8 = true;
                    return 1;
                  }
                  return dit_es;
                });
  // Video VAE (video_vae_weights.cpp): float32, except the decoder's GEMM operands under the fp16
  // autocast policy; the encoder (encoder.*, quant_conv) only when something is encoded.
  c.vae = inventory(
      repo, "vae", [&](const std::string& t, const io::TensorInfo&, int64_t*) -> uint64_t {
        if (starts_with(t, "encoder.") || starts_with(t, "quant_conv."))
          return need.video_encoder ? 4 : 0;
        const bool gemm =
            starts_with(t, "post_quant_conv.") || starts_with(t, "decoder.proj_in.") ||
            starts_with(t, "decoder.proj_out.") ||
            (starts_with(t, "decoder.transformer_blocks.") &&
             (t.find(".attn.to_") != std::string::npos || t.find(".ff.net.") != std::string::npos));
        return gemm && o.vae_f16_gemm ? 2 : 4;
      });
  // Audio VAE (audio_vae_weights.cpp): float32; weight-norm gains fold into their weights on the
  // host; the encoder (everything outside decoder.* and dec_in_proj) only for reference audio.
  c.avae = inventory(
      repo, "audio_vae", [&](const std::string& t, const io::TensorInfo&, int64_t*) -> uint64_t {
        const bool decoder = starts_with(t, "decoder.") || starts_with(t, "dec_in_proj.");
        if (!decoder && !need.audio_encoder) return 0;
        const size_t n = t.size();
        if (n > 9 && t.compare(n - 9, 9, ".weight_g") == 0) return 0;
        return 4;
      });

  // ---- working memory per stage ----
  video_vae::VideoVaeConfig vcfg;
  try {
    vcfg = video_vae::VideoVaeConfig::from_json(config_of(repo, "vae"), "vae/config.json");
  } catch (const Error&) {
    // The loader reports a malformed config with its own message; the plan uses released values.
  }
  const TargetGeometry g = make_target_geometry(
      Canvas{r.height, r.width}, align_num_frames(std::max<int64_t>(r.num_frames, 1)), vcfg.spatial_ratio());
  const int64_t video_rows = g.video_rows() + need.images * g.rows_per_frame();
  const int64_t rows = r.text_tokens + video_rows + g.audio_rows();
  const int64_t patch = cfg_int(cfg_obj(te_cfg, "vision_config"), "patch_size", 16);
  const int64_t patches = need.vision ? need.images * (r.height / patch) * (r.width / patch) : 0;
  const nlohmann::json& a_cfg = config_of(repo, "audio_vae");
  c.stages.push_back(
      {"conditioner", 0,
       conditioner_work(te_cfg, r.text_tokens, patches, static_cast<int64_t>(cond_es))});
  if (need.video_encoder)
    c.stages.push_back({"vae encode", 2, vae_encode_work(vcfg, g, need.reference_dit)});
  if (need.audio_encoder)
    c.stages.push_back({"audio encode", 3, audio_encode_work(a_cfg, g.audio_latents)});
  c.stages.push_back(
      {"denoise", 1,
       dit_work(config_of(repo, c.dit_name), rows, video_rows, g.audio_rows(), o.dit_bf16 ? 2 : 4,
                /*eager=*/o.dit_bf16 && !o.dit_fused_rounding, o.vsa_attention)});
  c.stages.push_back(
      {"vae decode", 2, vae_decode_work(vcfg, g, cuda, cuda && o.vae_f16_gemm, device_free, o.vae_tile_batch)});
  c.stages.push_back({"audio decode", 3, audio_decode_work(a_cfg, g.audio_latents)});
  return c;
}

// What each decision would need on this device and host, in the automatic order of preference.
// `possible` applies the forced flags; `fits` compares with the device and the pinnable host.
std::vector<PlanAlternative> alternatives_of(const Counted& c, const PlanOptions& o,
                                             const MemoryPlan& plan, uint64_t host_room) {
  std::vector<PlanAlternative> alts;
  auto add = [&](PlanDecision d, bool possible, uint64_t peak, uint64_t pinned, int64_t resident) {
    PlanAlternative a;
    a.decision = d;
    a.possible = possible;
    a.peak_bytes = peak;
    a.host_pinned_bytes = pinned;
    a.dit_resident_blocks = resident;
    a.fits = peak <= plan.device_free && pinned <= host_room;
    alts.push_back(a);
  };
  const int64_t blocks = c.dit_blocks();
  // Non-sequential plans hold every component's device part through every stage.
  auto together = [&](uint64_t weights) { return weights + c.max_work() + plan.reserve; };
  if (!o.device.is_cuda()) {
    // CPU: everything in host memory, resident or released after use.
    add(PlanDecision::kResident, o.sequential != SequentialLoad::kOn,
        together(c.cond.run() + c.dit.run() + c.vaes()), 0, blocks);
    add(PlanDecision::kSequential, o.sequential != SequentialLoad::kOff,
        std::max(c.cond.run() + c.cond_work(), c.dit.run() + c.vaes() + c.late_work()), 0, blocks);
    for (PlanAlternative& a : alts)
      a.fits = plan.host_available == 0 || a.peak_bytes <= plan.host_available;
    return alts;
  }
  const bool forced_offload = o.cpu_offload;
  const bool go_sequential = o.sequential == SequentialLoad::kOn ||
                             (plan.unified_memory && o.sequential == SequentialLoad::kAuto);
  const bool pinning = !plan.unified_memory;  // pinning frees nothing when both share one pool
  add(PlanDecision::kResident, !go_sequential && !forced_offload,
      together(c.cond.run() + c.dit.run() + c.vaes()), 0, blocks);
  // FP8 layers and blocks stay resident (their streaming is not implemented).
  add(PlanDecision::kStreamConditioner,
      !go_sequential && !forced_offload && pinning && !o.conditioner_fp8,
      together(c.cond_streamed() + c.dit.run() + c.vaes()), c.cond.units_total(), blocks);
  // cpu-offload keeps as many blocks as fit beside everything else (at most all but one: all of
  // them is stream-conditioner); with --cpu-offload every block streams, as the flag always did.
  const uint64_t base = c.cond_streamed() + c.vaes();
  int64_t k = 0;
  const uint64_t block = c.dit.largest_unit();
  const uint64_t fixed_peak = together(base + c.dit_offloaded(0));
  if (!forced_offload && fixed_peak < plan.device_free && block > 0)
    k = std::min<int64_t>(static_cast<int64_t>((plan.device_free - fixed_peak) / block),
                          blocks - 1);
  add(PlanDecision::kCpuOffload,
      !go_sequential && pinning && blocks > 0 && !o.conditioner_fp8 && !o.dit_fp8,
      together(base + c.dit_offloaded(k)), c.cond.units_total() + c.dit_pinned(k), k);
  // Sequential: the conditioner alone, then the DiT and the VAEs (every DiT block streamed when
  // --cpu-offload is given).
  const uint64_t dit_dev = forced_offload ? c.dit_offloaded(0) : c.dit.run();
  add(PlanDecision::kSequential, o.sequential != SequentialLoad::kOff,
      std::max(c.cond.run() + c.cond_work(), dit_dev + c.vaes() + c.late_work()) + plan.reserve,
      forced_offload ? c.dit_pinned(0) : 0, forced_offload ? 0 : blocks);
  return alts;
}

// The reason line: the decision and the numbers behind it.
std::string explain(const MemoryPlan& plan, const Counted& c, const PlanOptions& o,
                    const PlanAlternative& chosen, uint64_t host_room) {
  const auto& alts = plan.alternatives;
  const std::string device = o.device.str();
  const std::string free_text = device + " has " + format_bytes(plan.device_free) + " free of " +
                                format_bytes(plan.device_total);
  const std::string host_text = "host: " + format_bytes(plan.host_available) + " available, " +
                                format_bytes(host_room) + " may be pinned";
  const std::string blocks = std::to_string(c.dit_blocks());
  if (!o.device.is_cuda()) {
    std::string s = o.sequential != SequentialLoad::kAuto
                        ? std::string("cpu: forced ") +
                              (chosen.decision == PlanDecision::kSequential ? "on" : "off")
                    : chosen.decision == PlanDecision::kResident
                        ? "cpu: all components fit in available host memory"
                        : "cpu: the components do not fit together in available host memory";
    return s + " (" + format_bytes(chosen.peak_bytes) + " needed, " +
           format_bytes(plan.host_available) + " available" +
           (chosen.fits ? ")" : "; it may page)");
  }
  switch (plan.decision) {
    case PlanDecision::kResident:
      return "everything fits: it needs " + format_bytes(chosen.peak_bytes) + ", " + free_text;
    case PlanDecision::kStreamConditioner:
      return "everything resident would need " + format_bytes(alts[0].peak_bytes) + " but " +
             free_text + "; with the conditioner's " + std::to_string(c.cond.units.size()) +
             " layers (" + format_bytes(c.cond.units_total()) +
             ") streamed from pinned host memory the device needs " +
             format_bytes(chosen.peak_bytes) + "; " + host_text;
    case PlanDecision::kCpuOffload:
      return (o.cpu_offload ? "--cpu-offload: every DiT block streams"
                            : "streaming the conditioner alone would need " +
                                  format_bytes(alts[1].peak_bytes) + " but " + free_text) +
             "; the DiT keeps " + std::to_string(chosen.dit_resident_blocks) + " of " + blocks +
             " blocks on the device, the rest and the conditioner's layers (" +
             format_bytes(chosen.host_pinned_bytes) +
             ") stream from pinned host memory: the device needs " +
             format_bytes(chosen.peak_bytes) + "; " + host_text;
    case PlanDecision::kSequential: {
      std::string why;
      if (o.sequential == SequentialLoad::kOn) {
        why = "--sequential-load";
      } else if (plan.unified_memory) {
        why = "unified memory: the device shares the host's memory, so pinning frees nothing";
      } else {
        why = "nothing fits with every component kept (";
        for (const PlanAlternative& a : alts) {
          if (a.decision == PlanDecision::kSequential || !a.possible) continue;
          why += alternative_text(a, c.dit_blocks()) + "; ";
        }
        why += free_text + "; " + host_text + ")";
      }
      return why + "; sequential: each stage's components alone on the device (peak " +
             format_bytes(chosen.peak_bytes) +
             "), released after use and read from disk again: warm generations read the weights "
             "from disk";
    }
    case PlanDecision::kRefused: {
      // Why an alternative was not possible (mirrors alternatives_of).
      auto excluded_by = [&](const PlanAlternative& a) -> std::string {
        if (a.decision == PlanDecision::kSequential) return "excluded by --no-sequential-load";
        if (o.sequential == SequentialLoad::kOn) return "excluded by --sequential-load";
        if (plan.unified_memory &&
            (o.sequential == SequentialLoad::kAuto || a.decision != PlanDecision::kResident))
          return "excluded: unified memory";
        if (o.cpu_offload) return "excluded by --cpu-offload";
        if (o.dit_fp8 || o.conditioner_fp8) return "excluded: FP8 weights stay resident";
        return "excluded: the DiT has no blocks";
      };
      std::string needs;
      for (const PlanAlternative& a : alts) {
        needs += (needs.empty() ? "" : "; ") + alternative_text(a, c.dit_blocks());
        if (!a.possible) needs += " (" + excluded_by(a) + ")";
      }
      return "the model does not fit: " + free_text + "; " + host_text + "; the choices need " +
             needs + "; a smaller canvas or fewer frames lowers the working memory (DiT " +
             format_bytes(plan.components[1].work_bytes) + ")";
    }
  }
  return "";
}

// Placements, device and pinned bytes of the components and the stage peaks under `chosen`.
void lay_out(MemoryPlan& plan, const Counted& c, const PlanOptions& o,
             const PlanAlternative& chosen) {
  const PlanDecision layout = chosen.decision;
  plan.peak_bytes = chosen.peak_bytes;
  plan.host_pinned_bytes = chosen.host_pinned_bytes;
  plan.dit_resident_blocks = chosen.dit_resident_blocks;
  plan.sequential = plan.decision == PlanDecision::kSequential;
  plan.conditioner_streamed = plan.decision == PlanDecision::kStreamConditioner ||
                              plan.decision == PlanDecision::kCpuOffload;
  plan.cpu_offload =
      plan.decision == PlanDecision::kCpuOffload || (plan.sequential && o.cpu_offload);
  ComponentPlan& cond = plan.components[0];
  ComponentPlan& dit = plan.components[1];
  if (!o.device.is_cuda()) {
    for (ComponentPlan& p : plan.components)
      p.placement = layout == PlanDecision::kSequential ? Placement::kReleased : Placement::kHost;
  } else if (layout == PlanDecision::kSequential) {
    for (ComponentPlan& p : plan.components) p.placement = Placement::kReleased;
    if (o.cpu_offload) {
      dit.placement = Placement::kOffload;
      dit.weights_bytes = c.dit_offloaded(0);
      dit.host_bytes = c.dit_pinned(0);
    }
  } else {
    if (layout == PlanDecision::kStreamConditioner || layout == PlanDecision::kCpuOffload) {
      cond.placement = Placement::kStreamed;
      cond.weights_bytes = c.cond_streamed();
      cond.host_bytes = c.cond.units_total();
    }
    if (layout == PlanDecision::kCpuOffload) {
      dit.placement = Placement::kOffload;
      dit.weights_bytes = c.dit_offloaded(plan.dit_resident_blocks);
      dit.host_bytes = c.dit_pinned(plan.dit_resident_blocks);
    }
  }
  // Stage peaks (reserve not included): a sequential plan holds the conditioner alone for its
  // stage and the others for theirs; the other plans hold every device part throughout.
  uint64_t all = 0;
  for (const ComponentPlan& p : plan.components) all += p.weights_bytes;
  for (const Counted::Stage& s : c.stages) {
    StagePeak p;
    p.name = s.name;
    p.work_bytes = s.work;
    p.weights_bytes = all;
    if (layout == PlanDecision::kSequential)
      p.weights_bytes = s.component == 0 ? cond.weights_bytes : all - cond.weights_bytes;
    plan.stage_peaks.push_back(p);
  }
}

}  // namespace

MemoryPlan plan_memory(const io::Repository& repo, const PlanOptions& o) {
  const PlanRequest& r = o.request;
  H3_CHECK(r.height > 0 && r.width > 0 && r.num_frames > 0 && r.text_tokens >= 0,
           ErrorCode::kInvalidArgument, "memory plan: request ", r.width, "x", r.height, "x",
           r.num_frames, " frames with ", r.text_tokens, " text tokens is not a valid size");
  H3_CHECK(!o.cpu_offload || o.device.is_cuda(), ErrorCode::kUnsupported,
           "--cpu-offload needs a CUDA device; on ", o.device.str(),
           " the weights already live in host memory");
  MemoryPlan plan;
  plan.device = o.device;
  const bool cuda = o.device.is_cuda();

  // Memory figures: injected, or asked of the driver and the OS.
  if (cuda) {
    if (o.device_free_override) {
      plan.device_free = *o.device_free_override;
      plan.device_total = o.device_total_override.value_or(*o.device_free_override);
    } else {
      size_t free_b = 0, total_b = 0;
      cuda_memory_info(o.device.index, &free_b, &total_b);
      plan.device_free = free_b;
      plan.device_total = total_b;
    }
    plan.unified_memory =
        o.unified_memory_override
            ? *o.unified_memory_override
            : (o.device_free_override ? false : device_has_unified_memory(o.device.index));
  }
  if (o.host_available_override) {
    plan.host_available = *o.host_available_override;
    plan.host_total = o.host_total_override.value_or(*o.host_available_override);
  } else {
    host_memory_info(&plan.host_available, &plan.host_total);
  }
  if (!cuda) {
    plan.device_free = plan.host_available;
    plan.device_total = plan.host_total;
  }
  // Headroom beyond the estimates on the device: cuBLASLt workspaces, the pool's caching of freed
  // blocks and fragmentation (1 GiB + 3% of the device). On the host: the process itself (latents,
  // frames, the loader's staging) and the OS keep 4 GiB + 5% of the host out of any pinning.
  plan.reserve = cuda ? kGiB + plan.device_total / 33 : 0;
  plan.host_reserve = 4 * kGiB + plan.host_total / 20;
  const uint64_t host_room =
      plan.host_available > plan.host_reserve ? plan.host_available - plan.host_reserve : 0;

  const Counted c = count(repo, o, plan.device_free);
  // A checkpoint that stores FP8 projections plans as the dtype flags would: resident.
  PlanOptions with_fp8 = o;
  with_fp8.dit_fp8 = o.dit_fp8 || c.dit_fp8;
  with_fp8.conditioner_fp8 = o.conditioner_fp8 || c.cond_fp8;
  plan.components = {
      {"conditioner", "text_encoder", Placement::kDevice, c.cond.run(), c.cond.run(), 0, 0,
       c.cond.file},
      {"transformer", c.dit_name, Placement::kDevice, c.dit.run(), c.dit.run(), 0, 0, c.dit.file},
      {"vae", "vae", Placement::kDevice, c.vae.run(), c.vae.run(), 0, 0, c.vae.file},
      {"audio_vae", "audio_vae", Placement::kDevice, c.avae.run(), c.avae.run(), 0, 0, c.avae.file},
  };
  for (const Counted::Stage& s : c.stages) {
    ComponentPlan& p = plan.components[static_cast<size_t>(s.component)];
    p.work_bytes = std::max(p.work_bytes, s.work);
  }
  plan.dit_num_blocks = c.dit_blocks();
  plan.alternatives = alternatives_of(c, with_fp8, plan, host_room);

  // The decision: the first possible alternative that fits. CPU plans are never refused (weights
  // stored in their run dtype are borrowed from the mapped files, which the OS can page): without a
  // fit they take sequential, or resident when sequential is forbidden. Refused plans show the
  // layout of the possible alternative that needs the least device memory.
  const PlanAlternative* chosen = nullptr;
  for (const PlanAlternative& a : plan.alternatives)
    if (!chosen && a.possible && a.fits) chosen = &a;
  if (chosen) {
    plan.decision = chosen->decision;
  } else if (!cuda) {
    chosen = &plan.alternatives[o.sequential == SequentialLoad::kOff ? 0 : 1];
    plan.decision = chosen->decision;
  } else {
    plan.decision = PlanDecision::kRefused;
    for (const PlanAlternative& a : plan.alternatives)
      if (a.possible && (!chosen || a.peak_bytes < chosen->peak_bytes)) chosen = &a;
    if (!chosen) chosen = &plan.alternatives.front();
  }
  const PlanAlternative picked = *chosen;
  lay_out(plan, c, with_fp8, picked);
  plan.reason = explain(plan, c, with_fp8, picked, host_room);
  return plan;
}

void check_fits(const MemoryPlan& plan) {
  if (plan.decision == PlanDecision::kRefused) {
    fail(ErrorCode::kOutOfMemory, "the memory plan is refused: ", plan.reason);
  }
  if (plan.device.is_cuda() && plan.peak_bytes > plan.device_free) {
    fail(ErrorCode::kOutOfMemory, "the memory plan does not fit ", plan.device.str(), ": it needs ",
         format_bytes(plan.peak_bytes), " at its peak but ", format_bytes(plan.device_free), " of ",
         format_bytes(plan.device_total), " are free (", describe(plan), ")");
  }
}

std::string describe(const MemoryPlan& plan) {
  std::ostringstream os;
  os << plan_decision_name(plan.decision) << " on " << plan.device.str() << " (" << plan.reason
     << ")";
  for (const ComponentPlan& c : plan.components) {
    os << ", " << c.name << " " << placement_name(c.placement) << " "
       << format_bytes(c.weights_bytes) << " weights + " << format_bytes(c.work_bytes) << " work";
    if (c.host_bytes) os << " + " << format_bytes(c.host_bytes) << " pinned";
  }
  if (plan.decision == PlanDecision::kCpuOffload || plan.cpu_offload)
    os << ", DiT blocks resident " << plan.dit_resident_blocks << "/" << plan.dit_num_blocks;
  os << ", peak " << format_bytes(plan.peak_bytes);
  if (plan.reserve) os << " (reserve " << format_bytes(plan.reserve) << " included)";
  if (plan.host_pinned_bytes) os << ", pinned host " << format_bytes(plan.host_pinned_bytes);
  return os.str();
}

}  // namespace h3::pipeline
