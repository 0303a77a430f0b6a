// h3 generate: T2VA, FL2VA or Ref2VA generations written as MP4 files (H.264 + AAC)
// (h3_components_spec.md §4.1-4.8, §5). One Engine serves every generation of the process
// (--repeat), loading and releasing components per its memory plan. Requests and media are
// checked before any weight is loaded, and a failed run leaves no output file (the MP4 and
// safetensors writers rename a finished temporary file).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "generate_flags.h"
#include "core/device.h"
#include "core/receipt.h"
#include "core/status.h"
#include "io/mp4_stream.h"
#include "io/mp4_writer.h"
#include "io/safetensors.h"
#include "media/image_io.h"
#include "media/video_io.h"
#include "media/wav_io.h"
#include "models/h3_dit/dit_model.h"
#include "ops/vsa.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "pipeline/latent_preview.h"
#include "pipeline/memory_plan.h"

namespace {

using h3::ErrorCode;
namespace fs = std::filesystem;
namespace pl = h3::pipeline;

void print_help() {
  std::printf(
      "usage: h3 generate --model DIR --prompt TEXT [options]\n\n"
      "Generates a video with its soundtrack and writes an MP4 (H.264 video at 24 fps, AAC\n"
      "stereo audio at 32 kHz). The workflow follows from the inputs: none -> t2va (text to\n"
      "video+audio), --image/--last-image -> fl2va (keyframes), --ref -> ref2va (references).\n\n"
      "%s"
      "  --preview                after every step, the predicted first latent frame as a small\n"
      "                           truecolor picture on stderr (a terminal only; a fixed channel\n"
      "                           map, not the VAE: shapes, not the video's colours)\n",
      h3::cli::generate_flags_help());
}

// --preview: the first latent frame of the step's prediction drawn with half blocks (each cell
// shows two pixels: the upper as foreground, the lower as background), redrawn in place.
class TerminalPreview {
 public:
  void draw(const h3::Tensor& latents) {
    const pl::RgbBytes small = pl::latent_preview(latents, 0, 1);
    const int64_t cols = std::clamp<int64_t>(small.width * 2, 32, 80);
    int64_t rows = std::max<int64_t>(2, cols * small.height / std::max<int64_t>(1, small.width) / 2 * 2);
    rows = std::min<int64_t>(rows, 48);
    const pl::RgbBytes img = pl::resize_nearest(small, cols, rows);
    std::string out = "\r\x1b[2K";
    if (lines_ > 0) out += "\x1b[" + std::to_string(lines_) + "A";
    for (int64_t y = 0; y + 1 < rows; y += 2) {
      for (int64_t x = 0; x < cols; ++x) {
        const uint8_t* a = &img.data[static_cast<size_t>((y * cols + x) * 3)];
        const uint8_t* b = &img.data[static_cast<size_t>(((y + 1) * cols + x) * 3)];
        char cell[64];
        std::snprintf(cell, sizeof(cell), "\x1b[38;2;%d;%d;%dm\x1b[48;2;%d;%d;%dm\xe2\x96\x80", a[0],
                      a[1], a[2], b[0], b[1], b[2]);
        out += cell;
      }
      out += "\x1b[0m\n";
    }
    lines_ = rows / 2;
    std::fputs(out.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  int64_t lines_ = 0;
};

int preview_flag(const std::string& flag, const std::string*, void* ctx) {
  if (flag != "--preview") return -1;
  *static_cast<bool*>(ctx) = true;
  return 0;
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
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
  }
  h3::cli::GenerateFlags f;
  bool want_preview = false;
  h3::cli::parse_generate_flags(args, f, "h3 generate --help", preview_flag, &want_preview);
  H3_CHECK(!f.model_dir.empty(), ErrorCode::kInvalidArgument,
           "missing --model DIR (see h3 generate --help)");
  H3_CHECK(f.have_prompt, ErrorCode::kInvalidArgument,
           "missing --prompt TEXT (see h3 generate --help)");
  const pl::ResolvedSettings settings = h3::cli::finish_generate_flags(f);
  pl::GenerateRequest& req = f.request;
  std::string out = f.out;
  const std::string& receipt_path = f.receipt_path;
  const std::string& latents_path = f.latents_path;
  const int64_t repeat = f.repeat;
  const bool stream = f.stream;
  if (out.empty()) out = "h3_" + req.workflow + ".mp4";
  h3::cli::check_out_folder("--out", out);
  if (!receipt_path.empty()) h3::cli::check_out_folder("--receipt", receipt_path);
  if (!latents_path.empty()) h3::cli::check_out_folder("--save-latents", latents_path);
  H3_CHECK(h3::io::mp4_writer_available(), ErrorCode::kUnsupported,
           "this build has no MP4 writer (built without FFmpeg)");

  pl::Engine engine(f.model_dir, f.engine);
  const bool force_progress = f.force_progress;
  Progress progress(force_progress || isatty(STDERR_FILENO) == 1);
  pl::GenerateOptions opt;
  opt.on_progress = [&](const std::string& stage, int64_t step, int64_t steps) {
    progress.update(stage, step, steps);
  };
  TerminalPreview preview;
  if (want_preview) {
    if (isatty(STDERR_FILENO) == 1) {
      opt.on_preview = [&](int64_t, int64_t, const h3::Tensor& latents) { preview.draw(latents); };
    } else {
      std::fprintf(stderr, "note: --preview draws on a terminal; stderr is not one, so it is off\n");
    }
  }
  const uint64_t first_seed = req.seed;
  const bool tag = repeat > 1;
  for (int64_t k = 0; k < repeat; ++k) {
    req.seed = first_seed + static_cast<uint64_t>(k);
    const std::string out_k = h3::cli::with_seed(out, req.seed, tag);
    h3::Receipt receipt;
    receipt.set("preset", settings.preset);
    receipt.set("settings", settings.describe());
    // The MP4 is encoded on its own thread while the video decoder produces later windows.
    h3::io::Mp4StreamWriter muxer(out_k);
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
      h3::io::write_safetensors(h3::cli::with_seed(latents_path, req.seed, tag),
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
    if (!receipt_path.empty()) receipt.write_json(h3::cli::with_seed(receipt_path, req.seed, tag));
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
