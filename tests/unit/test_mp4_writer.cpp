// MP4 muxing (h3_components_spec.md §4.8): a small clip written and read back with libavformat
// (two streams, H.264 + AAC, durations, frame count), byte-identical on a second write, and no
// file (neither the output nor a temporary) left behind by a failed call.
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

#if defined(H3_WITH_FFMPEG)
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}
#endif

namespace h3 {
namespace {

namespace fs = std::filesystem;

[[maybe_unused]] fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("h3_test_mp4_" + name + "_" +
                                                  std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

[[maybe_unused]] Tensor test_frames(int64_t f, int64_t h, int64_t w) {
  Tensor t = Tensor::empty({f, h, w, 3}, DType::kU8);
  uint8_t* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t px = i / 3, c = i % 3, x = px % w, y = (px / w) % h, fr = px / (w * h);
    p[i] = static_cast<uint8_t>((x * 4 + y * 3 + fr * 20 + c * 60) & 255);
  }
  return t;
}

[[maybe_unused]] Tensor test_audio(int64_t samples) {
  Tensor t = Tensor::empty({2, samples}, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < samples; ++i) {
    p[i] = 0.5f * std::sin(2.0 * M_PI * 440.0 * i / 32000.0);
    p[samples + i] = 0.25f * std::sin(2.0 * M_PI * 660.0 * i / 32000.0);
  }
  return t;
}

[[maybe_unused]] std::vector<char> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

[[maybe_unused]] size_t entries(const fs::path& d) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(d), fs::directory_iterator()));
}

#if defined(H3_WITH_FFMPEG)

TEST(Mp4Writer, WritesH264AndAacThatReadBack) {
  const fs::path dir = fresh_dir("roundtrip");
  const fs::path out = dir / "clip.mp4";
  const int64_t frames = 10, h = 48, w = 64;
  const int64_t samples = frames * 32000 / 24;  // 13333: as long as the video
  const io::Mp4Result r = io::write_mp4(out.string(), test_frames(frames, h, w), test_audio(samples));
  std::printf("wrote %s: %llu bytes, video %s, audio %s, %lld samples\n", out.c_str(),
              static_cast<unsigned long long>(r.bytes), r.video_encoder.c_str(),
              r.audio_encoder.c_str(), static_cast<long long>(r.audio_samples));
  ASSERT_TRUE(fs::exists(out));
  EXPECT_EQ(entries(dir), 1u) << "a temporary file was left beside the output";
  EXPECT_GT(r.bytes, 0u);

  AVFormatContext* fmt = nullptr;
  ASSERT_EQ(avformat_open_input(&fmt, out.c_str(), nullptr, nullptr), 0);
  ASSERT_GE(avformat_find_stream_info(fmt, nullptr), 0);
  ASSERT_EQ(fmt->nb_streams, 2u);
  int video = -1, audio = -1;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVCodecParameters* par = fmt->streams[i]->codecpar;
    if (par->codec_type == AVMEDIA_TYPE_VIDEO) video = static_cast<int>(i);
    if (par->codec_type == AVMEDIA_TYPE_AUDIO) audio = static_cast<int>(i);
  }
  ASSERT_GE(video, 0);
  ASSERT_GE(audio, 0);
  const AVCodecParameters* vp = fmt->streams[video]->codecpar;
  const AVCodecParameters* ap = fmt->streams[audio]->codecpar;
  EXPECT_EQ(vp->codec_id, AV_CODEC_ID_H264);
  EXPECT_EQ(vp->width, w);
  EXPECT_EQ(vp->height, h);
  EXPECT_EQ(vp->format, AV_PIX_FMT_YUV420P);
  EXPECT_EQ(ap->codec_id, AV_CODEC_ID_AAC);
  EXPECT_EQ(ap->sample_rate, 32000);
  EXPECT_EQ(ap->ch_layout.nb_channels, 2);
  const AVStream* vs = fmt->streams[video];
  EXPECT_EQ(vs->avg_frame_rate.num * 1, 24 * vs->avg_frame_rate.den);

  int64_t video_packets = 0, audio_packets = 0;
  AVPacket* pkt = av_packet_alloc();
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == video) ++video_packets;
    if (pkt->stream_index == audio) ++audio_packets;
    av_packet_unref(pkt);
  }
  av_packet_free(&pkt);
  const double vdur = vs->duration * av_q2d(vs->time_base);
  const AVStream* as = fmt->streams[audio];
  const double adur = as->duration * av_q2d(as->time_base);
  std::printf("read back: %lld video packets (expected %lld), %.4f s video (expected %.4f), %lld "
              "audio packets, %.4f s audio (expected %.4f, one 1024-sample frame = 0.032 s)\n",
              static_cast<long long>(video_packets), static_cast<long long>(frames), vdur,
              frames / 24.0, static_cast<long long>(audio_packets), adur, samples / 32000.0);
  EXPECT_EQ(video_packets, frames);
  EXPECT_NEAR(vdur, frames / 24.0, 1e-6);
  EXPECT_NEAR(adur, samples / 32000.0, 1024.0 / 32000.0 + 1e-6);
  EXPECT_GE(audio_packets, samples / 1024);
  avformat_close_input(&fmt);

  // Deterministic: the same input gives the same bytes.
  const fs::path again = dir / "again.mp4";
  io::write_mp4(again.string(), test_frames(frames, h, w), test_audio(samples));
  const std::vector<char> a = file_bytes(out), b = file_bytes(again);
  std::printf("second write: %zu vs %zu bytes, equal=%d\n", a.size(), b.size(), a == b ? 1 : 0);
  EXPECT_TRUE(a == b) << "two writes of the same clip differ";
  fs::remove_all(dir);
}

