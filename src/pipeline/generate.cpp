#include "pipeline/generate.h"

#include <cctype>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "core/status.h"
#include "io/repo.h"
#include "media/audio_resample.h"
#include "media/qwen_processor.h"
#include "media/reference_media.h"
#include "models/audio_vae/audio_vae_model.h"
#include "models/h3_dit/dit_config.h"
#include "models/h3_dit/dit_graph.h"
#include "models/h3_dit/dit_model.h"
#include "models/qwen3_vl/qwen3_vl_model.h"
#include "models/video_vae/video_vae_model.h"
#include "ops/fp8.h"
#include "ops/ops.h"
#include "pipeline/engine.h"
#include "pipeline/scheduler.h"
#include "pipeline/torch_generator.h"
#include "text/presentation.h"
#include "text/tokenizer.h"

namespace h3::pipeline {

Reference Reference::from_image(media::RgbImage image) {
  Reference r;
  r.kind = ReferenceKind::kImage;
  r.image = std::move(image);
  return r;
}

Reference Reference::from_video(VideoClip video) {
  Reference r;
  r.kind = ReferenceKind::kVideo;
  r.video = std::move(video);
  return r;
}

Reference Reference::from_audio(AudioClip audio) {
  Reference r;
  r.kind = ReferenceKind::kAudio;
  r.audio = std::move(audio);
  return r;
}

namespace {

// The Qwen video sampling of a reference (h3_components_spec.md §4.4): 2 fps out of 24, i.e.
// every 12th normalized frame.
constexpr int64_t kQwenVideoStride = 12;
constexpr double kQwenVideoFps = 2.0;
// Posterior samples of conditions use a fresh generator with this seed (pipeline fact 6).
constexpr uint64_t kPosteriorSeed = 42;

bool is_blank(const std::string& s) {
  for (unsigned char c : s)
    if (!std::isspace(c)) return false;
  return true;
}

// [1, ...] -> [...] for tensors the golden data stores with a batch dimension.
Tensor unbatch(const Tensor& t, int dims) {
  return t.dim() == dims + 1 && t.size(0) == 1 ? t.select(0, 0) : t;
}

void check_shape(const Tensor& t, const Shape& want, const std::string& name) {
  H3_CHECK(t.defined() && t.shape() == want, ErrorCode::kInvalidArgument, "injected ", name,
           " has shape ", t.defined() ? t.desc() : std::string("(undefined)"), ", expected ",
           shape_str(want));
}

text::VisionGrid vision_grid(const qwen3_vl::GridThw& g) { return {g.t, g.h, g.w}; }

// uint8 frames -> [1, 3, F, H, W] uint8, the VAE's pixel layout.
Tensor pixels_of(const std::vector<media::RgbImage>& frames) {
  return media::frames_to_tensor(frames).unsqueeze(0).permute({0, 4, 1, 2, 3}).contiguous();
}

void check_audio_clip(const AudioClip& a, const std::string& what) {
  H3_CHECK(a.waveform.defined() && a.waveform.dim() == 2 &&
               (a.waveform.size(0) == 1 || a.waveform.size(0) == 2) && a.waveform.size(1) > 0,
           ErrorCode::kInvalidArgument, what,
           ": expected a waveform [1 or 2 channels, samples], got ",
           a.waveform.defined() ? a.waveform.desc() : std::string("nothing"));
  H3_CHECK(a.sample_rate > 0, ErrorCode::kInvalidArgument, what,
           ": the sample rate must be positive, got ", a.sample_rate);
}

// One visual condition, prepared on the CPU: the uint8 frames the VAE encodes and, for the
// conditioner, its Qwen pixels.
struct VisualCondition {
  std::vector<media::RgbImage> vae_frames;
  media::QwenPixels qwen;
  bool is_video = false;
  std::vector<double> block_timestamps;  // video
  Tensor latent;                         // [1, 24, T, h, w] normalized (after the VAE encode)
};

// Everything derived from the media before any weight is read.
struct PreparedMedia {
  std::vector<text::PresentedMedia> presented;
  std::vector<VisualCondition> visual;    // packed order
  std::vector<KeyframeAnchor> anchors;    // fl2va
  std::vector<ReferenceKind> kinds;       // ref2va, request order
  std::vector<Tensor> audio_waveforms;    // normalized [2, S] at 32 kHz, packed order
  std::vector<int64_t> ref_visual_index;  // ref2va: index into `visual` or -1
  std::vector<int64_t> ref_audio_index;   // ref2va: index into `audio_waveforms` or -1
};

// Reference sample indices and block timestamps of a normalized reference video (§4.4):
// indices round(12 j) while < n; timestamps j / 2 s padded to an even count by repeating the
// last; block timestamp = mean of each consecutive pair.
void qwen_video_sampling(int64_t n, std::vector<int64_t>* indices, std::vector<double>* blocks) {
  std::vector<double> ts;
  for (int64_t j = 0; j * kQwenVideoStride < n; ++j) {
    indices->push_back(j * kQwenVideoStride);
    ts.push_back(static_cast<double>(j) / kQwenVideoFps);
  }
  if (ts.size() % 2 == 1) ts.push_back(ts.back());
  for (size_t i = 0; i + 1 < ts.size(); i += 2) blocks->push_back((ts[i] + ts[i + 1]) / 2.0);
}

Tensor normalized_audio(const AudioClip& clip, int64_t num_frames, const std::string& what) {
  check_audio_clip(clip, what);
  return media::normalize_reference_audio(clip.waveform.to(Device::cpu()).to(DType::kF32),
                                          clip.sample_rate,
                                          media::reference_max_duration(num_frames));
}

PreparedMedia prepare_media(const std::string& workflow, const GenerateRequest& req,
                            const Canvas& canvas, int64_t num_frames, const CanvasConfig& cc,
                            const media::QwenProcessorConfig& icfg,
                            const media::QwenProcessorConfig& vcfg) {
  PreparedMedia pm;
  if (workflow == "fl2va") {
    // The image at list index 0 is stretched, a second one cover-cropped (§4.3).
    std::vector<std::pair<const media::RgbImage*, KeyframeAnchor>> keys;
    if (req.first_image) keys.emplace_back(&*req.first_image, KeyframeAnchor::kFirst);
    if (req.last_image) keys.emplace_back(&*req.last_image, KeyframeAnchor::kLast);
    for (size_t i = 0; i < keys.size(); ++i) {
      VisualCondition vc;
      vc.vae_frames.push_back(i == 0 ? media::stretch_keyframe(*keys[i].first, canvas)
                                     : media::cover_crop_keyframe(*keys[i].first, canvas));
      vc.qwen = media::qwen_process_image(media::image_to_tensor(vc.vae_frames[0]), icfg);
      pm.presented.push_back(text::PresentedMedia::image(vision_grid(vc.qwen.grid)));
      pm.anchors.push_back(keys[i].second);
      pm.visual.push_back(std::move(vc));
    }
    return pm;
  }
  if (workflow != "ref2va") return pm;
  for (size_t k = 0; k < req.references.size(); ++k) {
    const Reference& r = req.references[k];
    const std::string what = std::string("reference ") + std::to_string(k + 1) + " (" +
                             reference_kind_name(r.kind) + ")";
    pm.kinds.push_back(r.kind);
    pm.ref_visual_index.push_back(-1);
    pm.ref_audio_index.push_back(-1);
    if (r.kind == ReferenceKind::kImage) {
      H3_CHECK(r.image.width > 0 && r.image.height > 0, ErrorCode::kInvalidArgument, what,
               " has no pixels");
      VisualCondition vc;
      vc.vae_frames.push_back(
          media::normalize_reference_image(r.image, cc.reference_image_short_edge, cc.multiple));
      vc.qwen = media::qwen_process_image(media::image_to_tensor(vc.vae_frames[0]), icfg);
      pm.presented.push_back(text::PresentedMedia::image(vision_grid(vc.qwen.grid)));
      pm.ref_visual_index.back() = static_cast<int64_t>(pm.visual.size());
      pm.visual.push_back(std::move(vc));
    } else if (r.kind == ReferenceKind::kVideo) {
      H3_CHECK(!r.video.frames.empty(), ErrorCode::kInvalidArgument, what, " has no frames");
      H3_CHECK(std::isfinite(r.video.fps) && r.video.fps > 0, ErrorCode::kInvalidArgument, what,
               ": the frame rate must be positive, got ", r.video.fps);
      const media::NormalizedVideo nv =
          media::normalize_reference_video(r.video.frames, r.video.fps, num_frames, cc);
      const int64_t n = static_cast<int64_t>(nv.frames.size());
      VisualCondition vc;
      vc.is_video = true;
      const int64_t enc = media::reference_frames_for_encoding(n);
      vc.vae_frames.assign(nv.frames.begin(), nv.frames.begin() + enc);
      std::vector<int64_t> idx;
      qwen_video_sampling(n, &idx, &vc.block_timestamps);
      std::vector<media::RgbImage> picked;
      for (int64_t i : idx) picked.push_back(nv.frames[static_cast<size_t>(i)]);
      vc.qwen = media::qwen_process_video(media::frames_to_tensor(picked), vcfg);
      const bool sound = r.video.soundtrack.has_value();
      pm.presented.push_back(
          text::PresentedMedia::video(vision_grid(vc.qwen.grid), vc.block_timestamps, sound));
      if (sound) {
        pm.ref_audio_index.back() = static_cast<int64_t>(pm.audio_waveforms.size());
        pm.audio_waveforms.push_back(
            normalized_audio(*r.video.soundtrack, num_frames, what + " soundtrack"));
      }
      pm.ref_visual_index.back() = static_cast<int64_t>(pm.visual.size());
      pm.visual.push_back(std::move(vc));
    } else {
      pm.presented.push_back(text::PresentedMedia::audio());
      pm.ref_audio_index.back() = static_cast<int64_t>(pm.audio_waveforms.size());
      pm.audio_waveforms.push_back(normalized_audio(r.audio, num_frames, what));
    }
  }
  return pm;
}

text::Workflow text_workflow(const std::string& w) {
  if (w == "fl2va") return text::Workflow::kFL2VA;
  if (w == "ref2va") return text::Workflow::kRef2VA;
  return text::Workflow::kT2VA;
}

}  // namespace

CanvasConfig repository_canvas_config(const io::Repository& repo) {
  // The tiny checkpoint shrinks the canvas settings in its index (geometry.h).
  const std::string file = repo.index_file();
  CanvasConfig c;
  c.short_edge = io::config_int_or(repo.pipeline_config(), "canvas_short_edge", file, c.short_edge);
  c.max_pixels = io::config_int_or(repo.pipeline_config(), "canvas_max_pixels", file, c.max_pixels);
  c.reference_image_short_edge = io::config_int_or(
      repo.pipeline_config(), "reference_image_short_edge", file, c.reference_image_short_edge);
  // The canvas multiple follows the VAE's compression, as the reference's `canvas_multiple`
  // (without a VAE the release's; a generation refuses such a repository by name).
  if (repo.has("vae"))
    c = canvas_config_for_vae(c, video_vae::VideoVaeConfig::load(repo.component("vae").folder).spatial_ratio());
  return c;
}

RequestDefaults request_defaults(const io::Repository& repo, const std::string& workflow) {
  RequestDefaults d;
  if (workflow == "fl2va") d.num_frames = 192;  // FL2VA's preset is 8 s (§4.2)
  const nlohmann::json& index = repo.pipeline_config();
  const std::string file = repo.index_file();
  // An entry set to null is absent.
  auto has = [&](const char* key) { return index.contains(key) && !index.at(key).is_null(); };
  if (has("default_num_frames")) {
    d.num_frames = io::config_int_or(index, "default_num_frames", file, d.num_frames);
    H3_CHECK(d.num_frames >= 1, ErrorCode::kInvalidFile, file,
             ": default_num_frames must be positive, got ", d.num_frames);
    d.frames_from_checkpoint = true;
  }
  const bool h = has("default_height"), w = has("default_width");
  H3_CHECK(h == w, ErrorCode::kInvalidFile, file,
           ": default_height and default_width go together (the checkpoint's canvas), found only ",
           h ? "default_height" : "default_width");
  if (h) {
    d.height = io::config_int_or(index, "default_height", file, 0);
    d.width = io::config_int_or(index, "default_width", file, 0);
    H3_CHECK(*d.height > 0 && *d.width > 0, ErrorCode::kInvalidFile, file,
             ": default_height and default_width must be positive, got ", *d.height, " and ",
             *d.width);
  }
  return d;
}

void apply_request_defaults(const io::Repository& repo, bool frames_given,
                            GenerateRequest& request) {
  const RequestDefaults d = request_defaults(repo, resolve_workflow(request));
  if (!frames_given) {
    request.num_frames = d.num_frames;
    if (d.frames_from_checkpoint) request.allow_any_duration = true;
  }
  if (!request.height && !request.width && d.height) {
    request.height = d.height;
    request.width = d.width;
  }
}

std::string resolve_workflow(const GenerateRequest& r) {
  const bool keyframes = r.first_image.has_value() || r.last_image.has_value();
  const bool refs = !r.references.empty();
  std::string w = r.workflow;
  if (w.empty()) w = refs ? "ref2va" : keyframes ? "fl2va" : "t2va";
  H3_CHECK(w == "t2va" || w == "fl2va" || w == "ref2va", ErrorCode::kInvalidArgument,
           "unknown workflow '", w, "' (expected t2va, fl2va or ref2va)");
  H3_CHECK(!(keyframes && refs), ErrorCode::kInvalidArgument,
           "keyframes (--image/--last-image) and references (--ref) cannot be combined: keyframes "
           "are fl2va, references ref2va");
  if (w == "t2va") {
    H3_CHECK(!keyframes && !refs, ErrorCode::kInvalidArgument,
             "workflow t2va takes no images or references (use fl2va or ref2va)");
  } else if (w == "fl2va") {
    H3_CHECK(keyframes, ErrorCode::kInvalidArgument,
             "workflow fl2va needs a first and/or last keyframe (--image, --last-image)");
    H3_CHECK(!refs, ErrorCode::kInvalidArgument, "workflow fl2va takes no references");
  } else {
    H3_CHECK(refs, ErrorCode::kInvalidArgument,
             "workflow ref2va needs at least one reference (--ref image:|video:|audio:PATH)");
    H3_CHECK(!keyframes, ErrorCode::kInvalidArgument, "workflow ref2va takes no keyframes");
    std::vector<ReferenceKind> kinds;
    for (const Reference& ref : r.references) kinds.push_back(ref.kind);
    check_reference_counts(kinds);
  }
  return w;
}

// Everything one generation carries from stage to stage.
struct Generation::State {
  State(Engine& e, const GenerateRequest& r, const GenerateOptions& o, Receipt* receipt)
      : engine(e), request(r), options(o), rc(receipt ? *receipt : own_receipt) {}
  Engine& engine;
  const GenerateRequest& request;
  const GenerateOptions& options;
  Receipt own_receipt;
  Receipt& rc;
  int done = 0;  // stages finished: 0 none, 1 prepare, 2 encode, 3 denoise, 4 decode
  GenerateResult result;
  std::string workflow;
  TargetGeometry geo;
  PreparedMedia pm;
  std::vector<int64_t> text_tags;
  std::vector<Tensor> audio_cond_rows;
  PackedLayout layout;
  LatentGrid grid;
  // The latents' widths, from the VAEs' configs (checked against the DiT's in prepare).
  int64_t latent_channels = kLatentChannels;
  int64_t audio_latent_channels = kAudioLatentChannels;
  DualSchedule sched;
  Tensor video_rows, audio_rows;
  int64_t ncv = 0, nca = 0;

