#include "generate_flags.h"

#include <exception>
#include <filesystem>
#include <utility>

#include "core/device.h"
#include "core/status.h"
#include "io/repo.h"
#include "media/image_io.h"
#include "media/video_io.h"
#include "media/wav_io.h"
#include "models/h3_dit/dit_model.h"
#include "ops/fp8.h"
#include "ops/ops.h"
#include "ops/vsa.h"

namespace h3::cli {

namespace {

using h3::ErrorCode;
namespace fs = std::filesystem;
namespace pl = h3::pipeline;

int64_t parse_int(const std::string& flag, const std::string& s, int64_t min_value) {
  H3_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos,
           ErrorCode::kInvalidArgument, flag, " expects a non-negative integer, got '", s, "'");
  int64_t v = 0;
  try {
    v = static_cast<int64_t>(std::stoll(s));
  } catch (const std::exception&) {
    h3::fail(ErrorCode::kInvalidArgument, flag, " value '", s, "' is out of range");
  }
  H3_CHECK(v >= min_value, ErrorCode::kInvalidArgument, flag, " must be at least ", min_value,
           ", got ", v);
  return v;
}

uint64_t parse_u64(const std::string& flag, const std::string& s) {
  H3_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos,
           ErrorCode::kInvalidArgument, flag, " expects a non-negative integer, got '", s, "'");
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    h3::fail(ErrorCode::kInvalidArgument, flag, " value '", s, "' is out of range");
  }
}

double parse_fraction(const std::string& flag, const std::string& s) {
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  H3_CHECK(used == s.size() && !s.empty() && v >= 0.0 && v < 1.0, ErrorCode::kInvalidArgument, flag,
           " expects a number in [0, 1), got '", s, "'");
  return v;
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& s) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string part =
        s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(parse_int(flag, part, 0));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

h3::media::RgbImage load_image(const std::string& flag, const std::string& path) {
  H3_CHECK(fs::is_regular_file(path), ErrorCode::kNotFound, flag, " file '", path,
           "' does not exist");
  return h3::media::read_image(path);
}

pl::Reference load_reference(const std::string& spec) {
  const size_t colon = spec.find(':');
  H3_CHECK(colon != std::string::npos && colon + 1 < spec.size(), ErrorCode::kInvalidArgument,
           "--ref expects KIND:FILE with KIND image, video or audio, got '", spec, "'");
  const std::string kind = spec.substr(0, colon);
  const std::string path = spec.substr(colon + 1);
  if (kind == "image") return pl::Reference::from_image(load_image("--ref image:", path));
  H3_CHECK(fs::is_regular_file(path), ErrorCode::kNotFound, "--ref ", kind, ": file '", path,
           "' does not exist");
  if (kind == "audio") {
    const h3::media::Waveform w = h3::media::read_wav(path);
    return pl::Reference::from_audio(pl::AudioClip{w.samples, w.sample_rate});
  }
  if (kind == "video") {
    h3::media::DecodedVideo d = h3::media::read_video(path);
    pl::VideoClip v;
    v.frames = std::move(d.frames);
    v.fps = d.fps;
    if (d.audio.defined()) v.soundtrack = pl::AudioClip{d.audio, d.sample_rate};
    return pl::Reference::from_video(std::move(v));
  }
  h3::fail(ErrorCode::kInvalidArgument, "--ref kind '", kind,
           "' is unknown (expected image, video or audio)");
}

}  // namespace

