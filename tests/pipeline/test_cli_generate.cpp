// `h3 generate` run as a user would (the built binary from $H3_BIN) on a repository written by
// `h3 make-tiny`: a T2VA clip on the CPU whose MP4 libavformat reads back with one H.264 video and
// one AAC audio stream, and bad requests that fail with a message naming the flag and leave no
// output file behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "io/safetensors.h"
#include "io/sha256.h"
#include "pipeline/generate.h"
#include "support/cli.h"
#include "support/golden.h"
#include "support/temp_dir.h"

#if defined(H3_WITH_FFMPEG)
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}
#endif

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

// A tiny repository in `dir`/model, written by the binary itself with make-tiny's `flags`.
// The "values" of a receipt that `h3 generate --receipt` wrote.
nlohmann::json receipt_values(const fs::path& receipt) {
  return nlohmann::json::parse(std::ifstream(receipt)).at("values");
}

fs::path make_tiny(const fs::path& dir, const std::string& flags = "") {
  const fs::path model = dir / "model";
  const RunResult r = run_h3("make-tiny " + flags + " " + shell_quote(model.string()));
  EXPECT_EQ(r.status, 0) << r.output;
  return model;
}

// The small request every case uses: 64x64, 22 frames (bypassing the 5 s minimum), 3 grid points.
std::string small_request(const fs::path& model, const fs::path& out) {
  return "generate --model " + shell_quote(model.string()) +
         " --prompt 'A lighthouse at dusk, gulls calling.' --height 64 --width 64"
         " --num-frames 22 --steps 3 --seed 7 --allow-any-duration --device cpu --out " +
         shell_quote(out.string());
}

#if defined(H3_WITH_FFMPEG)
TEST(CliGenerate, TinyT2vaWritesMp4WithVideoAndAudio) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path());
  const fs::path out_dir = tmp.path() / "out";
  fs::create_directories(out_dir);
  const fs::path out = out_dir / "clip.mp4";
  const fs::path receipt = tmp.path() / "receipt.json";
  const RunResult r =
      run_h3(small_request(model, out) + " --receipt " + shell_quote(receipt.string()));
  std::printf("%s", r.output.c_str());
  ASSERT_EQ(r.status, 0);
  ASSERT_TRUE(fs::exists(out));
  EXPECT_EQ(entries(out_dir), 1u) << "a temporary file was left beside the output";
  ASSERT_TRUE(fs::exists(receipt));
  {
    std::ifstream in(receipt);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(contains(text, "\"denoise\"")) << text;
    EXPECT_TRUE(contains(text, "\"video decode\"")) << text;
  }

  AVFormatContext* fmt = nullptr;
  ASSERT_EQ(avformat_open_input(&fmt, out.c_str(), nullptr, nullptr), 0);
  ASSERT_GE(avformat_find_stream_info(fmt, nullptr), 0);
  int video = -1, audio = -1;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVCodecParameters* par = fmt->streams[i]->codecpar;
    if (par->codec_type == AVMEDIA_TYPE_VIDEO) video = static_cast<int>(i);
    if (par->codec_type == AVMEDIA_TYPE_AUDIO) audio = static_cast<int>(i);
  }
  std::printf("read back: %u streams, video #%d, audio #%d\n", fmt->nb_streams, video, audio);
  EXPECT_EQ(fmt->nb_streams, 2u);
  EXPECT_GE(video, 0);
  EXPECT_GE(audio, 0);
  if (video >= 0) {
    const AVCodecParameters* vp = fmt->streams[video]->codecpar;
    std::printf("video: %dx%d codec %d\n", vp->width, vp->height, static_cast<int>(vp->codec_id));
    EXPECT_EQ(vp->codec_id, AV_CODEC_ID_H264);
    EXPECT_EQ(vp->width, 64);
    EXPECT_EQ(vp->height, 64);
  }
  if (audio >= 0) {
    const AVCodecParameters* ap = fmt->streams[audio]->codecpar;
    std::printf("audio: %d Hz, %d channels\n", ap->sample_rate, ap->ch_layout.nb_channels);
    EXPECT_EQ(ap->codec_id, AV_CODEC_ID_AAC);
    EXPECT_EQ(ap->sample_rate, 32000);
    EXPECT_EQ(ap->ch_layout.nb_channels, 2);
  }
  int64_t video_packets = 0;
  AVPacket* pkt = av_packet_alloc();
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == video) ++video_packets;
    av_packet_unref(pkt);
  }
  av_packet_free(&pkt);
  avformat_close_input(&fmt);
  std::printf("video packets: %lld (expected 22)\n", static_cast<long long>(video_packets));
  EXPECT_EQ(video_packets, 22);
}
#endif

