// Media preparation rules the golden data does not cover (golden README "Not covered"): 29.97 fps,
// a reference longer than the request, a video without soundtrack; plus the LANCZOS resize's
// fixed-point invariants, the keyframe geometry, and image/WAV reading with their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "media/image_io.h"
#include "media/image_resize.h"
#include "media/reference_media.h"
#include "media/wav_io.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;

media::RgbImage pattern(int64_t w, int64_t h, int seed) {
  media::RgbImage img(w, h);
  uint32_t s = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (auto& p : img.pixels) {
    s = s * 1664525u + 1013904223u;
    p = static_cast<uint8_t>(s >> 24);
  }
  return img;
}

template <typename Fn>
void expect_error(ErrorCode code, Fn&& fn, const std::string& must_mention) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << must_mention;
  } catch (const Error& e) {
    std::printf("  error (%s): %s\n", error_code_name(e.code()), e.what());
    EXPECT_EQ(e.code(), code);
    EXPECT_NE(e.message().find(must_mention), std::string::npos) << e.message();
  }
}

// ---- frame-rate normalization ----

TEST(ReferenceMedia, ThirtyFpsDropsEveryFifthFrame) {
  // README example: 30 fps, 16 frames -> 13 frames, inputs 2, 7, 12 dropped.
  const auto idx = media::frame_rate_source_indices(16, 30.0, 22);
  const std::vector<int64_t> want = {0, 1, 3, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15};
  EXPECT_EQ(idx, want);
}

TEST(ReferenceMedia, NtscRateUsesFloat64Slots) {
  // s = 24 / 29.97; slots floor(i*s + 0.5) = 0 1 2 2 3 4 5 6 6 7 8: inputs 2 and 6 dropped.
  const auto idx = media::frame_rate_source_indices(10, 29.97, 100);
  const std::vector<int64_t> want = {0, 1, 3, 4, 5, 6, 8, 9};
  EXPECT_EQ(idx, want);
  // 1001 frames at 29.97 fps last 33.4 s; at 24 fps that is floor(1001*24/29.97 + 0.5) = 802.
  EXPECT_EQ(media::frame_rate_source_indices(1001, 29.97, 100000).size(), 802u);
}

TEST(ReferenceMedia, SlowVideoRepeatsFrames) {
  const auto idx = media::frame_rate_source_indices(4, 12.0, 100);
  const std::vector<int64_t> want = {0, 0, 1, 1, 2, 2, 3, 3};
  EXPECT_EQ(idx, want);
}

TEST(ReferenceMedia, VideoLongerThanRequestIsCut) {
  // 24 fps passes through untouched; 100 frames for a 22-frame request keep frames 0..21.
  const auto idx = media::frame_rate_source_indices(100, 24.0, 22);
  ASSERT_EQ(idx.size(), 22u);
  for (int64_t i = 0; i < 22; ++i) EXPECT_EQ(idx[static_cast<size_t>(i)], i);
  // 50 fps, 300 frames (144 at 24 fps), 124-frame request: cut to 124, the last from input 257
  // (slot(257) = floor(257*0.48 + 0.5) = 123).
  const auto fast = media::frame_rate_source_indices(300, 50.0, 124);
  ASSERT_EQ(fast.size(), 124u);
  EXPECT_EQ(fast.back(), 257);
}

TEST(ReferenceMedia, RejectsBadRates) {
  expect_error(ErrorCode::kInvalidArgument, [] { media::frame_rate_source_indices(5, 0.0, 22); },
               "frame rate");
  expect_error(ErrorCode::kInvalidArgument, [] { media::frame_rate_source_indices(5, NAN, 22); },
               "frame rate");
  expect_error(ErrorCode::kInvalidArgument, [] { media::frame_rate_source_indices(0, 24.0, 22); },
               "no frames");
}