const char* generate_flags_help() {
  return "  --model DIR              MiniMax-H3 repository folder\n"
         "  --prompt TEXT            the prompt\n"
         "  --workflow NAME          t2va, fl2va or ref2va (default: inferred from the inputs)\n"
         "  --image FILE             fl2va first keyframe (PNG/JPEG/BMP), stretched onto the "
         "canvas\n"
         "  --last-image FILE        fl2va last keyframe; cover-cropped after a first one\n"
         "  --ref KIND:FILE          ref2va reference, repeatable, in order: image:FILE "
         "(PNG/JPEG),\n"
         "                           video:FILE (any FFmpeg-readable video; its first audio "
         "stream\n"
         "                           is the soundtrack), audio:FILE (WAV); at most 9 images, 3\n"
         "                           videos, 3 audios, 12 in all, not audio only\n"
         "  --num-frames N           frames, snapped up to 17n+5 (default 124 = 5.2 s; fl2va 192)\n"
         "  --height H --width W     canvas, multiples of 32, given together (default: 16:9, or "
         "the\n"
         "                           first keyframe's aspect in fl2va)\n"
         "  --preset P               dense (50 points, dense attention) or fasth3 (5 points = 4\n"
         "                           forwards, VSA 0.9, tile 64); default: what the checkpoint\n"
         "                           declares (FastH3 gates or fastvideo_inference.json), else "
         "dense\n"
         "  --steps N                sigma-grid points, N-1 model calls (default: the preset's)\n"
         "  --seed S                 generator seed (default 0)\n"
         "  --out FILE.mp4           output file (default h3_<workflow>.mp4)\n"
         "  --repeat N               N generations in this process with seeds S..S+N-1; with N > "
         "1\n"
         "                           every output name gets the seed: FILE-seed<S>.mp4 (also the\n"
         "                           receipt and latents files)\n"
         "  --device D               cpu or cuda[:N] (default cpu)\n"
         "  --attention A            dense or vsa (default: the preset's; vsa when a --vsa-* flag\n"
         "                           is given)\n"
         "  --dit-dtype D            bf16 (default) or fp8: the DiT blocks' projections as E4M3\n"
         "                           weights (per-channel scales, quantized at load) with "
         "per-token\n"
         "                           activation scales; opt-in, quality only judged on released "
         "weights\n"
         "  --fp8-scaling S          with --dit-dtype fp8: block (default; 128 x 128 weight "
         "blocks,\n"
         "                           activations per token and 128 columns) or channel (per "
         "output\n"
         "                           channel, activations per token)\n"
         "  --text-encoder-dtype D   bf16 (default) or fp8: the conditioner's decoder projections\n"
         "                           the same way (its embeddings and vision tower unchanged)\n"
         "  --dit-rounding R         eager (every rounding of the eager reference) or fused "
         "(single-\n"
         "                           rounding kernels, the reference's optional fusions); default\n"
         "                           fused on CUDA, eager on the CPU\n"
         "  --vae-dtype D            f16 (default: the reference's fp16 autocast) or fp8: the "
         "video VAE\n"
         "                           decoder blocks' GEMMs in E4M3 (per-channel weight, per-token\n"
         "                           activation scales); opt-in, h3 bench vae --vae-dtype fp8 "
         "reports\n"
         "                           its PSNR against f16\n"
         "  --vae-attention K        the video VAE decoder's attention kernel: auto (default), "
         "hopper\n"
         "                           (wgmma, compute capability 9.0), mma (mma.sync) or generic\n"
         "  --vae-tile-batch N       spatial tiles of a window the video VAE decodes in one "
         "forward\n"
         "                           (default 0: automatic on CUDA, 1 on the CPU); fewer use less\n"
         "                           memory (README: speed and memory at 1, 4 and 14)\n"
         "  --vsa-tile-size 64|256   VSA tile edge (default 64)\n"
         "  --vsa-sparsity S         VSA sparsity in [0, 1) (default: the preset's; 0.9 with "
         "gates,\n"
         "                           else 0)\n"
         "  --vsa-mode M             exempt or compete (default exempt)\n"
         "  --vsa-dense-layers L     comma-separated block indices run dense\n"
         "  --vsa-dense-first-steps N  the first N steps run dense\n"
         "  --sequential-load        encode first, release the conditioner, then load the "
         "DiT/VAEs\n"
         "  --no-sequential-load     keep everything loaded (default: auto, from the memory plan)\n"
         "  --cpu-offload            keep DiT weights in host memory, streamed per block\n"
         "  --receipt FILE.json      write per-stage timings as JSON\n"
         "  --save-latents FILE      write the final latents (video, audio) as safetensors\n"
         "  --progress               progress on stderr even when it is not a terminal\n"
         "  --no-stream              decode the whole video, then encode the MP4 (default: encode\n"
         "                           each window's frames while the next one decodes; same bytes)\n"
         "  --allow-any-duration     skip the 5-15 s duration check (small test runs)\n"
         "  --lora FILE[:SCALE]      LoRA adapter for the transformer (repeatable, scale default "
         "1):\n"
         "                           diffusers/PEFT, kohya, musubi, ai-toolkit/ComfyUI (original\n"
         "                           names), DiffSynth, and .diff/.set_weight payloads; one that "
         "sets\n"
         "                           the FastH3 gates turns on the fasth3 preset\n"
         "  --lora-mode M            fused (folded into the weights at load; default) or runtime\n"
         "                           (an extra low-rank GEMM pair per adapted layer)\n"
         "  --lora-allow-unmatched   skip (and list) adapter tensors that match no module instead "
         "of\n"
         "                           refusing the file\n";
}

