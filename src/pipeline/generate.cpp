#include "pipeline/generate.h"

#include <cctype>
#include <memory>
#include <utility>

#include "core/status.h"
#include "io/repo.h"
#include "models/audio_vae/audio_vae_model.h"
#include "models/h3_dit/dit_model.h"
#include "models/qwen3_vl/qwen3_vl_model.h"
#include "models/video_vae/video_vae_model.h"
#include "pipeline/packing.h"
#include "pipeline/scheduler.h"
#include "pipeline/torch_generator.h"
#include "text/presentation.h"
#include "text/tokenizer.h"

namespace h3::pipeline {
namespace {

bool is_blank(const std::string& s) {
  for (unsigned char c : s)
    if (!std::isspace(c)) return false;
  return true;
}

// [1, ...] -> [...] for tensors the golden data stores with a batch dimension.
Tensor unbatch(const Tensor& t, int dims) {
  return t.dim() == dims + 1 && t.size(0) == 1 ? t.select(0, 0) : t;
}

void check_shape(const Tensor& t, const Shape& want, const char* name) {
  H3_CHECK(t.defined() && t.shape() == want, ErrorCode::kInvalidArgument, "injected ", name,
           " has shape ", t.defined() ? t.desc() : std::string("(undefined)"), ", expected ",
           shape_str(want));
}

CanvasConfig canvas_config(const io::Repository& repo) {
  // The tiny checkpoint shrinks the canvas settings in its index (geometry.h).
  const std::string file = repo.index_file();
  CanvasConfig c;
  c.short_edge = io::config_int_or(repo.pipeline_config(), "canvas_short_edge", file, c.short_edge);
  c.max_pixels = io::config_int_or(repo.pipeline_config(), "canvas_max_pixels", file, c.max_pixels);
  c.reference_image_short_edge = io::config_int_or(
      repo.pipeline_config(), "reference_image_short_edge", file, c.reference_image_short_edge);
  return c;
}

}  // namespace

GenerateResult generate_t2va(const std::string& model_dir, const GenerateRequest& request,
                             const GenerateOptions& options, Receipt* receipt) {
  Receipt local_receipt;
  Receipt& rc = receipt ? *receipt : local_receipt;
  const GenerateInjection* inj = options.inject;
  GenerateResult result;

  // ---- request contract (h3_components_spec.md §4.2), checked before any weight is read ----
  H3_CHECK(request.workflow == "t2va", ErrorCode::kUnsupported, "workflow '", request.workflow,
           "' is not implemented yet (only t2va is)");
  const bool have_embeds = inj && inj->prompt_embeds.defined();
  H3_CHECK(have_embeds || !is_blank(request.prompt), ErrorCode::kInvalidArgument,
           "prompt is empty; t2va needs a text prompt");
  H3_CHECK(request.num_inference_steps >= 2, ErrorCode::kInvalidArgument,
           "steps must be at least 2 (sigma-grid points, N points = N - 1 model calls), got ",
           request.num_inference_steps);
  H3_CHECK(request.num_inference_steps <= 1000, ErrorCode::kInvalidArgument,
           "steps must be at most 1000, got ", request.num_inference_steps);

  io::Repository repo;
  TargetGeometry geo;
  {
    auto s = rc.stage("resolve request");
    repo = io::Repository::open(model_dir);
    for (const char* name : {"tokenizer", "text_encoder", "transformer", "vae", "audio_vae"})
      H3_CHECK(repo.has(name), ErrorCode::kNotFound, "repository ", model_dir,
               " has no component '", name, "' (needed for t2va)");
    // T2VA's default aspect is 16:9 (h3_components_spec.md §4.3).
    const Canvas canvas =
        resolve_target_canvas(request.height, request.width, 16.0, 9.0, canvas_config(repo));
    const FrameCount fc = resolve_num_frames(request.num_frames, request.allow_any_duration);
    result.frames_note = fc.note;
    geo = make_target_geometry(canvas, fc.frames);
    result.geometry = geo;
  }
  rc.set("workflow", "t2va");
  rc.set("height", geo.height);
  rc.set("width", geo.width);
  rc.set("num_frames", geo.num_frames);
  rc.set("steps", request.num_inference_steps);
  rc.set("seed", static_cast<int64_t>(request.seed));
  rc.set("device", options.device.str());

  // ---- presentation + conditioner (§1.3, §1.7; pipeline facts 1-2) ----
  std::vector<int64_t> text_tags;
  if (have_embeds) {
    result.prompt_embeds = unbatch(inj->prompt_embeds, 2).to(Device::cpu()).to(DType::kF32);
    H3_CHECK(result.prompt_embeds.dim() == 2, ErrorCode::kInvalidArgument,
             "injected prompt_embeds must be [L, C], got ", result.prompt_embeds.desc());
    result.input_ids = inj->input_ids;
    text_tags.assign(static_cast<size_t>(result.prompt_embeds.size(0)), text::kTagText);
  } else {
    text::Presentation pres;
    {
      auto s = rc.stage("tokenize");
      const text::Tokenizer tok = text::Tokenizer::from_file(repo.component("tokenizer").folder);
      const text::PromptPresenter presenter(tok);
      pres = presenter.present(text::Workflow::kT2VA, request.prompt, {});
    }
    H3_CHECK(!pres.input_ids.empty(), ErrorCode::kInvalidArgument, "prompt produced no tokens");
    result.input_ids = pres.input_ids;
    text_tags = pres.text_token_tags;
    auto s = rc.stage("conditioner");
    // Scoped so the encoder's weights are released before the DiT is loaded.
    qwen3_vl::Qwen3VlModel encoder = qwen3_vl::Qwen3VlModel::load(
        repo.component("text_encoder").folder, DType::kF32, options.device);
    result.prompt_embeds = encoder.encode_text(pres.input_ids).to(Device::cpu()).to(DType::kF32);
    encoder.release();
  }
  rc.set("text_tokens", static_cast<int64_t>(text_tags.size()));

  // ---- packed layout, schedules, draws (§3.3, §4; pipeline facts 3-7) ----
  const LatentGrid grid{geo.latent_frames, geo.latent_height, geo.latent_width};
  const PackedLayout layout = build_packed_sequence(text_tags, grid, geo.audio_latents);
  const DualSchedule sched = make_dual_schedule(request.num_inference_steps);
  const Shape video_shape{1, kLatentChannels, geo.latent_frames, geo.latent_height,
                          geo.latent_width};
  const Shape audio_shape{geo.audio_rows(), kAudioLatentChannels};
  Tensor video_noise, audio_noise;
  {
    auto s = rc.stage("draws");
    // One CPU generator, video noise first, then audio noise directly as rows (fact 6).
    TorchGenerator gen(request.seed);
    video_noise = gen.randn(video_shape);
    audio_noise = gen.randn(audio_shape);
    if (inj && inj->video_noise.defined()) {
      check_shape(inj->video_noise, video_shape, "video_noise");
      video_noise = inj->video_noise.to(Device::cpu()).to(DType::kF32);
    }
    if (inj && inj->audio_noise_rows.defined()) {
      const Tensor a = unbatch(inj->audio_noise_rows, 2);
      check_shape(a, audio_shape, "audio_noise_rows");
      audio_noise = a.to(Device::cpu()).to(DType::kF32);
    }
  }
  Tensor video_rows = patchify_video(video_noise);
  Tensor audio_rows = audio_noise.contiguous().clone();

  // ---- denoise (§3.2) ----
  {
    dit::DitOptions dopt;
    dopt.device = options.device;
    dopt.precision = dit::DitPrecision::kF32;
    dit::DitModel model = [&] {
      auto s = rc.stage("load dit");
      return dit::DitModel::load(repo.component("transformer").folder, dopt);
    }();
    auto d = rc.stage("denoise");
    const dit::DitTextContext text = model.encode_text(result.prompt_embeds);
    const dit::DitLayout dl =
        model.make_layout(layout.position_ids, layout.token_tags, layout.video_indices,
                          layout.audio_indices, layout.text_indices);
    for (int64_t i = 0; i < sched.num_steps(); ++i) {
      auto st = rc.stage("step " + std::to_string(i));
      const float vt = sched.video.timesteps()[static_cast<size_t>(i)];
      const float at = sched.audio.timesteps()[static_cast<size_t>(i)];
      const RowTimesteps plan = plan_step_timesteps(layout, vt, at);
      const dit::DitOutputs out =
          model.forward(text, dl, video_rows, audio_rows, plan.unique, plan.indices, nullptr, i);
      const Tensor v = out.video.to(Device::cpu()).to(DType::kF32);
      const Tensor a = out.audio.to(Device::cpu()).to(DType::kF32);
      // T2VA has no condition rows, so every row is generated and written.
      video_rows = sched.video.step(i, v, video_rows);
      audio_rows = sched.audio.step(i, a, audio_rows);
      if (options.on_step) options.on_step(i, video_rows, audio_rows, v);
    }
  }
  result.latents = unpatchify_video(video_rows, kLatentChannels, grid);
  result.audio_latents = unpack_audio_rows(audio_rows, geo.audio_latents);

  // ---- decoders (§2.6-2.8, §3.4; fact 9) ----
  {
    video_vae::VideoVaeOptions vopt;
    vopt.device = options.device;
    vopt.load_encoder = false;
    video_vae::VideoVae vae = [&] {
      auto s = rc.stage("load video vae");
      return video_vae::VideoVae::load(repo.component("vae").folder, vopt);
    }();
    auto s = rc.stage("video decode");
    const Tensor decoded = vae.decode(vae.denormalize_latents(result.latents)).to(Device::cpu());
    const Tensor pixels = video_vae::denormalize_pixels(decoded);  // [1, 3, F, H, W]
    result.frames_float = pixels.permute({0, 2, 3, 4, 1}).select(0, 0).contiguous();
    result.frames = video_vae::frames_to_uint8(pixels).select(0, 0).contiguous();
  }
  {
    audio_vae::AudioVaeOptions aopt;
    aopt.device = options.device;
    aopt.load_encoder = false;
    audio_vae::AudioVae avae = [&] {
      auto s = rc.stage("load audio vae");
      return audio_vae::AudioVae::load(repo.component("audio_vae").folder, aopt);
    }();
    auto s = rc.stage("audio decode");
    const Tensor wave = avae.decode_normalized(result.audio_latents);  // [2, 1, S]
    result.audio = wave.reshape({wave.size(0), wave.size(-1)}).contiguous();
  }
  return result;
}

}  // namespace h3::pipeline