TEST(ReferenceMedia, VideoWithoutSoundtrackNormalizesFramesOnly) {
  // Frames and fps are all a video reference needs; 8 frames at 24 fps onto a 2:1 canvas.
  std::vector<media::RgbImage> frames;
  for (int i = 0; i < 8; ++i) frames.push_back(pattern(40, 20, i));
  pipeline::CanvasConfig cfg;
  cfg.short_edge = 64;
  cfg.max_pixels = 8192;
  const media::NormalizedVideo v = media::normalize_reference_video(frames, 24.0, 124, cfg);
  EXPECT_EQ(v.frames.size(), 8u);
  // 2:1 -> 128x64 = 8192 pixels: within the budget.
  EXPECT_EQ(v.canvas, (pipeline::Canvas{64, 128}));
  EXPECT_EQ(v.frames[3], media::resize_lanczos(frames[3], 128, 64));
  // 8 frames are cut to 17n+5 with n = max(1, (8-5)//17) = 1 -> 22, so all 8 stay.
  EXPECT_EQ(media::reference_frames_for_encoding(8), 8);
  EXPECT_EQ(media::reference_frames_for_encoding(60), 56);  // (60-5)//17 = 3 -> 56
}

// ---- LANCZOS resize ----

TEST(ImageResize, CoefficientsSumToOneInFixedPoint) {
  for (auto [in, out] : {std::pair<int64_t, int64_t>{16, 64}, {56, 32}, {60, 53}, {1000, 7}}) {
    const media::ResampleCoefficients c = media::lanczos_coefficients(in, out);
    int64_t worst = 0;
    for (int64_t i = 0; i < out; ++i) {
      int64_t sum = 0;
      for (int64_t k = 0; k < c.count[static_cast<size_t>(i)]; ++k) {
        sum += c.weights[static_cast<size_t>(i * c.ksize + k)];
      }
      worst = std::max<int64_t>(worst, std::llabs(sum - (int64_t{1} << 22)));
      EXPECT_GE(c.first[static_cast<size_t>(i)], 0);
      EXPECT_LE(c.first[static_cast<size_t>(i)] + c.count[static_cast<size_t>(i)], in);
    }
    std::printf("  %lld -> %lld: ksize=%lld, max |sum - 2^22| = %lld (bound %lld)\n",
                static_cast<long long>(in), static_cast<long long>(out),
                static_cast<long long>(c.ksize), static_cast<long long>(worst),
                static_cast<long long>(c.ksize));
    EXPECT_LE(worst, c.ksize);  // each tap rounds by at most half a unit
  }
}

TEST(ImageResize, ConstantImageStaysConstantAndSameSizeCopies) {
  media::RgbImage flat(37, 23);
  for (size_t i = 0; i < flat.pixels.size(); ++i) flat.pixels[i] = static_cast<uint8_t>(i % 3 == 0 ? 200 : 17);
  const media::RgbImage up = media::resize_lanczos(flat, 80, 50);
  const media::RgbImage down = media::resize_lanczos(flat, 9, 5);
  for (const auto* img : {&up, &down}) {
    for (size_t i = 0; i < img->pixels.size(); ++i) {
      ASSERT_EQ(img->pixels[i], i % 3 == 0 ? 200 : 17) << "at byte " << i;
    }
  }
  const media::RgbImage p = pattern(20, 10, 3);
  EXPECT_EQ(media::resize_lanczos(p, 20, 10), p);
  // Changing one axis leaves the other untouched: a width-only resize of a 1-row image equals
  // the same resize of each row.
  const media::RgbImage row = pattern(30, 1, 4);
  EXPECT_EQ(media::resize_lanczos(row, 12, 1).width, 12);
  expect_error(ErrorCode::kInvalidArgument, [&] { media::resize_lanczos(p, 0, 10); }, "target size");
}

// ---- keyframes ----

