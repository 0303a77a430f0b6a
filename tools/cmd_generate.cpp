// h3 generate: T2VA, FL2VA or Ref2VA generations written as MP4 files (H.264 + AAC)
// (h3_components_spec.md §4.1-4.8, §5). One Engine serves every generation of the process
// (--repeat), loading and releasing components per its memory plan. Requests and media are
// checked before any weight is loaded, and a failed run leaves no output file (the MP4 and
// safetensors writers rename a finished temporary file).
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "command.h"
#include "core/device.h"
#include "core/receipt.h"
#include "core/status.h"
#include "io/mp4_writer.h"
#include "io/safetensors.h"
#include "media/image_io.h"
#include "media/video_io.h"
#include "media/wav_io.h"
#include "models/h3_dit/dit_model.h"
#include "ops/vsa.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "pipeline/memory_plan.h"

namespace {

// Encodes frames into an MP4 on a worker thread, in the order they are pushed. An error on the
// worker is rethrown by the next push() or by finish(); a muxer destroyed before finish() drops
// its temporary file (io::Mp4Writer), so a failed run leaves no output.
class MuxerThread {
 public:
  explicit MuxerThread(std::string path) : path_(std::move(path)) {}
  ~MuxerThread() { stop(); }
  MuxerThread(const MuxerThread&) = delete;
  MuxerThread& operator=(const MuxerThread&) = delete;

  void start(int64_t num_frames, int64_t height, int64_t width, const h3::Tensor& audio) {
    writer_.emplace(path_, num_frames, height, width, audio);
    worker_ = std::thread([this] { run(); });
  }
  void push(const h3::Tensor& frames) {
    std::unique_lock<std::mutex> lock(mu_);
    rethrow_locked();
    // At most two runs of frames wait: the decoder never gets far ahead of the encoder's memory.
    cv_.wait(lock, [&] { return queue_.size() < 2 || error_; });
    rethrow_locked();
    queue_.push_back(frames);
    cv_.notify_all();
  }
  h3::io::Mp4Result finish() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
    std::lock_guard<std::mutex> lock(mu_);
    rethrow_locked();
    H3_CHECK(writer_.has_value(), h3::ErrorCode::kInternal, path_, ": no frames were streamed");
    return writer_->finish();
  }

 private:
  void run() {
    while (true) {
      h3::Tensor next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        next = queue_.front();
        queue_.pop_front();
        cv_.notify_all();
      }
      try {
        writer_->add_frames(next);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
    }
  }
  void rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      queue_.clear();
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
  }

  std::string path_;
  std::optional<h3::io::Mp4Writer> writer_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<h3::Tensor> queue_;
  bool done_ = false;
  std::exception_ptr error_;
};

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

void print_help() {
  std::printf(
      "usage: h3 generate --model DIR --prompt TEXT [options]\n\n"
      "Generates a video with its soundtrack and writes an MP4 (H.264 video at 24 fps, AAC\n"
      "stereo audio at 32 kHz). The workflow follows from the inputs: none -> t2va (text to\n"
      "video+audio), --image/--last-image -> fl2va (keyframes), --ref -> ref2va (references).\n\n"
      "  --model DIR              MiniMax-H3 repository folder\n"
      "  --prompt TEXT            the prompt\n"
      "  --workflow NAME          t2va, fl2va or ref2va (default: inferred from the inputs)\n"
      "  --image FILE             fl2va first keyframe (PNG/JPEG/BMP), stretched onto the canvas\n"
      "  --last-image FILE        fl2va last keyframe; cover-cropped after a first one\n"
      "  --ref KIND:FILE          ref2va reference, repeatable, in order: image:FILE (PNG/JPEG),\n"
      "                           video:FILE (any FFmpeg-readable video; its first audio stream\n"
      "                           is the soundtrack), audio:FILE (WAV); at most 9 images, 3\n"
      "                           videos, 3 audios, 12 in all, not audio only\n"
      "  --num-frames N           frames, snapped up to 17n+5 (default 124 = 5.2 s; fl2va 192)\n"
      "  --height H --width W     canvas, multiples of 32, given together (default: 16:9, or the\n"
      "                           first keyframe's aspect in fl2va)\n"
      "  --steps N                sigma-grid points, N-1 model calls (default 50)\n"
      "  --seed S                 generator seed (default 0)\n"
      "  --out FILE.mp4           output file (default h3_<workflow>.mp4)\n"
      "  --repeat N               N generations in this process with seeds S..S+N-1; with N > 1\n"
      "                           every output name gets the seed: FILE-seed<S>.mp4 (also the\n"
      "                           receipt and latents files)\n"
      "  --device D               cpu or cuda[:N] (default cpu)\n"
      "  --attention A            dense or vsa (default dense; vsa when a --vsa-* flag is given)\n"
      "  --vsa-tile-size 64|256   VSA tile edge (default 64)\n"
      "  --vsa-sparsity S         VSA sparsity in [0, 1) (default 0.9 with gates, else 0)\n"
      "  --vsa-mode M             exempt or compete (default exempt)\n"
      "  --vsa-dense-layers L     comma-separated block indices run dense\n"
      "  --vsa-dense-first-steps N  the first N steps run dense\n"
      "  --sequential-load        encode first, release the conditioner, then load the DiT/VAEs\n"
      "  --no-sequential-load     keep everything loaded (default: auto, from the memory plan)\n"
      "  --cpu-offload            keep DiT weights in host memory, streamed per block\n"
      "  --receipt FILE.json      write per-stage timings as JSON\n"
      "  --save-latents FILE      write the final latents (video, audio) as safetensors\n"
      "  --progress               progress on stderr even when it is not a terminal\n"
      "  --no-stream              decode the whole video, then encode the MP4 (default: encode\n"
      "                           each window's frames while the next one decodes; same bytes)\n"
      "  --allow-any-duration     skip the 5-15 s duration check (small test runs)\n");
}