std::string with_seed(const std::string& path, uint64_t seed, bool tag) {
  if (!tag || path.empty()) return path;
  const fs::path p(path);
  const std::string stem = p.stem().string() + "-seed" + std::to_string(seed);
  return (p.parent_path() / (stem + p.extension().string())).string();
}

void check_out_folder(const std::string& flag, const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  H3_CHECK(dir.empty() || fs::is_directory(dir), ErrorCode::kNotFound, flag, " folder '",
           dir.string(), "' does not exist");
}

void parse_generate_flags(const std::vector<std::string>& args, GenerateFlags& f,
                          const std::string& help_hint, ExtraFlag extra, void* ctx) {
  pl::GenerateRequest& req = f.request;
  pl::EngineOptions& eo = f.engine;
  bool vsa_flag = false;
  bool scaling_flag = false;  // --fp8-scaling given: it needs --dit-dtype fp8
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--allow-any-duration") {
      req.allow_any_duration = true;
      continue;
    }
    if (a == "--sequential-load" || a == "--no-sequential-load") {
      eo.sequential = a == "--sequential-load" ? pl::SequentialLoad::kOn : pl::SequentialLoad::kOff;
      continue;
    }
    if (a == "--cpu-offload") {
      eo.cpu_offload = true;
      continue;
    }
    if (a == "--lora-allow-unmatched") {
      f.lora_allow_unmatched = true;
      continue;
    }
    if (a == "--no-stream") {
      f.stream = false;
      continue;
    }
    if (a == "--progress") {
      f.force_progress = true;
      continue;
    }
    H3_CHECK(a.rfind("--", 0) == 0, ErrorCode::kInvalidArgument, "unexpected argument '", a,
             "' (see ", help_hint, ")");
    if (extra) {
      // The caller's own flags: first ask how many values the flag takes.
      const int n = extra(a, nullptr, ctx);
      if (n == 0) continue;
      if (n == 1) {
        H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a, " needs a value");
        extra(a, &args[++i], ctx);
        continue;
      }
    }
    H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a, " needs a value");
    const std::string& v = args[++i];
    if (a == "--model") {
      f.model_dir = v;
    } else if (a == "--prompt") {
      req.prompt = v;
      f.have_prompt = true;
    } else if (a == "--workflow") {
      req.workflow = v;
    } else if (a == "--image") {
      f.first_image_path = v;
    } else if (a == "--last-image") {
      f.last_image_path = v;
    } else if (a == "--ref") {
      f.ref_specs.push_back(v);
    } else if (a == "--num-frames") {
      req.num_frames = parse_int(a, v, 1);
      f.have_frames = true;
    } else if (a == "--height") {
      req.height = parse_int(a, v, 1);
    } else if (a == "--width") {
      req.width = parse_int(a, v, 1);
    } else if (a == "--steps") {
      f.settings.steps = parse_int(a, v, 2);
    } else if (a == "--preset") {
      H3_CHECK(v == "dense" || v == "fasth3", ErrorCode::kInvalidArgument,
               "--preset must be dense or fasth3, got '", v, "'");
      f.settings.preset = v;
    } else if (a == "--seed") {
      req.seed = parse_u64(a, v);
    } else if (a == "--out") {
      f.out = v;
    } else if (a == "--repeat") {
      f.repeat = parse_int(a, v, 1);
    } else if (a == "--device") {
      f.device_text = v;
    } else if (a == "--dit-dtype") {
      H3_CHECK(v == "bf16" || v == "fp8", ErrorCode::kInvalidArgument,
               "--dit-dtype must be bf16 or fp8, got '", v, "'");
      eo.dit_fp8 = v == "fp8";
    } else if (a == "--fp8-scaling") {
      eo.dit_fp8_scaling = h3::ops::parse_fp8_weight_scaling(v);
      scaling_flag = true;
    } else if (a == "--text-encoder-dtype") {
      H3_CHECK(v == "bf16" || v == "fp8", ErrorCode::kInvalidArgument,
               "--text-encoder-dtype must be bf16 or fp8, got '", v, "'");
      eo.text_encoder_fp8 = v == "fp8";
    } else if (a == "--dit-rounding") {
      H3_CHECK(v == "eager" || v == "fused", ErrorCode::kInvalidArgument,
               "--dit-rounding must be eager or fused, got '", v, "'");
      eo.dit_rounding = v == "fused" ? h3::dit::DitRounding::kFused : h3::dit::DitRounding::kEager;
    } else if (a == "--vae-dtype") {
      H3_CHECK(v == "f16" || v == "fp8", ErrorCode::kInvalidArgument, "--vae-dtype must be f16 or fp8, got '", v,
               "'");
      eo.vae_fp8 = v == "fp8";
    } else if (a == "--vae-attention") {
      eo.vae_attention = h3::ops::parse_attention_kernel(v, "--vae-attention");
    } else if (a == "--vae-tile-batch") {
      eo.vae_tile_batch = parse_int(a, v, 0);
    } else if (a == "--attention") {
      f.settings.attention = h3::dit::parse_attention_backend(v);
    } else if (a == "--vsa-tile-size") {
      const int64_t t = parse_int(a, v, 1);
      H3_CHECK(t == 64 || t == 256, ErrorCode::kInvalidArgument,
               "--vsa-tile-size must be 64 or 256, got ", t);
      f.settings.vsa_tile_size = static_cast<int>(t);
      vsa_flag = true;
    } else if (a == "--vsa-sparsity") {
      f.settings.vsa_sparsity = parse_fraction(a, v);
      vsa_flag = true;
    } else if (a == "--vsa-mode") {
      eo.vsa.mode = h3::ops::parse_vsa_mode(v);
      vsa_flag = true;
    } else if (a == "--vsa-dense-layers") {
      eo.vsa.dense_layers = parse_int_list(a, v);
      vsa_flag = true;
    } else if (a == "--vsa-dense-first-steps") {
      eo.vsa.dense_first_steps = parse_int(a, v, 0);
      vsa_flag = true;
    } else if (a == "--lora") {
      f.lora_specs.push_back(h3::dit::parse_lora_spec(v));
    } else if (a == "--lora-mode") {
      eo.lora_mode = h3::dit::parse_lora_mode(v);
    } else if (a == "--receipt") {
      f.receipt_path = v;
    } else if (a == "--save-latents") {
      f.latents_path = v;
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", a, "' (see ", help_hint, ")");
    }
  }
  // A --vsa-* flag without --attention asks for VSA.
  if (vsa_flag && !f.settings.attention) f.settings.attention = h3::dit::DitAttentionBackend::kVsa;
  H3_CHECK(eo.dit_fp8 || !scaling_flag, ErrorCode::kInvalidArgument,
           "--fp8-scaling says how --dit-dtype fp8 quantizes the DiT's weights; without it nothing "
           "is quantized (add --dit-dtype fp8)");
}

