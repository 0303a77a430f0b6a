// `h3 generate` for FL2VA and Ref2VA as a user runs it (the built binary from $H3_BIN on an
// `h3 make-tiny` repository): keyframes and references read from files (PPM images, a WAV, an MP4
// with a soundtrack written by the project's own muxer), the workflow inferred from the inputs;
// bad inputs failing with a message that names the file or flag and leaving no output; and
// --repeat giving the same bytes as a fresh process with the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/mp4_writer.h"
#include "media/video_io.h"
#include "media/wav_io.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;

using test::run_h3;
using test::RunResult;
using test::shell_quote;
using test::TempDir;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

size_t entries(const fs::path& d) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(d), fs::directory_iterator()));
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A binary PPM (P6) test pattern: the image reader takes PNM.
void write_ppm(const fs::path& p, int w, int h, int seed) {
  std::ofstream out(p, std::ios::binary);
  out << "P6\n" << w << " " << h << "\n255\n";
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        out.put(static_cast<char>((x * 31 + y * 13 + c * 80 + seed * 7) & 255));
}

Tensor tone(int64_t channels, int64_t samples, int64_t rate) {
  std::vector<float> v(static_cast<size_t>(channels * samples));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < samples; ++i)
      v[static_cast<size_t>(c * samples + i)] = static_cast<float>(
          0.3 * std::sin(2 * M_PI * 330.0 * static_cast<double>(i) / static_cast<double>(rate)));
  return Tensor::from_f32(v, {channels, samples});
}

// A 16x16 clip of 12 frames at 24 fps with a stereo AAC soundtrack.
void write_clip(const fs::path& p) {
  std::vector<uint8_t> px(12 * 16 * 16 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7 + i / 48) & 255);
  Tensor frames = Tensor::empty({12, 16, 16, 3}, DType::kU8);
  std::copy(px.begin(), px.end(), frames.data<uint8_t>());
  io::write_mp4(p.string(), frames, tone(2, 16000, 32000));
}

struct Fixture {
  TempDir tmp{"h3_cli_wf"};
  fs::path model, out_dir, a_png, b_png, wav, clip;
  Fixture() {
    model = tmp.path() / "model";
    const RunResult r = run_h3("make-tiny " + shell_quote(model.string()));
    EXPECT_EQ(r.status, 0) << r.output;
    out_dir = tmp.path() / "out";
    fs::create_directories(out_dir);
    a_png = tmp.path() / "a.ppm";
    b_png = tmp.path() / "b.ppm";
    write_ppm(a_png, 40, 40, 1);
    write_ppm(b_png, 36, 60, 2);
    wav = tmp.path() / "voice.wav";
    media::write_wav_float(wav.string(), tone(1, 22050, 44100), 44100);
    clip = tmp.path() / "clip.mp4";
    if (io::mp4_writer_available()) write_clip(clip);
  }
  std::string base(const fs::path& out) const {
    return "generate --model " + shell_quote(model.string()) +
           " --prompt 'A lantern sways in the wind.' --height 32 --width 32 --num-frames 22"
           " --steps 2 --seed 3 --allow-any-duration --out " +
           shell_quote(out.string());
  }
};