TEST(Mp4Writer, VideoOnlyHasOneStream) {
  const fs::path dir = fresh_dir("silent");
  const fs::path out = dir / "silent.mp4";
  io::write_mp4(out.string(), test_frames(3, 32, 32), Tensor());
  AVFormatContext* fmt = nullptr;
  ASSERT_EQ(avformat_open_input(&fmt, out.c_str(), nullptr, nullptr), 0);
  ASSERT_GE(avformat_find_stream_info(fmt, nullptr), 0);
  EXPECT_EQ(fmt->nb_streams, 1u);
  avformat_close_input(&fmt);
  fs::remove_all(dir);
}

TEST(Mp4Writer, FailuresLeaveNoFile) {
  const fs::path dir = fresh_dir("fail");
  const fs::path out = dir / "bad.mp4";
  auto expect_error = [&](ErrorCode code, const Tensor& frames, const Tensor& audio,
                          const io::Mp4Options& opt, const std::string& path) {
    try {
      io::write_mp4(path, frames, audio, opt);
      ADD_FAILURE() << "write_mp4 accepted a bad request";
    } catch (const Error& e) {
      std::printf("  error (%s): %s\n", error_code_name(e.code()), e.what());
      EXPECT_EQ(e.code(), code);
      EXPECT_NE(e.message().find(path), std::string::npos) << "the message should name the file";
    }
    EXPECT_FALSE(fs::exists(out));
    EXPECT_EQ(entries(dir), 0u) << "a failed write left a file behind";
  };
  const io::Mp4Options def;
  expect_error(ErrorCode::kInvalidArgument, test_frames(2, 33, 32), Tensor(), def, out.string());
  expect_error(ErrorCode::kInvalidArgument, Tensor::zeros({2, 32, 32}, DType::kU8), Tensor(), def,
               out.string());
  expect_error(ErrorCode::kInvalidArgument, test_frames(2, 32, 32),
               Tensor::zeros({1, 100}, DType::kF32), def, out.string());
  io::Mp4Options bad_encoder;
  bad_encoder.video_encoder = "no_such_encoder";
  expect_error(ErrorCode::kUnsupported, test_frames(2, 32, 32), Tensor(), bad_encoder, out.string());
  io::Mp4Options bad_preset;
  bad_preset.x264_preset = "no_such_preset";
  if (avcodec_find_encoder_by_name("libx264")) {
    expect_error(ErrorCode::kUnsupported, test_frames(2, 32, 32), Tensor(), bad_preset, out.string());
  }
  expect_error(ErrorCode::kIo, test_frames(2, 32, 32), Tensor(), def,
               (dir / "missing_folder" / "x.mp4").string());
  fs::remove_all(dir);
}

// Streaming: the same frames and audio written in uneven pieces give the same bytes as one call,
// a writer abandoned before finish() leaves nothing, and frame-count mistakes are errors.
TEST(Mp4Writer, PiecesGiveTheSameBytesAsOneCall) {
  const fs::path dir = fresh_dir("pieces");
  const Tensor frames = test_frames(11, 32, 48);
  const Tensor audio = test_audio(16000);
  const fs::path whole = dir / "whole.mp4", pieces = dir / "pieces.mp4";
  io::write_mp4(whole.string(), frames, audio);
  {
    io::Mp4Writer w(pieces.string(), 11, 32, 48, audio);
    int64_t at = 0;
    for (int64_t n : {1, 4, 0, 6}) {
      w.add_frames(frames.slice(0, at, at + n));
      at += n;
    }
    EXPECT_EQ(w.frames_written(), 11);
    EXPECT_FALSE(fs::exists(pieces)) << "visible before finish()";
    const io::Mp4Result r = w.finish();
    EXPECT_EQ(r.frames, 11);
  }
  const std::vector<char> a = file_bytes(whole), b = file_bytes(pieces);
  std::printf("whole %zu bytes, in pieces %zu bytes\n", a.size(), b.size());
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "streamed MP4 differs from the one-call MP4";

  const fs::path abandoned = dir / "abandoned.mp4";
  {
    io::Mp4Writer w(abandoned.string(), 11, 32, 48, audio);
    w.add_frames(frames.slice(0, 0, 5));
    try {
      w.add_frames(frames);  // 5 + 11 > 11
      ADD_FAILURE() << "accepted more frames than announced";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      std::printf("  error: %s\n", e.what());
    }
    try {
      w.finish();  // 5 of 11
      ADD_FAILURE() << "finished with frames missing";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      std::printf("  error: %s\n", e.what());
    }
  }
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_EQ(entries(dir), 2u) << "an abandoned writer left a file behind";
  fs::remove_all(dir);
}

#else

TEST(Mp4Writer, UnsupportedWithoutFfmpeg) {
  EXPECT_FALSE(io::mp4_writer_available());
  try {
    io::write_mp4("/tmp/never.mp4", Tensor::zeros({1, 32, 32, 3}, DType::kU8), Tensor());
    ADD_FAILURE() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    std::printf("  error: %s\n", e.what());
  }
}

#endif

}  // namespace
}  // namespace h3