  const GenerateInjection* inj() const { return options.inject; }
  bool have_embeds() const { return inj() && inj()->prompt_embeds.defined(); }
  void progress(const std::string& stage, int64_t step, int64_t steps) const {
    if (options.on_progress) options.on_progress(stage, step, steps);
  }
  // Stops at a boundary when the caller asked for it; nothing half-done is left behind, and the
  // engine keeps what it loaded for the next request.
  void check_cancelled(const std::string& where) const {
    if (options.cancelled && options.cancelled())
      fail(ErrorCode::kCancelled, "generation cancelled ", where);
  }
  void enter(int stage, const char* name) {
    H3_CHECK(done == stage - 1, ErrorCode::kInternal, "generation stage '", name,
             "' called out of order (", done, " stages done)");
  }
  // Device memory high-water mark of a stage (what the memory plan's per-stage estimate is
  // checked against): the pool's mark is reset when the stage starts, read when it ends.
  void peak_begin() const {
    if (engine.device().is_cuda()) cuda_pool_reset_peak(engine.device().index);
  }
  void peak_end(const char* stage) const {
    if (engine.device().is_cuda())
      rc.set(std::string("peak_device_bytes ") + stage,
             static_cast<int64_t>(cuda_pool_peak_bytes(engine.device().index)));
  }
};

Generation::Generation(Engine& engine, const GenerateRequest& request,
                       const GenerateOptions& options, Receipt* receipt)
    : s_(std::make_unique<State>(engine, request, options, receipt)) {}

Generation::~Generation() = default;

const GenerateResult& Generation::result() const { return s_->result; }
GenerateResult Generation::take_result() { return std::move(s_->result); }
int Generation::stages_done() const { return s_->done; }

const char* Generation::stage_name(int index) {
  static const char* const kNames[] = {"prepare", "encode", "denoise", "decode"};
  return index >= 0 && index < kNumStages ? kNames[index] : "?";
}

void Generation::prepare() {
  State& g = *s_;
  g.enter(1, "prepare");
  g.check_cancelled("before it started");
  auto stage = g.rc.stage("prepare");
  g.progress("prepare", 0, 0);
  const GenerateRequest& request = g.request;
  // ---- request contract (h3_components_spec.md §4.2), checked before any weight is read ----
  g.workflow = resolve_workflow(request);
  g.result.workflow = g.workflow;
  H3_CHECK(g.have_embeds() || !is_blank(request.prompt), ErrorCode::kInvalidArgument,
           "prompt is empty; ", g.workflow, " needs a text prompt");
  H3_CHECK(request.num_inference_steps >= 2, ErrorCode::kInvalidArgument,
           "steps must be at least 2 (sigma-grid points, N points = N - 1 model calls), got ",
           request.num_inference_steps);
  H3_CHECK(request.num_inference_steps <= 1000, ErrorCode::kInvalidArgument,
           "steps must be at most 1000, got ", request.num_inference_steps);

  const io::Repository& repo = g.engine.repo();
  const std::string& workflow = g.workflow;
  const CanvasConfig cc = repository_canvas_config(repo);
  std::vector<std::string> needed = {"tokenizer", "text_encoder", "vae", "audio_vae"};
  needed.push_back(workflow == "ref2va" ? "transformer_ref" : "transformer");
  if (workflow != "t2va") needed.push_back("processor");
  for (const std::string& name : needed)
    H3_CHECK(repo.has(name), ErrorCode::kNotFound, "repository ", repo.root(),
             " has no component '", name, "' (needed for ", workflow, ")");
  // The reference sizes its latents from the VAEs' configs and builds the DiT from its own; a
  // repository whose two disagree would fail deep in the first forward, so say which files here.
  {
    const std::string dit_name = workflow == "ref2va" ? "transformer_ref" : "transformer";
    const std::string dit_dir = repo.component(dit_name).folder;
    const dit::DitConfig dc = dit::DitConfig::load(dit_dir);
    g.latent_channels =
        video_vae::VideoVaeConfig::load(repo.component("vae").folder).latent_channels;
    g.audio_latent_channels =
        audio_vae::AudioVaeConfig::load(repo.component("audio_vae").folder).latent_channels;
    H3_CHECK(dc.in_channels == g.latent_channels, ErrorCode::kInvalidFile, dit_dir,
             "/config.json: in_channels is ", dc.in_channels,
             " but the video VAE's latent_channels (", repo.component("vae").folder,
             "/config.json) is ", g.latent_channels,
             "; the DiT and the VAE must come from the same model");
    H3_CHECK(dc.audio_in_channels == g.audio_latent_channels, ErrorCode::kInvalidFile, dit_dir,
             "/config.json: audio_in_channels is ", dc.audio_in_channels,
             " but the audio VAE's latent_channels (", repo.component("audio_vae").folder,
             "/config.json) is ", g.audio_latent_channels,
             "; the DiT and the audio VAE must come from the same model");
  }
  // Default aspect: 16:9, or the first keyframe's own (§4.3).
  double aw = 16.0, ah = 9.0;
  if (workflow == "fl2va") {
    const media::RgbImage& first = request.first_image ? *request.first_image : *request.last_image;
    H3_CHECK(first.width > 0 && first.height > 0, ErrorCode::kInvalidArgument,
             "the keyframe has no pixels");
    aw = static_cast<double>(first.width);
    ah = static_cast<double>(first.height);
  }
  const Canvas canvas = resolve_target_canvas(request.height, request.width, aw, ah, cc);
  const FrameCount fc = resolve_num_frames(request.num_frames, request.allow_any_duration);
  g.result.frames_note = fc.note;
  g.geo = make_target_geometry(canvas, fc.frames, cc.vae_spatial_ratio);
  g.result.geometry = g.geo;
  media::QwenProcessorConfig icfg, vcfg;
  if (workflow != "t2va") {
    const std::string pfile = repo.component("processor").folder + "/processor_config.json";
    const nlohmann::json pj = io::read_json_file(pfile);
    icfg = media::QwenProcessorConfig::from_json(pj, "image_processor", pfile);
    vcfg = media::QwenProcessorConfig::from_json(pj, "video_processor", pfile);
  }
  g.pm = prepare_media(workflow, request, canvas, g.geo.num_frames, cc, icfg, vcfg);
  Receipt& rc = g.rc;
  rc.set("workflow", workflow);
  rc.set("height", g.geo.height);
  rc.set("width", g.geo.width);
  rc.set("num_frames", g.geo.num_frames);
  rc.set("steps", request.num_inference_steps);
  rc.set("seed", static_cast<int64_t>(request.seed));
  rc.set("device", g.engine.device().str());
  rc.set("attention", dit::attention_backend_name(g.engine.options().attention));
  rc.set("dit_rounding", g.engine.dit_rounding() == dit::DitRounding::kFused ? "fused" : "eager");
  if (g.engine.options().dit_fp8) {
    rc.set("dit_dtype", "fp8");
    rc.set("dit_fp8_scaling", ops::fp8_weight_scaling_name(g.engine.options().dit_fp8_scaling));
  }
  if (g.engine.options().text_encoder_fp8) rc.set("text_encoder_dtype", "fp8");
  if (g.engine.options().vae_fp8) rc.set("vae_dtype", "fp8");
  g.done = 1;
}

void Generation::encode() {
  State& g = *s_;
  g.enter(2, "encode");
  g.check_cancelled("before the prompt was encoded");
  auto stage = g.rc.stage("encode");
  g.peak_begin();
  Engine& engine = g.engine;
  Receipt& rc = g.rc;
  const GenerateInjection* inj = g.inj();
  const io::Repository& repo = engine.repo();
  const std::string& workflow = g.workflow;
  GenerateResult& result = g.result;
  PreparedMedia& pm = g.pm;
  const TargetGeometry& geo = g.geo;

  // ---- presentation + conditioner (§1.3, §1.7; pipeline facts 1-2) ----
  std::vector<int64_t>& text_tags = g.text_tags;
  g.progress("encode prompt", 0, 0);
  if (g.have_embeds()) {
    result.prompt_embeds = unbatch(inj->prompt_embeds, 2).to(Device::cpu()).to(DType::kF32);
    H3_CHECK(result.prompt_embeds.dim() == 2, ErrorCode::kInvalidArgument,
             "injected prompt_embeds must be [L, C], got ", result.prompt_embeds.desc());
    result.input_ids = inj->input_ids;
    if (!inj->text_tags.empty()) {
      text_tags = inj->text_tags;
    } else {
      H3_CHECK(workflow == "t2va", ErrorCode::kInvalidArgument, "injected prompt_embeds for ",
               workflow, " need the text tags");
      text_tags.assign(static_cast<size_t>(result.prompt_embeds.size(0)), text::kTagText);
    }
    H3_CHECK(static_cast<int64_t>(text_tags.size()) == result.prompt_embeds.size(0),
             ErrorCode::kInvalidArgument, "injected text tags (", text_tags.size(),
             ") do not match prompt_embeds ", result.prompt_embeds.desc());
  } else {
    text::Presentation pres;
    {
      auto s = rc.stage("tokenize");
      const text::Tokenizer tok = text::Tokenizer::from_file(repo.component("tokenizer").folder);
      const text::PromptPresenter presenter(tok);
      pres = presenter.present(text_workflow(workflow), g.request.prompt, pm.presented);
    }
    H3_CHECK(!pres.input_ids.empty(), ErrorCode::kInvalidArgument, "prompt produced no tokens");
    result.input_ids = pres.input_ids;
    text_tags = pres.text_token_tags;
    qwen3_vl::Qwen3VlModel& encoder = engine.conditioner(rc, /*with_vision=*/!pm.visual.empty());
    if (encoder.fp8_from_checkpoint() > 0) rc.set("text_encoder_dtype", "fp8");
    auto s = rc.stage("conditioner");
    std::vector<Tensor> image_px, video_px;
    std::vector<qwen3_vl::GridThw> image_grids, video_grids;
    for (const VisualCondition& vc : pm.visual) {
      (vc.is_video ? video_px : image_px).push_back(vc.qwen.pixel_values);
      (vc.is_video ? video_grids : image_grids).push_back(vc.qwen.grid);
    }
    // The Qwen processor runs on the host; its pixels go to the conditioner's device.
    const Device dev = engine.device();
    const Tensor pv = image_px.empty() ? Tensor() : ops::concat(image_px, 0).to(dev);
    const Tensor pvv = video_px.empty() ? Tensor() : ops::concat(video_px, 0).to(dev);
    const Tensor embeds = pm.visual.empty()
                              ? encoder.encode_text(pres.input_ids)
                              : encoder.encode(pres.input_ids, pv, image_grids, pvv, video_grids);
    result.prompt_embeds = embeds.to(Device::cpu()).to(DType::kF32);
  }
  engine.finished_with_conditioner(rc);
  rc.set("text_tokens", static_cast<int64_t>(text_tags.size()));
  g.check_cancelled("after the prompt was encoded");

  // ---- condition encodes (§4.5; pipeline fact 6) ----
  std::vector<Tensor>& audio_cond_rows = g.audio_cond_rows;
  if (!pm.visual.empty() || !pm.audio_waveforms.empty()) g.progress("encode conditions", 0, 0);
  const bool inject_latents = inj && !inj->condition_latents.empty();
  if (inject_latents) {
    H3_CHECK(inj->condition_latents.size() == pm.visual.size(), ErrorCode::kInvalidArgument,
             "injected condition latents: ", inj->condition_latents.size(), " tensors, expected ",
             pm.visual.size());
    for (size_t i = 0; i < pm.visual.size(); ++i) {
      VisualCondition& vc = pm.visual[i];
      vc.latent = inj->condition_latents[i].to(Device::cpu()).to(DType::kF32).contiguous();
      H3_CHECK(
          vc.latent.dim() == 5 && vc.latent.size(0) == 1 && vc.latent.size(1) == g.latent_channels,
          ErrorCode::kInvalidArgument, "injected condition latent ", i, " must be [1, ",
          g.latent_channels, ", T, h, w], got ", vc.latent.desc());
      vc.vae_frames.clear();
    }
  } else if (!pm.visual.empty()) {
    video_vae::VideoVae& vae = engine.video_vae(rc, /*encoder=*/true);
    auto s = rc.stage("encode conditions");
    for (VisualCondition& vc : pm.visual) {
      const Tensor pixels = video_vae::normalize_pixels(pixels_of(vc.vae_frames));
      const Tensor moments = vae.encode_moments(pixels.to(engine.device()));
      const video_vae::Posterior post = video_vae::posterior_from_moments(moments);
      // A fresh seed-42 generator per condition; the sample is rounded through float16.
      TorchGenerator g42(kPosteriorSeed);
      const Tensor noise = g42.randn(post.mean.shape());
      const Tensor sample =
          video_vae::posterior_sample(post, noise).to(DType::kF16).to(DType::kF32);
      vc.latent = vae.normalize_latents(sample).to(Device::cpu()).to(DType::kF32);
      vc.vae_frames.clear();
    }
  }
  for (const VisualCondition& vc : pm.visual) result.condition_latents.push_back(vc.latent);
  if (inj && !inj->audio_condition_rows.empty()) {
    H3_CHECK(inj->audio_condition_rows.size() == pm.audio_waveforms.size(),
             ErrorCode::kInvalidArgument,
             "injected audio condition rows: ", inj->audio_condition_rows.size(),
             " tensors, expected ", pm.audio_waveforms.size());
    for (const Tensor& t : inj->audio_condition_rows) {
      const Tensor rows = unbatch(t, 2).to(Device::cpu()).to(DType::kF32).contiguous();
      H3_CHECK(rows.dim() == 2 && rows.size(1) == g.audio_latent_channels &&
                   rows.size(0) % kAudioChannels == 0,
               ErrorCode::kInvalidArgument, "injected audio condition rows must be [2N, ",
               g.audio_latent_channels, "], got ", rows.desc());
      audio_cond_rows.push_back(rows);
    }
  } else if (!pm.audio_waveforms.empty()) {
    audio_vae::AudioVae& avae = engine.audio_vae(rc, /*encoder=*/true);
    auto s = rc.stage("encode reference audio");
    for (const Tensor& w : pm.audio_waveforms)
      audio_cond_rows.push_back(avae.encode_reference_rows(w).to(Device::cpu()).to(DType::kF32));
  }

  // ---- packed layout, schedules, draws (§3.3, §4; pipeline facts 3-7) ----
  g.grid = LatentGrid{geo.latent_frames, geo.latent_height, geo.latent_width};
  if (workflow == "ref2va") {
    std::vector<ReferenceLayout> refs;
    for (size_t k = 0; k < pm.kinds.size(); ++k) {
      ReferenceLayout rl;
      rl.kind = pm.kinds[k];
      const int64_t vi = pm.ref_visual_index[k];
      const int64_t ai = pm.ref_audio_index[k];
      if (vi >= 0) {
        const Tensor& lat = pm.visual[static_cast<size_t>(vi)].latent;
        rl.grid = LatentGrid{lat.size(2), lat.size(3), lat.size(4)};
      }
      if (ai >= 0)
        rl.audio_latents = audio_cond_rows[static_cast<size_t>(ai)].size(0) / kAudioChannels;
      refs.push_back(rl);
    }
    g.layout = build_ref2va_packed_sequence(text_tags, refs, g.grid, geo.audio_latents);
  } else {
    g.layout = build_packed_sequence(text_tags, g.grid, geo.audio_latents, pm.anchors);
  }
  g.sched = make_dual_schedule(g.request.num_inference_steps);
  const Shape video_shape{1, g.latent_channels, geo.latent_frames, geo.latent_height,
                          geo.latent_width};
  const Shape audio_shape{geo.audio_rows(), g.audio_latent_channels};
  {
    auto s = rc.stage("draws");
    // One CPU generator: condition noise per visual condition, then the video noise, then the
    // audio noise directly as rows (fact 6). Injected values replace a draw but keep the order.
    TorchGenerator gen(g.request.seed);
    if (inj && !inj->condition_noise.empty())
      H3_CHECK(inj->condition_noise.size() == pm.visual.size(), ErrorCode::kInvalidArgument,
               "injected condition noise has ", inj->condition_noise.size(), " tensors, expected ",
               pm.visual.size());
    std::vector<Tensor> cond_rows;
    for (size_t i = 0; i < pm.visual.size(); ++i) {
      const Tensor& lat = pm.visual[i].latent;
      Tensor noise = gen.randn(lat.shape());
      if (inj && !inj->condition_noise.empty()) {
        const Tensor n = inj->condition_noise[i];
        check_shape(n, lat.shape(), "condition_noise_" + std::to_string(i));
        noise = n.to(Device::cpu()).to(DType::kF32);
      }
      // Noised once and held for every step (§4.5).
      cond_rows.push_back(
          scale_noise(kConditionNoiseLevel, patchify_video(lat), patchify_video(noise)));
    }
    Tensor video_noise = gen.randn(video_shape);
    Tensor audio_noise = gen.randn(audio_shape);
    if (inj && inj->video_noise.defined()) {
      check_shape(inj->video_noise, video_shape, "video_noise");
      video_noise = inj->video_noise.to(Device::cpu()).to(DType::kF32);
    }
    if (inj && inj->audio_noise_rows.defined()) {
      const Tensor a = unbatch(inj->audio_noise_rows, 2);
      check_shape(a, audio_shape, "audio_noise_rows");
      audio_noise = a.to(Device::cpu()).to(DType::kF32);
    }
    if (!cond_rows.empty()) result.condition_rows = ops::concat(cond_rows, 0).contiguous();
    if (!audio_cond_rows.empty())
      result.audio_condition_rows = ops::concat(audio_cond_rows, 0).contiguous();
    std::vector<Tensor> vparts = cond_rows;
    vparts.push_back(patchify_video(video_noise));
    g.video_rows =
        vparts.size() == 1 ? vparts[0].contiguous().clone() : ops::concat(vparts, 0).contiguous();
    std::vector<Tensor> aparts = audio_cond_rows;
    aparts.push_back(audio_noise);
    g.audio_rows =
        aparts.size() == 1 ? aparts[0].contiguous().clone() : ops::concat(aparts, 0).contiguous();
  }
  g.ncv = g.layout.num_condition_video_rows;
  g.nca = g.layout.num_condition_audio_rows;
  H3_CHECK(g.ncv == (result.condition_rows.defined() ? result.condition_rows.size(0) : 0) &&
               g.nca == (result.audio_condition_rows.defined()
                             ? result.audio_condition_rows.size(0)
                             : 0),
           ErrorCode::kInternal, "packed layout condition rows (", g.ncv, ", ", g.nca,
           ") disagree with the encoded conditions");
  g.peak_end("encode");
  g.done = 2;
}

void Generation::denoise() {
  State& g = *s_;
  g.enter(3, "denoise");
  g.check_cancelled("before denoising");
  Engine& engine = g.engine;
  Receipt& rc = g.rc;
  GenerateResult& result = g.result;
  const int64_t ncv = g.ncv, nca = g.nca;
  Tensor& video_rows = g.video_rows;
  Tensor& audio_rows = g.audio_rows;
  const DualSchedule& sched = g.sched;
  // The transformer's load is its own stage, outside "denoise", so that the step loop's time is
  // the loop's alone.
  dit::DitModel& model = engine.transformer(rc, g.workflow == "ref2va");
  // A checkpoint that stores its projections in FP8 runs them so without --dit-dtype fp8.
  if (model.fp8_weights()) rc.set("dit_dtype", "fp8");
  {
    auto d = rc.stage("denoise");
    g.peak_begin();
    const dit::DitTextContext text = model.encode_text(result.prompt_embeds);
    const dit::DitLayout dl =
        model.make_layout(g.layout.position_ids, g.layout.token_tags, g.layout.video_indices,
                          g.layout.audio_indices, g.layout.text_indices);
    const int64_t steps = sched.num_steps();
    dit::DitStepRunner runner(model, text, dl);
    rc.set("dit_blocks", model.config().num_layers);
    rc.set("dit_forwards", steps);
    rc.set("packed_rows", g.layout.token_tags.numel());
    g.progress("denoise", 0, steps);
    for (int64_t i = 0; i < steps; ++i) {
      g.check_cancelled("before step " + std::to_string(i + 1) + " of " + std::to_string(steps));
      auto st = rc.stage("step " + std::to_string(i));
      const float vt = sched.video.timesteps()[static_cast<size_t>(i)];
      const float at = sched.audio.timesteps()[static_cast<size_t>(i)];
      // The row plan and the scheduler update are host work (float32, bit-exact); the DiT takes
      // host rows and plans and moves them to its device itself.
      const RowTimesteps plan = plan_step_timesteps(g.layout, vt, at);
      const dit::DitOutputs out =
          runner.forward(video_rows, audio_rows, plan.unique, plan.indices, i);
      const Tensor v =
          out.video.to(Device::cpu()).to(DType::kF32).reshape({video_rows.size(0), -1});
      const Tensor a =
          out.audio.to(Device::cpu()).to(DType::kF32).reshape({audio_rows.size(0), -1});
      // Only generated rows are written; condition rows and reference audio stay as they are.
      const int64_t nv = video_rows.size(0), na = audio_rows.size(0);
      const Tensor vgen = video_rows.slice(0, ncv, nv).contiguous();
      const Tensor vel = v.slice(0, ncv, nv).contiguous();
      if (g.options.on_preview) {
        // The step's prediction of the clean latents, x0 = x + (1 - t) v (h3_dit_spec.md §3.2),
        // the picture a preview shows; computed only when someone watches.
        Tensor x0 = vgen.clone();
        float* px = x0.data<float>();
        const float* pv = vel.data<float>();
        const float k = 1.0f - vt;
        for (int64_t j = 0; j < x0.numel(); ++j) px[j] += k * pv[j];
        g.options.on_preview(i, steps, unpatchify_video(x0, g.latent_channels, g.grid));
      }
      const Tensor vnew = sched.video.step(i, vel, vgen);
      const Tensor anew = sched.audio.step(i, a.slice(0, nca, na).contiguous(),
                                           audio_rows.slice(0, nca, na).contiguous());
      video_rows = ncv == 0 ? vnew : ops::concat({result.condition_rows, vnew}, 0).contiguous();
      audio_rows =
          nca == 0 ? anew : ops::concat({result.audio_condition_rows, anew}, 0).contiguous();
      if (g.options.on_step) g.options.on_step(i, video_rows, audio_rows, v);
      g.progress("denoise", i + 1, steps);
    }
    rc.set("cuda_graphs", runner.graphs_state());
    rc.set("cuda_graph_captures", runner.captures());
    rc.set("cuda_graph_replays", runner.replays());
    rc.set("cuda_graph_capture_ms", runner.capture_ms());
  }
  result.latents = unpatchify_video(video_rows.slice(0, ncv, video_rows.size(0)).contiguous(),
                                    g.latent_channels, g.grid);
  result.audio_latents = unpack_audio_rows(
      audio_rows.slice(0, nca, audio_rows.size(0)).contiguous(), g.geo.audio_latents);
  g.peak_end("denoise");
  g.done = 3;
}

void Generation::decode() {
  State& g = *s_;
  g.enter(4, "decode");
  g.check_cancelled("before decoding");
  Engine& engine = g.engine;
  Receipt& rc = g.rc;
  GenerateResult& result = g.result;
  const GenerateOptions& options = g.options;
  const TargetGeometry& geo = g.geo;
  // ---- decoders (§2.6-2.8, §3.4; fact 9) ----
  const bool streaming = options.on_frames != nullptr;
  H3_CHECK(streaming == (options.on_audio != nullptr), ErrorCode::kInvalidArgument,
           "streaming output needs both on_audio and on_frames");
  // Loads are stages of their own (before "decode"), like the transformer's before "denoise".
  audio_vae::AudioVae& avae = engine.audio_vae(rc, /*encoder=*/false);
  video_vae::VideoVae& vae = engine.video_vae(rc, /*encoder=*/false);
  auto stage = rc.stage("decode");
  g.peak_begin();
  auto decode_audio = [&] {
    g.progress("decode audio", 0, 0);
    auto s = rc.stage("audio decode");
    const Tensor wave = avae.decode_normalized(result.audio_latents);  // [2, 1, S]
    result.audio = wave.to(Device::cpu()).reshape({wave.size(0), wave.size(-1)}).contiguous();
  };
  if (!streaming) {
    g.progress("decode video", 0, 0);
    {
      auto s = rc.stage("video decode");
      const Tensor decoded =
          vae.decode(vae.denormalize_latents(result.latents.to(engine.device()))).to(Device::cpu());
      const Tensor pixels = video_vae::denormalize_pixels(decoded);  // [1, 3, F, H, W]
      result.frames_float = pixels.permute({0, 2, 3, 4, 1}).select(0, 0).contiguous();
      result.frames = video_vae::frames_to_uint8(pixels).select(0, 0).contiguous();
    }
    decode_audio();
  } else {
    // The audio first (small, fast), so that the muxer can start with the first frames.
    decode_audio();
    options.on_audio(geo, result.audio);
    g.progress("decode video", 0, 0);
    auto s = rc.stage("video decode");
    std::vector<Tensor> floats, bytes;
    int64_t next = 0;
    vae.decode_streaming(
        vae.denormalize_latents(result.latents.to(engine.device())),
        [&](int64_t item, int64_t first_frame, const Tensor& chunk) {
          H3_CHECK(item == 0 && first_frame == next, ErrorCode::kInternal,
                   "streamed frames out of order: item ", item, " frame ", first_frame,
                   ", expected ", next);
          // The whole decode's conversions on this run of frames ([3, n, H, W]); without
          // keep_frames only the uint8 frames (a quarter of the bytes) leave the device.
          const Tensor c5 = chunk.reshape({1, chunk.size(0), chunk.size(1), chunk.size(2),
                                           chunk.size(3)});
          Tensor u8;
          if (options.keep_frames) {
            const Tensor pixels = video_vae::denormalize_pixels(c5.to(Device::cpu()));
            u8 = video_vae::frames_to_uint8(pixels).select(0, 0).contiguous();
            floats.push_back(pixels.permute({0, 2, 3, 4, 1}).select(0, 0).contiguous());
            bytes.push_back(u8);
          } else {
            u8 = video_vae::decoded_to_uint8(c5).select(0, 0).contiguous();
          }
          next += u8.size(0);
          options.on_frames(first_frame, u8);
        });
    H3_CHECK(next == geo.num_frames, ErrorCode::kInternal, "streamed ", next, " frames of ",
             geo.num_frames);
    if (options.keep_frames && !bytes.empty()) {
      result.frames_float = bytes.size() == 1 ? floats[0] : ops::concat(floats, 0);
      result.frames = bytes.size() == 1 ? bytes[0] : ops::concat(bytes, 0);
    }
  }
  stage.end();
  rc.set("vae_attention", ops::attention_kernel_name(vae.attention_used()));
  rc.set("vae_tile_batch", vae.tile_batch_used());
  g.peak_end("decode");
  engine.finished_generation(rc);
  g.done = 4;
}

GenerateResult Generation::run() {
  prepare();
  encode();
  denoise();
  decode();
  return take_result();
}

GenerateResult generate(Engine& engine, const GenerateRequest& request,
                        const GenerateOptions& options, Receipt* receipt) {
  return Generation(engine, request, options, receipt).run();
}

GenerateResult generate_t2va(const std::string& model_dir, const GenerateRequest& request,
                             const GenerateOptions& options, Receipt* receipt, Device device) {
  EngineOptions eo;
  eo.device = device;
  Engine engine(model_dir, eo);
  return generate(engine, request, options, receipt);
}

}  // namespace h3::pipeline