pl::ResolvedSettings finish_generate_flags(GenerateFlags& f) {
  pl::GenerateRequest& req = f.request;
  H3_CHECK(!f.model_dir.empty(), ErrorCode::kInvalidArgument, "missing --model DIR");
  H3_CHECK(fs::is_directory(f.model_dir), ErrorCode::kNotFound, "--model folder '", f.model_dir,
           "' does not exist or is not a folder");
  f.engine.device = h3::parse_device(f.device_text);
  // Media first: unreadable files fail before any weight is touched.
  if (!f.first_image_path.empty()) req.first_image = load_image("--image", f.first_image_path);
  if (!f.last_image_path.empty()) req.last_image = load_image("--last-image", f.last_image_path);
  for (const std::string& spec : f.ref_specs) req.references.push_back(load_reference(spec));
  req.workflow = pl::resolve_workflow(req);
  // The preset the checkpoint declares, refined by the flags (headers and small files only).
  const io::Repository repo = io::Repository::open(f.model_dir);
  // The workflow's duration (FL2VA's preset is 8 s, §4.2), or the checkpoint's geometry.
  pl::apply_request_defaults(repo, f.have_frames, req);
  // Adapters are read and checked now, before any weight: a bad file fails in seconds.
  f.engine.loras = pl::read_loras(repo, f.lora_specs, f.lora_allow_unmatched);
  f.settings.adapter_gates = pl::lora_gates_source(f.engine.loras);
  const pl::ResolvedSettings s = pl::resolve_settings(repo, req.workflow, f.settings);
  req.num_inference_steps = s.steps;
  f.engine.attention = s.attention;
  f.engine.vsa.sparsity = s.vsa_sparsity;
  f.engine.vsa.tile_size = s.vsa_tile_size;
  f.engine.plan_request.workflow = req.workflow;
  f.engine.plan_request.num_frames = req.num_frames;
  if (req.height) f.engine.plan_request.height = *req.height;
  if (req.width) f.engine.plan_request.width = *req.width;
  return s;
}

}  // namespace h3::cli
