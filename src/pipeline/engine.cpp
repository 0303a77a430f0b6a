#include "pipeline/engine.h"

#include <utility>

#include "core/cuda_stream.h"
#include "core/layer_stream.h"
#include "core/log.h"
#include "core/status.h"
#include "io/device_loader.h"
#include "ops/ops.h"

namespace h3::pipeline {

struct Engine::Loaded {
  std::optional<qwen3_vl::Qwen3VlModel> conditioner;
  std::optional<dit::DitModel> transformer;
  bool transformer_is_ref = false;
  std::optional<video_vae::VideoVae> vae;
  bool vae_has_encoder = false;
  std::optional<audio_vae::AudioVae> audio_vae;
  bool audio_vae_has_encoder = false;
};

namespace {

dit::DitPrecision dit_precision_of(const EngineOptions& o) {
  if (o.dit_precision) return *o.dit_precision;
  return o.device.is_cuda() ? dit::DitPrecision::kBF16 : dit::DitPrecision::kF32;
}

dit::DitRounding dit_rounding_of(const EngineOptions& o) {
  if (o.dit_rounding) return *o.dit_rounding;
  return o.device.is_cuda() ? dit::DitRounding::kFused : dit::DitRounding::kEager;
}

DType conditioner_dtype_of(const EngineOptions& o) {
  if (o.conditioner_dtype) return *o.conditioner_dtype;
  return o.device.is_cuda() ? DType::kBF16 : DType::kF32;
}

video_vae::VaePrecision vae_precision_of(const EngineOptions& o) {
  if (o.vae_precision) return *o.vae_precision;
  // FP8 decoder weights replace the f16-autocast policy's float16 GEMMs, on any device.
  return o.device.is_cuda() || o.vae_fp8 ? video_vae::VaePrecision::kF16Autocast : video_vae::VaePrecision::kF32;
}

// Measures one component load for the receipt: the bytes the device loader moved plus the layers
// pinned on the host for streaming (or, on the CPU where tensors are borrowed from the mapping,
// the checkpoint's bytes), and the method. A streamed conditioner reads most of its 50 GB into
// pinned memory, not onto the device: without them its rate would read as a few MB/s.
class LoadMeter {
 public:
  // A load's stage starts once the device has finished what earlier stages queued (the last
  // denoise step's tail, a decode): the loader's copies are ordered after that work, which would
  // otherwise be charged to the load.
  LoadMeter(Receipt& rc, const std::string& name, uint64_t file_bytes, Device device)
      : rc_(rc),
        name_(name),
        file_bytes_(file_bytes),
        idle_(settle(device)),
        before_(io::device_load_totals()),
        pinned_before_(pinned_layer_bytes_live()),
        stage_(rc.stage("load " + name)) {}
  ~LoadMeter() = default;
  // Call once the component is loaded.
  void done(Device device) {
    // The work a load queued on the device (weight folds, conversions, a benchmark's random fill)
    // is part of it: waited for here, it is not charged to the next component's load, whose
    // copies would otherwise queue behind it.
    if (device.is_cuda()) Stream().synchronize();
    const io::LoadStats after = io::device_load_totals();
    const uint64_t moved = after.bytes - before_.bytes;
    const uint64_t pinned_after = pinned_layer_bytes_live();
    const uint64_t pinned = pinned_after > pinned_before_ ? pinned_after - pinned_before_ : 0;
    stage_.add_bytes(moved + pinned ? moved + pinned : file_bytes_);
    stage_.end();
    std::string method =
        moved ? io::load_method_name(after.method) : (device.is_cuda() ? "copy" : "mmap");
    if (pinned) method += " + " + std::to_string(pinned >> 20) + " MiB pinned on the host";
    rc_.set("load " + name_ + " method", method);
    // The pinned staging ring stays for the generation's next load (pinning 256 MiB costs tens of
    // milliseconds, most of a small component's load); finished_generation() gives it back.
  }

