// h3 generate --model DIR --prompt TEXT [...]: one T2VA generation written as an MP4 (H.264 + AAC)
// (h3_components_spec.md §4.1-4.2, §4.8). Requests are checked before any weight is loaded, and a
// failed run leaves no output file (the MP4 writer renames a finished temporary file).
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "core/device.h"
#include "core/receipt.h"
#include "core/status.h"
#include "io/mp4_writer.h"
#include "pipeline/generate.h"

namespace {

using h3::ErrorCode;

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

void print_help() {
  std::printf(
      "usage: h3 generate --model DIR --prompt TEXT [options]\n\n"
      "Generates a video with its soundtrack from a text prompt (t2va) and writes an MP4\n"
      "(H.264 video at 24 fps, AAC stereo audio at 32 kHz).\n\n"
      "  --model DIR            MiniMax-H3 repository folder\n"
      "  --prompt TEXT          the prompt\n"
      "  --workflow NAME        t2va (default); fl2va and ref2va are not implemented yet\n"
      "  --num-frames N         frames, snapped up to 17n+5 (default 124 = 5.2 s)\n"
      "  --height H --width W   canvas, multiples of 32, given together (default: 16:9)\n"
      "  --steps N              sigma-grid points, N-1 model calls (default 50)\n"
      "  --seed S               generator seed (default 0)\n"
      "  --out FILE.mp4         output file (default h3_t2va.mp4)\n"
      "  --device cpu           compute device (default cpu)\n"
      "  --receipt FILE.json    write per-stage timings as JSON\n"
      "  --allow-any-duration   skip the 5-15 s duration check (small test runs)\n");
}

int run_generate(const std::vector<std::string>& args) {
  std::string model_dir;
  std::string out = "h3_t2va.mp4";
  std::string receipt_path;
  std::string device_text = "cpu";
  h3::pipeline::GenerateRequest req;
  bool have_prompt = false;
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
    } else if (a == "--num-frames") {
      req.num_frames = parse_int(a, v, 1);
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
    } else if (a == "--device") {
      device_text = v;
    } else if (a == "--receipt") {
      receipt_path = v;
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", a, "' (see h3 generate --help)");
    }
  }
  H3_CHECK(req.workflow == "t2va", ErrorCode::kUnsupported, "--workflow ", req.workflow,
           " is not implemented yet (only t2va is)");
  H3_CHECK(!model_dir.empty(), ErrorCode::kInvalidArgument,
           "missing --model DIR (see h3 generate --help)");
  H3_CHECK(have_prompt, ErrorCode::kInvalidArgument,
           "missing --prompt TEXT (see h3 generate --help)");
  H3_CHECK(std::filesystem::is_directory(model_dir), ErrorCode::kNotFound, "--model folder '",
           model_dir, "' does not exist or is not a folder");
  H3_CHECK(!out.empty(), ErrorCode::kInvalidArgument, "--out needs a file name");
  const std::filesystem::path out_dir = std::filesystem::path(out).parent_path();
  H3_CHECK(out_dir.empty() || std::filesystem::is_directory(out_dir), ErrorCode::kNotFound,
           "--out folder '", out_dir.string(), "' does not exist");
  H3_CHECK(h3::io::mp4_writer_available(), ErrorCode::kUnsupported,
           "this build has no MP4 writer (built without FFmpeg)");
  h3::pipeline::GenerateOptions opt;
  opt.device = h3::parse_device(device_text);

  h3::Receipt receipt;
  const h3::pipeline::GenerateResult r = h3::pipeline::generate_t2va(model_dir, req, opt, &receipt);
  if (!r.frames_note.empty()) std::fprintf(stderr, "note: %s\n", r.frames_note.c_str());
  h3::io::Mp4Result m;
  {
    auto s = receipt.stage("write mp4");
    m = h3::io::write_mp4(out, r.frames, r.audio);
  }
  std::fputs(receipt.table().c_str(), stderr);
  if (!receipt_path.empty()) receipt.write_json(receipt_path);
  std::printf("wrote %s: %lldx%lld, %lld frames, %lld audio samples, %llu bytes (%s + %s)\n",
              out.c_str(), static_cast<long long>(r.geometry.width),
              static_cast<long long>(r.geometry.height), static_cast<long long>(m.frames),
              static_cast<long long>(m.audio_samples), static_cast<unsigned long long>(m.bytes),
              m.video_encoder.c_str(), m.audio_encoder.c_str());
  return 0;
}

}  // namespace

H3_COMMAND("generate", "generate a video with audio from a text prompt (t2va) into an MP4",
           run_generate);