// A VAE that compresses 8x (`make-tiny --vae-spatial-ratio 8`, factors 2, 2, 2, 1, 1, 1): as the
// reference derives both from the VAE's config, canvases come in multiples of 16 (48x80 runs, 40
// does not) and the latent grid is twice as fine (48x80 -> 6x10 latents, 3x5 patches per latent
// frame); frames come out at the requested size.
TEST(CliGenerate, VaeSpatialRatioEightSetsTheCanvasMultipleAndTheLatentGrid) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path(), "--vae-spatial-ratio 8");
  RunResult r;
  const fs::path receipt = tmp.path() / "receipt.json";
  auto request = [&](const std::string& size, const fs::path& out) {
    return "generate --model " + shell_quote(model.string()) + " --prompt 'a red circle bounces' " + size +
           " --num-frames 22 --steps 3 --seed 1 --allow-any-duration --device cpu --out " +
           shell_quote(out.string()) + " --receipt " + shell_quote(receipt.string());
  };
  const fs::path out = tmp.path() / "clip.mp4";
  r = run_h3(request("--height 48 --width 80", out));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(fs::exists(out));
  const nlohmann::json rc = receipt_values(receipt);
  EXPECT_EQ(rc.at("height").get<int64_t>(), 48);
  EXPECT_EQ(rc.at("width").get<int64_t>(), 80);
  // 7 latent frames x 15 patches of video, 2 x 37 audio latents, then the prompt's tokens.
  EXPECT_EQ(rc.at("packed_rows").get<int64_t>() - rc.at("text_tokens").get<int64_t>(), 7 * 15 + 2 * 37) << rc.dump();
  EXPECT_EQ(rc.at("vae_tile_batch").get<int64_t>(), 1);  // one 256 px tile covers the canvas

  const fs::path bad = tmp.path() / "bad.mp4";
  r = run_h3(request("--height 40 --width 80", bad));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "multiples of 16")) << r.output;
  EXPECT_FALSE(fs::exists(bad));

  r = run_h3("make-tiny --vae-spatial-ratio 2 " + shell_quote((tmp.path() / "model2").string()));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--vae-spatial-ratio")) << r.output;
}

// At ratio 4 (factors 2, 2, 1, 1, 1, 1) the two temporal halvings sit on the two spatial ones, as
// a stage that halves only time would shrink each frame: 40x72 runs (multiples of 8), the latent
// grid is 10x18 (5x9 patches per latent frame) and time still compresses 4x (22 frames -> 7).
TEST(CliGenerate, VaeSpatialRatioFourMovesTheTemporalHalvings) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path(), "--vae-spatial-ratio 4");
  std::ifstream cfg_in(model / "vae" / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(cfg_in);
  EXPECT_EQ(cfg.at("spatial_downsample_factors"), nlohmann::json({2, 2, 1, 1, 1, 1}));
  EXPECT_EQ(cfg.at("temporal_downsample_factors"), nlohmann::json({2, 2, 1, 1, 1, 1}));
  const fs::path out = tmp.path() / "clip.mp4", receipt = tmp.path() / "receipt.json";
  const RunResult r =
      run_h3("generate --model " + shell_quote(model.string()) +
             " --prompt 'a red circle bounces' --height 40 --width 72 --num-frames 22 --steps 2"
             " --seed 1 --allow-any-duration --device cpu --out " +
             shell_quote(out.string()) + " --receipt " + shell_quote(receipt.string()));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(fs::exists(out));
  const nlohmann::json rc = receipt_values(receipt);
  EXPECT_EQ(rc.at("height").get<int64_t>(), 40);
  EXPECT_EQ(rc.at("width").get<int64_t>(), 72);
  EXPECT_EQ(rc.at("packed_rows").get<int64_t>() - rc.at("text_tokens").get<int64_t>(),
            7 * 45 + 2 * 37)
      << rc.dump();
}