TEST(CliGenerateWorkflows, Fl2vaAndRef2vaFromFiles) {
  H3_REQUIRE_BIN();
  if (!io::mp4_writer_available()) GTEST_SKIP() << "built without FFmpeg";
  Fixture fx;
  struct Case {
    std::string name, extra, workflow;
  };
  const Case cases[] = {
      {"first", " --progress --image " + shell_quote(fx.a_png.string()), "fl2va"},
      {"first_last",
       " --image " + shell_quote(fx.a_png.string()) + " --last-image " +
           shell_quote(fx.b_png.string()),
       "fl2va"},
      {"last", " --last-image " + shell_quote(fx.b_png.string()), "fl2va"},
      {"refs",
       " --ref video:" + shell_quote(fx.clip.string()) + " --ref audio:" +
           shell_quote(fx.wav.string()) + " --ref image:" + shell_quote(fx.b_png.string()),
       "ref2va"},
  };
  for (const Case& c : cases) {
    const fs::path out = fx.out_dir / (c.name + ".mp4");
    const RunResult r = run_h3(fx.base(out) + c.extra);
    std::printf("[%s] exit %d: %s", c.name.c_str(), r.status, r.output.c_str());
    EXPECT_EQ(r.status, 0) << c.name;
    EXPECT_TRUE(fs::exists(out)) << c.name;
    EXPECT_TRUE(contains(r.output, "wrote " + out.string() + ": " + c.workflow)) << r.output;
    if (c.name == "first") {
      // --progress draws the per-step bar on stderr even when it is not a terminal.
      EXPECT_TRUE(contains(r.output, "[denoise]")) << r.output;
      EXPECT_TRUE(contains(r.output, " 1/1")) << r.output;
    }
  }
  EXPECT_EQ(entries(fx.out_dir), std::size(cases)) << "a temporary file was left";
}

// The video reader on a clip written by the project's muxer: frames, size, rate and soundtrack.
TEST(CliGenerateWorkflows, VideoReaderReadsFramesRateAndSoundtrack) {
  if (!io::mp4_writer_available() || !media::video_reader_available())
    GTEST_SKIP() << "built without FFmpeg";
  TempDir tmp("h3_video_io");
  const fs::path clip = tmp.path() / "clip.mp4";
  write_clip(clip);
  const media::DecodedVideo v = media::read_video(clip.string());
  const int64_t samples = v.audio.defined() ? v.audio.size(1) : 0;
  std::printf(
      "read %zu frames %lldx%lld at %.3f fps, audio %lld channel(s) x %lld samples at %lld "
      "Hz (written: 12 frames 16x16 at 24 fps, 2 x 16000 at 32000 Hz)\n",
      v.frames.size(), static_cast<long long>(v.frames.empty() ? 0 : v.frames[0].width),
      static_cast<long long>(v.frames.empty() ? 0 : v.frames[0].height), v.fps,
      static_cast<long long>(v.audio.defined() ? v.audio.size(0) : 0),
      static_cast<long long>(samples), static_cast<long long>(v.sample_rate));
  EXPECT_EQ(v.frames.size(), 12u);
  ASSERT_FALSE(v.frames.empty());
  EXPECT_EQ(v.frames[0].width, 16);
  EXPECT_EQ(v.frames[0].height, 16);
  EXPECT_NEAR(v.fps, 24.0, 1e-9);
  ASSERT_TRUE(v.audio.defined());
  EXPECT_EQ(v.audio.size(0), 2);
  EXPECT_EQ(v.sample_rate, 32000);
  // AAC works in 1024-sample frames: the decoded length is within one frame of what was written.
  EXPECT_NEAR(static_cast<double>(samples), 16000.0, 1024.0);
  // A file without a video stream is refused by name.
  const fs::path wav = tmp.path() / "tone.wav";
  media::write_wav_float(wav.string(), tone(2, 3200, 32000), 32000);
  try {
    media::read_video(wav.string());
    ADD_FAILURE() << "a WAV file was accepted as a video";
  } catch (const Error& e) {
    std::printf("wav as video: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("tone.wav"), std::string::npos) << e.what();
  }
}

TEST(CliGenerateWorkflows, BadInputsFailAndLeaveNoOutput) {
  H3_REQUIRE_BIN();
  Fixture fx;
  const fs::path garbage = fx.tmp.path() / "garbage.png";
  {
    std::ofstream g(garbage, std::ios::binary);
    g << "this is not an image";
  }
  const fs::path out = fx.out_dir / "clip.mp4";
  struct Case {
    std::string extra, expect;
  };
  const Case cases[] = {
      {" --image " + shell_quote(garbage.string()), "garbage.png"},
      {" --image " + shell_quote((fx.tmp.path() / "missing.png").string()), "missing.png"},
      {" --ref sound:" + shell_quote(fx.wav.string()), "sound"},
      {" --ref image", "KIND:FILE"},
      {" --ref audio:" + shell_quote(fx.a_png.string()), "a.ppm"},
      {" --ref audio:" + shell_quote(fx.wav.string()), "audio-only"},
      {" --image " + shell_quote(fx.a_png.string()) +
           " --ref image:" + shell_quote(fx.a_png.string()),
       "cannot be combined"},
      {" --workflow fl2va", "keyframe"},
      {" --workflow t2va --image " + shell_quote(fx.a_png.string()), "t2va"},
      {" --workflow v2v", "unknown workflow"},
      {" --image " + shell_quote(fx.a_png.string()) + " --height 48 --width 32", "48"},
      {" --vsa-tile-size 128", "--vsa-tile-size"},
      {" --device gpu", "gpu"},
  };
  for (const Case& c : cases) {
    const RunResult r = run_h3(fx.base(out) + c.extra);
    std::printf("[%s] exit %d: %s", c.extra.c_str(), r.status, r.output.c_str());
    EXPECT_NE(r.status, 0) << c.extra;
    EXPECT_TRUE(contains(r.output, c.expect)) << c.extra << ": " << r.output;
    EXPECT_EQ(entries(fx.out_dir), 0u) << c.extra << ": an output file was left";
  }
  // A repository without the reference partition: ref2va names the missing component.
  fs::remove_all(fx.model / "transformer_ref");
  const RunResult r = run_h3(fx.base(out) + " --ref image:" + shell_quote(fx.a_png.string()));
  std::printf("[no transformer_ref] exit %d: %s", r.status, r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "transformer_ref")) << r.output;
  EXPECT_EQ(entries(fx.out_dir), 0u);
}