TEST(ReferenceMedia, CoverCropGeometry) {
  // README: 36x60 onto 32x32 -> 32x53, rows 10..41.
  const media::CoverCrop g = media::cover_crop_geometry(36, 60, pipeline::Canvas{32, 32});
  EXPECT_EQ(g.resized_width, 32);
  EXPECT_EQ(g.resized_height, 53);
  EXPECT_EQ(g.left, 0);
  EXPECT_EQ(g.top, 10);
  // Wide input onto 768x1344: scale = max(1344/2000, 768/1000) = 0.768 -> 1536x768, left 96.
  const media::CoverCrop w = media::cover_crop_geometry(2000, 1000, pipeline::Canvas{768, 1344});
  EXPECT_EQ(w.resized_width, 1536);
  EXPECT_EQ(w.resized_height, 768);
  EXPECT_EQ(w.left, 96);
  EXPECT_EQ(w.top, 0);
  const media::RgbImage last = pattern(36, 60, 9);
  const media::RgbImage crop = media::cover_crop_keyframe(last, pipeline::Canvas{32, 32});
  const media::RgbImage full = media::resize_lanczos(last, 32, 53);
  for (int64_t y = 0; y < 32; ++y) {
    ASSERT_EQ(std::vector<uint8_t>(crop.at(0, y), crop.at(0, y) + 96),
              std::vector<uint8_t>(full.at(0, y + 10), full.at(0, y + 10) + 96));
  }
}

// ---- image files ----

fs::path temp_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const fs::path p = fs::temp_directory_path() / ("h3_test_media_" + name);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                           static_cast<std::streamsize>(bytes.size()));
  return p;
}