// The latents' width comes from the VAE's config and the DiT's in_channels, as in the reference:
// a model with 64 latent channels generates (its latents come back 64 wide), and one whose DiT
// and VAE disagree is refused before anything runs, naming both configs.
TEST(CliGenerate, VaeLatentChannelsSetTheLatentWidth) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path(), "--vae-latent-channels 64");
  RunResult r = run_h3("info " + shell_quote(model.string()));
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path out = tmp.path() / "clip.mp4", latents = tmp.path() / "latents.safetensors";
  r = run_h3(small_request(model, out) + " --save-latents " + shell_quote(latents.string()));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_TRUE(fs::exists(out));
  const auto saved = io::SafetensorsFile::open(latents.string());
  const Shape v = saved->tensor("latents").shape();
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(v[1], 64);

  // The DiT of another model: in_channels 24 against the VAE's 64.
  {
    std::ifstream in(model / "transformer" / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["in_channels"] = 24;
    std::ofstream(model / "transformer" / "config.json") << c.dump(2);
  }
  const fs::path bad = tmp.path() / "bad.mp4";
  r = run_h3(small_request(model, bad));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "in_channels is 24")) << r.output;
  EXPECT_TRUE(contains(r.output, "latent_channels")) << r.output;
  EXPECT_FALSE(fs::exists(bad));

  for (const char* v : {"0", "257", "x"}) {
    r = run_h3(std::string("make-tiny --vae-latent-channels ") + v + " " +
               shell_quote((tmp.path() / "m").string()));
    EXPECT_NE(r.status, 0) << v;
    EXPECT_TRUE(contains(r.output, "--vae-latent-channels")) << r.output;
  }
}

// A checkpoint trained at one geometry declares it in its index; a request that gives no size or
// frames gets it (its length is the checkpoint's, so no 5-15 s check), flags still win, and half a
// declaration is refused naming the file.
TEST(CliGenerate, CheckpointDefaultsGiveItsGeometry) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path());
  const fs::path index = model / "modular_model_index.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(index));
  j["default_height"] = 32;
  j["default_width"] = 64;
  j["default_num_frames"] = 22;
  std::ofstream(index) << j.dump(2);
  auto receipt_of = [&](const std::string& flags) {
    const fs::path out = tmp.path() / "clip.mp4", receipt = tmp.path() / "receipt.json";
    const RunResult r = run_h3("generate --model " + shell_quote(model.string()) +
                               " --prompt 'a red circle bounces' --steps 2 --device cpu --out " +
                               shell_quote(out.string()) + " --receipt " +
                               shell_quote(receipt.string()) + " " + flags);
    EXPECT_EQ(r.status, 0) << r.output;
    return receipt_values(receipt);
  };
  nlohmann::json rc = receipt_of("");
  EXPECT_EQ(rc.at("height"), 32);
  EXPECT_EQ(rc.at("width"), 64);
  EXPECT_EQ(rc.at("num_frames"), 22);
  rc = receipt_of("--height 64 --width 64 --num-frames 39 --allow-any-duration");
  EXPECT_EQ(rc.at("height"), 64);
  EXPECT_EQ(rc.at("width"), 64);
  EXPECT_EQ(rc.at("num_frames"), 39);

  j.erase("default_width");
  std::ofstream(index) << j.dump(2);
  const fs::path bad = tmp.path() / "bad.mp4";
  const RunResult r = run_h3("generate --model " + shell_quote(model.string()) +
                             " --prompt 'a red circle bounces' --steps 2 --device cpu --out " +
                             shell_quote(bad.string()));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "modular_model_index.json")) << r.output;
  EXPECT_TRUE(contains(r.output, "default_width")) << r.output;
  EXPECT_FALSE(fs::exists(bad));
}