// "name.mp4" -> "name-seed7.mp4" (when several generations share one name).
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

// A one-line progress display on stderr: "[denoise] ###....  3/8".
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  void update(const std::string& stage, int64_t step, int64_t steps) {
    if (!enabled_) return;
    if (steps > 0) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(kWidth * step / steps);
      std::string bar(static_cast<size_t>(filled), '#');
      bar.append(static_cast<size_t>(kWidth - filled), '.');
      std::fprintf(stderr, "\r[%s] %s %lld/%lld", stage.c_str(), bar.c_str(),
                   static_cast<long long>(step), static_cast<long long>(steps));
      if (step == steps) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "[%s]\n", stage.c_str());
    }
    std::fflush(stderr);
  }

 private:
  bool enabled_;
};

int run_generate(const std::vector<std::string>& args) {
  std::string model_dir;
  std::string out;
  std::string receipt_path;
  std::string latents_path;
  std::string device_text = "cpu";
  std::string first_image_path, last_image_path;
  std::vector<std::string> ref_specs;
  pl::GenerateRequest req;
  pl::EngineOptions eo;
  bool have_prompt = false;
  bool have_frames = false;
  bool force_progress = false;
  bool stream = true;
  std::optional<std::string> attention;
  bool vsa_flag = false;
  int64_t repeat = 1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
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
    if (a == "--no-stream") {
      stream = false;
      continue;
    }
    if (a == "--progress") {
      force_progress = true;
      continue;
    }
    H3_CHECK(a.rfind("--", 0) == 0, ErrorCode::kInvalidArgument, "unexpected argument '", a,
             "' (see h3 generate --help)");
    H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a, " needs a value");
    const std::string& v = args[++i];
    if (a == "--model") {
      model_dir = v;
    } else if (a == "--prompt") {
      req.prompt = v;
      have_prompt = true;
    } else if (a == "--workflow") {
      req.workflow = v;
    } else if (a == "--image") {
      first_image_path = v;
    } else if (a == "--last-image") {
      last_image_path = v;
    } else if (a == "--ref") {
      ref_specs.push_back(v);
    } else if (a == "--num-frames") {
      req.num_frames = parse_int(a, v, 1);
      have_frames = true;
    } else if (a == "--height") {
      req.height = parse_int(a, v, 1);
    } else if (a == "--width") {
      req.width = parse_int(a, v, 1);
    } else if (a == "--steps") {
      req.num_inference_steps = parse_int(a, v, 2);
    } else if (a == "--seed") {
      req.seed = parse_u64(a, v);
    } else if (a == "--out") {
      out = v;
    } else if (a == "--repeat") {
      repeat = parse_int(a, v, 1);
    } else if (a == "--device") {
      device_text = v;
    } else if (a == "--attention") {
      attention = v;
    } else if (a == "--vsa-tile-size") {
      const int64_t t = parse_int(a, v, 1);
      H3_CHECK(t == 64 || t == 256, ErrorCode::kInvalidArgument,
               "--vsa-tile-size must be 64 or 256, got ", t);
      eo.vsa.tile_size = static_cast<int>(t);
      vsa_flag = true;
    } else if (a == "--vsa-sparsity") {
      eo.vsa.sparsity = parse_fraction(a, v);
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
    } else if (a == "--receipt") {
      receipt_path = v;
    } else if (a == "--save-latents") {
      latents_path = v;
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", a, "' (see h3 generate --help)");
    }
  }
  H3_CHECK(!model_dir.empty(), ErrorCode::kInvalidArgument,
           "missing --model DIR (see h3 generate --help)");
  H3_CHECK(have_prompt, ErrorCode::kInvalidArgument,
           "missing --prompt TEXT (see h3 generate --help)");
  H3_CHECK(fs::is_directory(model_dir), ErrorCode::kNotFound, "--model folder '", model_dir,
           "' does not exist or is not a folder");
  eo.attention = h3::dit::parse_attention_backend(attention.value_or(vsa_flag ? "vsa" : "dense"));
  eo.device = h3::parse_device(device_text);

  // Media first: unreadable files fail before any weight is touched.
  if (!first_image_path.empty()) req.first_image = load_image("--image", first_image_path);
  if (!last_image_path.empty()) req.last_image = load_image("--last-image", last_image_path);
  for (const std::string& spec : ref_specs) req.references.push_back(load_reference(spec));
  req.workflow = pl::resolve_workflow(req);
  // FL2VA's preset is 8 s (§4.2).
  if (!have_frames && req.workflow == "fl2va") req.num_frames = 192;
  if (out.empty()) out = "h3_" + req.workflow + ".mp4";
  check_out_folder("--out", out);
  if (!receipt_path.empty()) check_out_folder("--receipt", receipt_path);
  if (!latents_path.empty()) check_out_folder("--save-latents", latents_path);
  H3_CHECK(h3::io::mp4_writer_available(), ErrorCode::kUnsupported,
           "this build has no MP4 writer (built without FFmpeg)");

  eo.plan_request.workflow = req.workflow;
  eo.plan_request.num_frames = req.num_frames;
  if (req.height) eo.plan_request.height = *req.height;
  if (req.width) eo.plan_request.width = *req.width;
  pl::Engine engine(model_dir, eo);

  Progress progress(force_progress || isatty(STDERR_FILENO) == 1);
  pl::GenerateOptions opt;
  opt.on_progress = [&](const std::string& stage, int64_t step, int64_t steps) {
    progress.update(stage, step, steps);
  };
  const uint64_t first_seed = req.seed;
  const bool tag = repeat > 1;
  for (int64_t k = 0; k < repeat; ++k) {
    req.seed = first_seed + static_cast<uint64_t>(k);
    const std::string out_k = with_seed(out, req.seed, tag);
    h3::Receipt receipt;
    // The MP4 is encoded on its own thread while the video decoder produces later windows.
    MuxerThread muxer(out_k);
    if (stream) {
      opt.keep_frames = false;
      opt.on_audio = [&](const pl::TargetGeometry& g, const h3::Tensor& audio) {
        muxer.start(g.num_frames, g.height, g.width, audio);
      };
      opt.on_frames = [&](int64_t, const h3::Tensor& frames) { muxer.push(frames); };
    }
    const pl::GenerateResult r = pl::generate(engine, req, opt, &receipt);
    if (k == 0 && !r.frames_note.empty()) std::fprintf(stderr, "note: %s\n", r.frames_note.c_str());
    if (!latents_path.empty()) {
      auto s = receipt.stage("write latents");
      h3::io::write_safetensors(with_seed(latents_path, req.seed, tag),
                                {{"latents", r.latents}, {"audio_latents", r.audio_latents}},
                                {{"workflow", r.workflow}, {"seed", std::to_string(req.seed)}});
    }
    h3::io::Mp4Result m;
    {
      progress.update("write mp4", 0, 0);
      auto s = receipt.stage("write mp4");
      m = stream ? muxer.finish() : h3::io::write_mp4(out_k, r.frames, r.audio);
    }
    std::fputs(receipt.table().c_str(), stderr);
    if (!receipt_path.empty()) receipt.write_json(with_seed(receipt_path, req.seed, tag));
    std::printf(
        "wrote %s: %s %lldx%lld, %lld frames, %lld audio samples, seed %llu, %llu bytes "
        "(%s + %s)\n",
        out_k.c_str(), r.workflow.c_str(), static_cast<long long>(r.geometry.width),
        static_cast<long long>(r.geometry.height), static_cast<long long>(m.frames),
        static_cast<long long>(m.audio_samples), static_cast<unsigned long long>(req.seed),
        static_cast<unsigned long long>(m.bytes), m.video_encoder.c_str(), m.audio_encoder.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

H3_COMMAND("generate",
           "generate a video with audio (t2va, fl2va keyframes, ref2va references) into an MP4",
           run_generate);