TEST(ImageIo, ReadsPpmAndBmp) {
  // 3x2 binary PPM.
  std::vector<uint8_t> ppm = {'P', '6', '\n', '3', ' ', '2', '\n', '2', '5', '5', '\n'};
  for (int i = 0; i < 18; ++i) ppm.push_back(static_cast<uint8_t>(i * 10));
  const media::RgbImage a = media::read_image(temp_file("a.ppm", ppm).string());
  ASSERT_EQ(a.width, 3);
  ASSERT_EQ(a.height, 2);
  for (int i = 0; i < 18; ++i) EXPECT_EQ(a.pixels[static_cast<size_t>(i)], i * 10);
  // 2x2 24-bit BMP, bottom-up rows, BGR, rows padded to 4 bytes.
  std::vector<uint8_t> bmp = {'B', 'M', 70, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0, 40, 0, 0, 0, 2, 0, 0, 0,
                              2, 0, 0, 0, 1, 0, 24, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  // bottom row: (B,G,R) = (1,2,3), (4,5,6); top row: (7,8,9), (10,11,12)
  for (uint8_t v : {1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0}) bmp.push_back(v);
  const media::RgbImage b = media::read_image(temp_file("b.bmp", bmp).string());
  ASSERT_EQ(b.width, 2);
  ASSERT_EQ(b.height, 2);
  const std::vector<uint8_t> want = {9, 8, 7, 12, 11, 10, 3, 2, 1, 6, 5, 4};
  EXPECT_EQ(b.pixels, want);
  const Tensor t = media::image_to_tensor(b);
  EXPECT_EQ(t.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(media::image_from_tensor(t), b);
}

TEST(ImageIo, ClearErrors) {
  expect_error(ErrorCode::kNotFound, [] { media::read_image("/nonexistent/h3/x.png"); },
               "/nonexistent/h3/x.png");
  const fs::path garbage = temp_file("garbage.png", {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i'});
  expect_error(ErrorCode::kInvalidFile, [&] { media::read_image(garbage.string()); },
               garbage.string());
  // A PNG signature and a truncated IHDR.
  const fs::path trunc = temp_file("trunc.png", {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0,
                                                 13, 'I', 'H', 'D', 'R', 0, 0});
  expect_error(ErrorCode::kInvalidFile, [&] { media::read_image(trunc.string()); }, trunc.string());
  expect_error(ErrorCode::kInvalidArgument,
               [] { media::image_from_tensor(Tensor::zeros({4, 4, 4}, DType::kU8), "input_image"); },
               "input_image");
}

// ---- WAV ----

std::vector<uint8_t> wav_header(uint16_t format, uint16_t channels, uint32_t rate, uint16_t bits,
                                uint32_t data_bytes) {
  std::vector<uint8_t> b = {'R', 'I', 'F', 'F'};
  auto p32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); };
  auto p16 = [&](uint16_t v) { b.push_back(static_cast<uint8_t>(v)); b.push_back(static_cast<uint8_t>(v >> 8)); };
  p32(36 + data_bytes);
  for (char c : std::string("WAVEfmt ")) b.push_back(static_cast<uint8_t>(c));
  p32(16);
  p16(format);
  p16(channels);
  p32(rate);
  p32(rate * channels * bits / 8);
  p16(static_cast<uint16_t>(channels * bits / 8));
  p16(bits);
  for (char c : std::string("data")) b.push_back(static_cast<uint8_t>(c));
  p32(data_bytes);
  return b;
}

TEST(WavIo, ReadsPcm16And24) {
  std::vector<uint8_t> w16 = wav_header(1, 2, 44100, 16, 8);
  // frames: (16384, -32768), (-1, 32767)
  for (uint8_t v : {0x00, 0x40, 0x00, 0x80, 0xFF, 0xFF, 0xFF, 0x7F}) w16.push_back(v);
  const media::Waveform a = media::decode_wav(w16.data(), w16.size(), "a.wav");
  EXPECT_EQ(a.sample_rate, 44100);
  ASSERT_EQ(a.samples.shape(), (Shape{2, 2}));
  const std::vector<double> got = a.samples.to_f64_vector();
  EXPECT_EQ(got, (std::vector<double>{0.5, -1.0 / 32768.0, -1.0, 32767.0 / 32768.0}));
  std::vector<uint8_t> w24 = wav_header(1, 1, 16000, 24, 6);
  for (uint8_t v : {0x00, 0x00, 0xC0, 0xFF, 0xFF, 0x7F}) w24.push_back(v);  // -0.5, max
  const media::Waveform b = media::decode_wav(w24.data(), w24.size(), "b.wav");
  const std::vector<double> g24 = b.samples.to_f64_vector();
  EXPECT_EQ(g24[0], -0.5);
  EXPECT_EQ(g24[1], static_cast<double>(static_cast<float>(8388607.0 / 8388608.0)));
}

TEST(WavIo, FloatRoundTripAndErrors) {
  const Tensor wave = Tensor::from_f32({0.25f, -0.75f, 1.0f, 0.0f, 0.125f, -1.0f}, {2, 3});
  const fs::path p = fs::temp_directory_path() / "h3_test_media_roundtrip.wav";
  media::write_wav_float(p.string(), wave, 32000);
  const media::Waveform r = media::read_wav(p.string());
  EXPECT_EQ(r.sample_rate, 32000);
  EXPECT_EQ(r.samples.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.samples.to_f64_vector(), wave.to_f64_vector());
  EXPECT_FALSE(fs::exists(p.string() + ".partial"));

  expect_error(ErrorCode::kNotFound, [] { media::read_wav("/nonexistent/h3/a.wav"); }, "a.wav");
  const std::vector<uint8_t> junk = {'R', 'I', 'F', 'X', 0, 0, 0, 0, 'W', 'A', 'V', 'E'};
  expect_error(ErrorCode::kInvalidFile, [&] { media::decode_wav(junk.data(), junk.size(), "junk.wav"); },
               "RIFF/WAVE");
  std::vector<uint8_t> trunc = wav_header(1, 2, 44100, 16, 400);
  trunc.resize(trunc.size() + 10);
  expect_error(ErrorCode::kInvalidFile,
               [&] { media::decode_wav(trunc.data(), trunc.size(), "trunc.wav"); }, "truncated");
  for (const double bad : {std::nan(""), 1e300}) {  // NaN; a float64 past float32's range
    std::vector<uint8_t> f64 = wav_header(3, 1, 8000, 64, 16);
    for (const double v : {0.5, bad}) {
      uint8_t raw[8];
      std::memcpy(raw, &v, 8);
      f64.insert(f64.end(), raw, raw + 8);
    }
    expect_error(
        ErrorCode::kInvalidFile, [&] { media::decode_wav(f64.data(), f64.size(), "nan.wav"); },
        "sample 1 of channel 0 is not a finite float32");
  }
  std::vector<uint8_t> alaw = wav_header(6, 1, 8000, 8, 2);
  alaw.push_back(0);
  alaw.push_back(0);
  expect_error(ErrorCode::kInvalidFile,
               [&] { media::decode_wav(alaw.data(), alaw.size(), "alaw.wav"); }, "unsupported");
}

}  // namespace
}  // namespace h3
