// h3 bench mux: the MP4 stage alone (H.264 + AAC, the engine's own writer and settings) on a
// synthetic clip of the released size, for the machines where the whole path cannot mux (the GPU
// machine has no FFmpeg libraries): its figure stands beside `h3 bench e2e`'s there.
//
// The clip is a moving colour gradient with a little per-pixel noise and a 440 Hz tone: smooth
// like a generated video (x264's cost depends on the content; pure noise would be a worst case).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "command.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/mp4_writer.h"

namespace {

using h3::ErrorCode;

int64_t int_flag(const std::string& flag, const std::string& v) {
  H3_CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos &&
               v.size() < 10 && std::stoll(v) > 0,
           ErrorCode::kInvalidArgument, flag, " expects a positive integer, got '", v, "'");
  return std::stoll(v);
}

int run_bench_mux(const std::vector<std::string>& args) {
  int64_t frames = 124, height = 768, width = 1344, repeat = 2;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: h3 bench mux [--frames F] [--height H] [--width W] [--repeat N]\n\n"
          "Times the MP4 writer (H.264 + AAC) on a synthetic clip, default 124 frames at\n"
          "1344x768 with 32 kHz stereo audio: seconds per clip and frames per second.\n");
      return 0;
    }
    H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a, " needs a value");
    const std::string& v = args[++i];
    if (a == "--frames") frames = int_flag(a, v);
    else if (a == "--height") height = int_flag(a, v);
    else if (a == "--width") width = int_flag(a, v);
    else if (a == "--repeat") repeat = int_flag(a, v);
    else h3::fail(ErrorCode::kInvalidArgument, "unknown option '", a, "' (see h3 bench mux --help)");
  }
  H3_CHECK(h3::io::mp4_writer_available(), ErrorCode::kUnsupported,
           "this build has no MP4 writer (built without FFmpeg)");
  h3::Tensor clip = h3::Tensor::empty({frames, height, width, 3}, h3::DType::kU8);
  uint8_t* p = clip.data<uint8_t>();
  uint32_t noise = 12345;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t y = 0; y < height; ++y)
      for (int64_t x = 0; x < width; ++x)
        for (int64_t c = 0; c < 3; ++c) {
          noise = noise * 1664525u + 1013904223u;
          const int64_t v = (x * (c + 1) + y * (3 - c) + f * 4) / 6 + ((noise >> 28) & 7);
          *p++ = static_cast<uint8_t>(v & 255);
        }
  const int64_t samples = frames * 32000 / 24;
  std::vector<float> wave(static_cast<size_t>(2 * samples));
  for (int64_t i = 0; i < samples; ++i) {
    const float s = 0.3f * std::sin(2.0f * 3.14159265f * 440.0f * static_cast<float>(i) / 32000.0f);
    wave[static_cast<size_t>(i)] = s;
    wave[static_cast<size_t>(samples + i)] = s;
  }
  const h3::Tensor audio = h3::Tensor::from_f32(wave, {2, samples});
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("h3-bench-mux-" + std::to_string(::getpid()) + ".mp4")).string();
  std::printf("mux %lldx%lld, %lld frames, 32 kHz stereo\n", static_cast<long long>(width),
              static_cast<long long>(height), static_cast<long long>(frames));
  for (int64_t r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const h3::io::Mp4Result m = h3::io::write_mp4(path, clip, audio);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  run %lld: %.2f s (%.1f frames/s), %llu bytes, %s + %s\n",
                static_cast<long long>(r), s, static_cast<double>(frames) / s,
                static_cast<unsigned long long>(m.bytes), m.video_encoder.c_str(),
                m.audio_encoder.c_str());
    std::filesystem::remove(path);
  }
  return 0;
}

}  // namespace

H3_COMMAND("bench mux", "time the MP4 writer (H.264 + AAC) on a synthetic full-size clip",
           run_bench_mux);