// --dit-dtype fp8 on the CPU runs the E4M3 emulation: the generation completes, says so in its
// receipt, and gives another clip than the default DiT (the option takes effect end to end); its
// default scaling is per 128 x 128 block, and --fp8-scaling channel gives yet another clip.
TEST(CliGenerate, DitDtypeFp8RunsAndChangesTheClip) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path());
  const fs::path a = tmp.path() / "default.mp4", b = tmp.path() / "fp8.mp4";
  const fs::path receipt = tmp.path() / "receipt.json";
  const RunResult ra = run_h3(small_request(model, a));
  ASSERT_EQ(ra.status, 0) << ra.output;
  const RunResult rb = run_h3(small_request(model, b) + " --dit-dtype fp8 --receipt " +
                              shell_quote(receipt.string()));
  ASSERT_EQ(rb.status, 0) << rb.output;
  std::ifstream in(receipt);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "\"dit_dtype\"") && contains(text, "\"fp8\"")) << text;
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  const std::string da((std::istreambuf_iterator<char>(fa)), std::istreambuf_iterator<char>());
  const std::string db((std::istreambuf_iterator<char>(fb)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(da.empty());
  EXPECT_NE(da, db) << "--dit-dtype fp8 gave the default clip's bytes";
  const fs::path c = tmp.path() / "fp8_channel.mp4",
                 receipt_c = tmp.path() / "receipt_channel.json";
  const RunResult rc =
      run_h3(small_request(model, c) + " --dit-dtype fp8 --fp8-scaling channel --receipt " +
             shell_quote(receipt_c.string()));
  ASSERT_EQ(rc.status, 0) << rc.output;
  std::ifstream in_c(receipt_c);
  const std::string text_c((std::istreambuf_iterator<char>(in_c)),
                           std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text_c, "\"dit_fp8_scaling\": \"channel\"")) << text_c;
  EXPECT_TRUE(contains(text, "\"dit_fp8_scaling\": \"block\"")) << text;
  std::ifstream fc(c, std::ios::binary);
  const std::string dc((std::istreambuf_iterator<char>(fc)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(dc.empty());
  EXPECT_NE(dc, db) << "--fp8-scaling channel gave the per-block clip's bytes";
}

// The default output path encodes each window's frames while the next window decodes; it must give
// the very bytes of decoding everything first (--no-stream). 56 frames make several windows.
TEST(CliGenerate, StreamedMp4EqualsWholeDecodeMp4) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path());
  const fs::path a = tmp.path() / "streamed.mp4", b = tmp.path() / "whole.mp4";
  const std::string frames = " --num-frames 56";
  const RunResult ra = run_h3(small_request(model, a) + frames);
  ASSERT_EQ(ra.status, 0) << ra.output;
  const RunResult rb = run_h3(small_request(model, b) + frames + " --no-stream");
  ASSERT_EQ(rb.status, 0) << rb.output;
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  const std::string ba((std::istreambuf_iterator<char>(fa)), std::istreambuf_iterator<char>());
  const std::string bb((std::istreambuf_iterator<char>(fb)), std::istreambuf_iterator<char>());
  std::printf("streamed %zu bytes, whole %zu bytes\n", ba.size(), bb.size());
  EXPECT_FALSE(ba.empty());
  EXPECT_TRUE(ba == bb) << "streamed and whole-decode MP4s differ";
  EXPECT_TRUE(contains(ra.output, "56 frames")) << ra.output;
}