TEST(CliGenerateWorkflows, RepeatMatchesAFreshProcess) {
  H3_REQUIRE_BIN();
  if (!io::mp4_writer_available()) GTEST_SKIP() << "built without FFmpeg";
  Fixture fx;
  for (const char* seq : {"--sequential-load", "--no-sequential-load"}) {
    const fs::path dir = fx.out_dir / (std::string(seq).substr(2));
    fs::create_directories(dir);
    const std::string keys = " --image " + shell_quote(fx.a_png.string()) + " " + seq;
    const RunResult many = run_h3(fx.base(dir / "clip.mp4") + keys + " --repeat 2 --save-latents " +
                                  shell_quote((dir / "lat.safetensors").string()));
    std::printf("[%s repeat 2] exit %d: %s", seq, many.status, many.output.c_str());
    ASSERT_EQ(many.status, 0);
    ASSERT_TRUE(fs::exists(dir / "clip-seed3.mp4"));
    ASSERT_TRUE(fs::exists(dir / "clip-seed4.mp4"));
    ASSERT_TRUE(fs::exists(dir / "lat-seed4.safetensors"));
    const RunResult one = run_h3(fx.base(dir / "fresh.mp4") + keys + " --seed 4 --save-latents " +
                                 shell_quote((dir / "fresh.safetensors").string()));
    ASSERT_EQ(one.status, 0) << one.output;
    const std::string a = slurp(dir / "lat-seed4.safetensors");
    const std::string b = slurp(dir / "fresh.safetensors");
    std::printf("[%s] latents: %zu vs %zu bytes, %s\n", seq, a.size(), b.size(),
                a == b ? "identical" : "DIFFERENT");
    EXPECT_EQ(a, b) << "second generation of one process differs from a fresh process";
    const std::string ma = slurp(dir / "clip-seed4.mp4");
    const std::string mb = slurp(dir / "fresh.mp4");
    std::printf("[%s] mp4: %zu vs %zu bytes, %s\n", seq, ma.size(), mb.size(),
                ma == mb ? "identical" : "DIFFERENT");
    EXPECT_EQ(ma, mb);
    EXPECT_NE(slurp(dir / "clip-seed3.mp4"), ma) << "seeds 3 and 4 gave the same clip";
  }
}

}  // namespace
}  // namespace h3