 private:
  static bool settle(Device device) {
    if (device.is_cuda()) Stream().synchronize();
    return true;
  }
  Receipt& rc_;
  std::string name_;
  uint64_t file_bytes_;
  [[maybe_unused]] bool idle_;  // settle() ran (before before_ and stage_, in declaration order)
  io::LoadStats before_;
  uint64_t pinned_before_;
  Receipt::Stage stage_;
};

uint64_t file_bytes_of(const MemoryPlan& plan, const std::string& name) {
  const ComponentPlan* c = plan.find(name);
  return c ? c->file_bytes : 0;
}

}  // namespace

std::vector<EngineLora> read_loras(const io::Repository& repo,
                                   const std::vector<dit::LoraSpec>& specs, bool allow_unmatched) {
  std::vector<EngineLora> out;
  if (specs.empty()) return out;
  const std::string component = repo.has("transformer") ? "transformer" : "transformer_ref";
  H3_CHECK(repo.has(component), ErrorCode::kNotFound, "--lora: repository ", repo.root(),
           " has no transformer to apply adapters to");
  const dit::DitConfig config = dit::DitConfig::load(repo.component(component).folder);
  dit::LoraReadOptions ro;
  ro.allow_unmatched = allow_unmatched;
  for (const dit::LoraSpec& spec : specs) {
    out.push_back(
        {spec, std::make_shared<const dit::LoraAdapter>(dit::read_lora(spec.file, config, ro))});
  }
  return out;
}

std::optional<std::string> lora_gates_source(const std::vector<EngineLora>& loras) {
  for (const EngineLora& l : loras)
    if (l.adapter->sets_vsa_gates && l.spec.scale != 0.0f) return l.spec.file;
  return std::nullopt;
}

Engine::Engine(const std::string& model_dir, const EngineOptions& options)
    : model_dir_(model_dir), options_(options), loaded_(std::make_unique<Loaded>()) {
  // --cpu-offload streams the DiT's blocks from pinned host memory to the device
  // (core/layer_stream.h). On the CPU there is nothing to offload to: refuse rather than
  // silently ignore the flag.
  H3_CHECK(!options.cpu_offload || options.device.is_cuda(), ErrorCode::kUnsupported,
           "--cpu-offload needs a CUDA device (--device cuda); on ", options.device.str(),
           " the weights already live in host memory");
  H3_CHECK(ops::attention_kernel_available(options.vae_attention, options.device), ErrorCode::kUnsupported,
           "--vae-attention ", ops::attention_kernel_name(options.vae_attention), " is not available on ",
           options.device.str(),
           options.device.is_cpu() ? " (the CPU has one attention kernel; leave --vae-attention at auto)"
                                   : " (hopper needs a compute capability 9.0 GPU and a build with sm_90a kernels)");
  repo_ = io::Repository::open(model_dir);
  PlanOptions po;
  po.device = options.device;
  po.sequential = options.sequential;
  po.cpu_offload = options.cpu_offload;
  po.request = options.plan_request;
  po.dit_bf16 = dit_precision_of(options) == dit::DitPrecision::kBF16;
  po.conditioner_bf16 = conditioner_dtype_of(options) == DType::kBF16;
  po.vae_f16_gemm = vae_precision_of(options) == video_vae::VaePrecision::kF16Autocast;
  po.vae_tile_batch = options.vae_tile_batch;
  po.vsa_attention = options.attention == dit::DitAttentionBackend::kVsa;
  po.dit_fused_rounding = dit_rounding_of(options) == dit::DitRounding::kFused;
  po.dit_fp8 = options.dit_fp8;
  po.conditioner_fp8 = options.text_encoder_fp8;
  plan_ = plan_memory(repo_, po);
  check_fits(plan_);
  H3_LOG_DEBUG("memory plan: ", describe(plan_));
}

Engine::~Engine() { io::release_device_staging(); }

dit::DitRounding Engine::dit_rounding() const { return dit_rounding_of(options_); }

// Only a sequential plan gives the conditioner back between generations. A streamed conditioner
// holds its embeddings, vision tower and two layer slots on the device and its layers in pinned
// host memory, and stays loaded like a resident one, so warm generations read nothing from disk.
bool Engine::releases_conditioner() const { return plan_.sequential; }

qwen3_vl::Qwen3VlModel& Engine::conditioner(Receipt& rc, bool with_vision) {
  Loaded& l = *loaded_;
  if (l.conditioner && l.conditioner->loaded()) {
    // A text-only conditioner asked for vision (t2va, then fl2va) gets its tower; the rest stays.
    if (with_vision && !l.conditioner->has_vision()) {
      uint64_t vision_bytes = 0;
      const io::Checkpoint ck = repo_.checkpoint("text_encoder");
      for (const std::string& n : ck.names())
        if (n.rfind("model.visual.", 0) == 0) vision_bytes += ck.info(n).nbytes;
      LoadMeter meter(rc, "conditioner vision", vision_bytes, options_.device);
      l.conditioner->load_vision(repo_.component("text_encoder").folder);
      meter.done(options_.device);
    }
    return *l.conditioner;
  }
  // Sequential: nothing else may occupy the device while the conditioner is resident.
  if (releases_conditioner()) {
    l.transformer.reset();
    l.vae.reset();
    l.audio_vae.reset();
  }
  LoadMeter meter(rc, "conditioner", file_bytes_of(plan_, "conditioner"), options_.device);
  qwen3_vl::Qwen3VlLoadOptions copt;
  copt.stream_layers = options_.stream_conditioner || plan_.conditioner_streamed;
  copt.vision = with_vision;
  copt.fp8 = options_.text_encoder_fp8;
  l.conditioner = qwen3_vl::Qwen3VlModel::load(repo_.component("text_encoder").folder,
                                               conditioner_dtype_of(options_), options_.device, copt);
  meter.done(options_.device);
  return *l.conditioner;
}

dit::DitModel& Engine::transformer(Receipt& rc, bool reference) {
  Loaded& l = *loaded_;
  if (l.transformer && l.transformer_is_ref == reference) return *l.transformer;
  if (releases_conditioner() && l.conditioner) l.conditioner.reset();
  l.transformer.reset();  // the other partition goes first: both never need to be resident
  const std::string name = reference ? "transformer_ref" : "transformer";
  H3_CHECK(repo_.has(name), ErrorCode::kNotFound, "repository ", model_dir_, " has no component '",
           name, "'");
  dit::DitOptions dopt;
  dopt.device = options_.device;
  dopt.precision = dit_precision_of(options_);
  dopt.rounding = dit_rounding_of(options_);
  dopt.fp8 = options_.dit_fp8;
  dopt.fp8_scaling = options_.dit_fp8_scaling;
  dopt.attention = options_.attention;
  dopt.vsa = options_.vsa;
  // --cpu-offload streams every block; a plan that chose cpu-offload keeps as many blocks on the
  // device as fit (dit_resident_blocks); an explicit count wins over both.
  if (options_.dit_resident_blocks) {
    dopt.resident_blocks = options_.dit_resident_blocks;
  } else if (options_.cpu_offload) {
    dopt.cpu_offload = true;
  } else if (plan_.cpu_offload) {
    dopt.resident_blocks = plan_.dit_resident_blocks;
  }
  LoadMeter meter(rc, name, repo_.checkpoint(name).total_bytes(), options_.device);
  l.transformer = dit::DitModel::load(repo_.component(name).folder, dopt);
  l.transformer_is_ref = reference;
  meter.done(options_.device);
  apply_loras(*l.transformer, reference, rc);
  return *l.transformer;
}

void Engine::apply_loras(dit::DitModel& model, bool reference, Receipt& rc) {
  if (options_.loras.empty()) {
    if (model.has_loras()) model.remove_loras();
    rc.set("lora", "none");
    return;
  }
  std::vector<dit::ScaledLora> set;
  for (const EngineLora& l : options_.loras) set.push_back({l.adapter.get(), l.spec.scale});
  {
    auto stage = rc.stage("apply lora");
    model.apply_loras(set, options_.lora_mode, options_.lora_restorable,
                      reference ? "transformer_ref" : "transformer");
    // The fuse is queued on the default stream; the stage's time is its completion.
    if (options_.device.is_cuda()) Stream().synchronize();
  }
  rc.set("lora", model.applied_loras().empty() ? "none" : model.applied_loras());
}

void Engine::set_loras(std::vector<EngineLora> loras, Receipt& rc) {
  auto same = [&] {
    if (loras.size() != options_.loras.size()) return false;
    for (size_t i = 0; i < loras.size(); ++i) {
      if (loras[i].adapter != options_.loras[i].adapter ||
          loras[i].spec.scale != options_.loras[i].spec.scale)
        return false;
    }
    return true;
  };
  if (same()) return;
  options_.loras = std::move(loras);
  Loaded& l = *loaded_;
  if (!l.transformer) return;
  if (l.transformer->has_loras() && !l.transformer->loras_restorable()) {
    // Fused without originals: the checkpoint is the original.
    l.transformer.reset();
    return;
  }
  apply_loras(*l.transformer, l.transformer_is_ref, rc);
}

video_vae::VideoVae& Engine::video_vae(Receipt& rc, bool encoder) {
  Loaded& l = *loaded_;
  if (l.vae && (l.vae_has_encoder || !encoder)) return *l.vae;
  if (releases_conditioner() && l.conditioner) l.conditioner.reset();
  l.vae.reset();
  video_vae::VideoVaeOptions vopt;
  vopt.device = options_.device;
  vopt.precision = vae_precision_of(options_);
  vopt.attention = options_.vae_attention;
  vopt.tile_batch = options_.vae_tile_batch;
  vopt.decoder_fp8 = options_.vae_fp8;
  vopt.load_encoder = encoder;
  LoadMeter meter(rc, "vae", file_bytes_of(plan_, "vae"), options_.device);
  l.vae = video_vae::VideoVae::load(repo_.component("vae").folder, vopt);
  l.vae_has_encoder = encoder;
  meter.done(options_.device);
  return *l.vae;
}

audio_vae::AudioVae& Engine::audio_vae(Receipt& rc, bool encoder) {
  Loaded& l = *loaded_;
  if (l.audio_vae && (l.audio_vae_has_encoder || !encoder)) return *l.audio_vae;
  if (releases_conditioner() && l.conditioner) l.conditioner.reset();
  l.audio_vae.reset();
  audio_vae::AudioVaeOptions aopt;
  aopt.device = options_.device;
  aopt.load_encoder = encoder;
  LoadMeter meter(rc, "audio_vae", file_bytes_of(plan_, "audio_vae"), options_.device);
  l.audio_vae = audio_vae::AudioVae::load(repo_.component("audio_vae").folder, aopt);
  l.audio_vae_has_encoder = encoder;
  meter.done(options_.device);
  return *l.audio_vae;
}

void Engine::finished_with_conditioner(Receipt& rc) {
  Loaded& l = *loaded_;
  if (!releases_conditioner() || !l.conditioner) return;
  auto s = rc.stage("release conditioner");
  l.conditioner->release();
  l.conditioner.reset();
  // The freed blocks go back to the driver, not only to our pool: the planner's figures and any
  // other process on the GPU then see the conditioner's memory as free.
  if (options_.device.is_cuda()) cuda_release_cached(options_.device.index);
}

void Engine::finished_generation(Receipt& rc) {
  (void)rc;
  // The pinned staging ring is only needed while loading: every load of a generation is done.
  io::release_device_staging();
  // Sequential plans cannot keep the DiT beside the conditioner the next prompt needs; they are
  // released lazily by conditioner() so that a caller that only decodes keeps them.
}

void Engine::release_all() {
  loaded_ = std::make_unique<Loaded>();
  io::release_device_staging();
  if (options_.device.is_cuda()) cuda_release_cached(options_.device.index);
}

bool Engine::is_loaded(const std::string& component) const {
  const Loaded& l = *loaded_;
  if (component == "conditioner" || component == "text_encoder")
    return l.conditioner.has_value() && l.conditioner->loaded();
  if (component == "transformer") return l.transformer.has_value() && !l.transformer_is_ref;
  if (component == "transformer_ref") return l.transformer.has_value() && l.transformer_is_ref;
  if (component == "vae") return l.vae.has_value();
  if (component == "audio_vae") return l.audio_vae.has_value();
  fail(ErrorCode::kInvalidArgument, "unknown component '", component, "'");
}

}  // namespace h3::pipeline