TEST(CliGenerate, MissingModelFolderFails) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path out = tmp.path() / "clip.mp4";
  const RunResult r = run_h3(small_request(tmp.path() / "no_such_model", out));
  std::printf("%s", r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "no_such_model")) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(CliGenerate, BadRequestsFailBeforeWritingAnything) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path());
  const fs::path out_dir = tmp.path() / "out";
  fs::create_directories(out_dir);
  const fs::path out = out_dir / "clip.mp4";
  struct Case {
    std::string extra;
    std::string expect;
  };
  // Later flags override the small request's values.
  const Case cases[] = {
      {" --height 50 --width 64", "50"},      // not a multiple of 32
      {" --height 64 --width 0", "--width"},  // non-positive
      {" --num-frames 0", "--num-frames"},    // below 1
      {" --steps 1", "--steps"},              // fewer than 2 grid points
      {" --workflow fl2va", "keyframe"},      // fl2va without an image
      {" --frobnicate 1", "unknown option"},
      {" --dit-dtype fp16", "--dit-dtype"},
      {" --fp8-scaling block", "--dit-dtype fp8"},    // nothing to scale per block
      {" --fp8-scaling channel", "--dit-dtype fp8"},  // nor per channel
      {" --dit-dtype fp8 --fp8-scaling rows", "'rows'"},
      {" --vae-attention fast", "--vae-attention: unknown attention kernel 'fast'"},
      {" --vae-attention hopper", "--vae-attention hopper is not available on cpu"},
      {" --vae-tile-batch -1", "--vae-tile-batch"},
  };
  for (const Case& c : cases) {
    const RunResult r = run_h3(small_request(model, out) + c.extra);
    std::printf("[%s] exit %d: %s", c.extra.c_str(), r.status, r.output.c_str());
    EXPECT_NE(r.status, 0) << c.extra;
    EXPECT_TRUE(contains(r.output, c.expect)) << c.extra << ": " << r.output;
    EXPECT_EQ(entries(out_dir), 0u) << c.extra << ": an output file was left";
  }
  // Without --allow-any-duration 22 frames (0.9 s) is below the 5 s minimum.
  const std::string strict = "generate --model " + shell_quote(model.string()) +
                             " --prompt 'x' --height 64 --width 64 --num-frames 22 --out " +
                             shell_quote(out.string());
  const RunResult r = run_h3(strict);
  std::printf("[duration] exit %d: %s", r.status, r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "5-15 s")) << r.output;
  EXPECT_EQ(entries(out_dir), 0u);
}

TEST(CliGenerate, FailureMidRunLeavesNoOutputFile) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const fs::path model = make_tiny(tmp.path());
  // Truncate the video VAE's weights: the run gets through denoising and fails at the decoder.
  bool truncated = false;
  for (const auto& e : fs::directory_iterator(model / "vae")) {
    if (e.path().extension() == ".safetensors") {
      fs::resize_file(e.path(), 64);
      truncated = true;
    }
  }
  ASSERT_TRUE(truncated) << "no vae/*.safetensors in the tiny repository";
  const fs::path out_dir = tmp.path() / "out";
  fs::create_directories(out_dir);
  const fs::path out = out_dir / "clip.mp4";
  const RunResult r = run_h3(small_request(model, out));
  std::printf("exit %d: %s", r.status, r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "vae")) << r.output;
  EXPECT_EQ(entries(out_dir), 0u) << "a partial output was left";
}

// `h3 encode-text` writes each prompt's features as the generation computes them (the same path:
// bit for bit the prompt_embeds of a generation of that prompt), with the ids, the prompts and
// the digest of the text encoder they came from.
TEST(CliGenerate, EncodeTextWritesTheFeaturesTheGenerationUses) {
  TempDir tmp("h3_cli_encode_text");
  const fs::path model = make_tiny(tmp.path());
  const std::string out = (tmp.path() / "features.safetensors").string();
  const test::RunResult r = test::run_h3(
      "encode-text --model " + test::shell_quote(model.string()) +
      " --prompt 'a red circle bounces' --prompt 'a blue square moves to the left' --out " +
      test::shell_quote(out));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto f = io::SafetensorsFile::open(out);
  EXPECT_EQ(f->metadata().at("prompts"),
            R"(["a red circle bounces","a blue square moves to the left"])");
  EXPECT_EQ(f->metadata().at("text_encoder_sha256"),
            io::sha256_file_hex((model / "text_encoder" / "model.safetensors").string()));
  pipeline::GenerateRequest req;
  req.prompt = "a blue square moves to the left";
  req.height = 32;
  req.width = 32;
  req.num_frames = 5;
  req.allow_any_duration = true;
  req.num_inference_steps = 2;
  const pipeline::GenerateResult g = pipeline::generate_t2va(model.string(), req, {});
  const Tensor e = f->tensor("prompt.1.embeds");
  ASSERT_EQ(e.shape(), g.prompt_embeds.shape());
  EXPECT_EQ(test::count_bit_mismatches(e, g.prompt_embeds), 0);
  EXPECT_EQ(f->tensor("prompt.1.input_ids").to_i64_vector(), g.input_ids);
  EXPECT_NE(f->tensor("prompt.0.embeds").shape(), Shape{});
}

}  // namespace
}  // namespace h3
