// Video VAE parity against the golden `video_vae_encode`, `video_vae_decode`,
// `video_vae_encode_sampled` and `video_vae_decode_sampled` cases (golden README: components
// video_vae_*, "Released VAE tiling"). Every figure below is the CPU float32 policy (kF32) against
// the float32 reference at rel_max and rel_l2 <= 1e-5 (TOLERANCES.md), uint8 frames within +-1,
// tile layouts exact. The decode cases also print the float16-autocast policy's distance from the
// float32 golden (the reference's CUDA recipe; reported, only a sanity bound enforced).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/video_vae/video_vae_model.h"
#include "models/video_vae/video_vae_tiling.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

using video_vae::TileSettings;
using video_vae::VideoVae;

constexpr double kF32Bound = 1e-5;       // TOLERANCES.md: CPU float32 engine vs float32 golden
constexpr double kUint8Bound = 1.0;      // frames: +-1
constexpr double kF16SanityL2 = 5e-2;    // f16 autocast vs float32 golden: a sanity bound only

// One model per precision, loaded on first use; tiling is set per case.
VideoVae& model_for(video_vae::VaePrecision precision) {
  static std::map<video_vae::VaePrecision, std::unique_ptr<VideoVae>> cache;
  auto it = cache.find(precision);
  if (it == cache.end()) {
    video_vae::VideoVaeOptions opt;
    opt.precision = precision;
    const std::string dir = test::Golden::get()->checkpoint_dir() + "/vae";
    it = cache.emplace(precision, std::make_unique<VideoVae>(VideoVae::load(dir, opt))).first;
  }
  return *it->second;
}

const nlohmann::json& meta_of(const test::GoldenCase& c) {
  static const nlohmann::json empty = nlohmann::json::object();
  return c.entry.contains("meta") && c.entry["meta"].is_object() ? c.entry["meta"] : empty;
}

int64_t meta_int(const nlohmann::json& m, const char* key, int64_t fallback) {
  return m.contains(key) && m[key].is_number_integer() ? m[key].get<int64_t>() : fallback;
}

// The tile geometry a case was made with: its meta's tile_sample_* fields, else the release's.
TileSettings tiles_of(const test::GoldenCase& c) {
  const nlohmann::json& m = meta_of(c);
  TileSettings t;
  t.tile_height = meta_int(m, "tile_sample_min_height", t.tile_height);
  t.tile_width = meta_int(m, "tile_sample_min_width", t.tile_width);
  const int64_t both = meta_int(m, "tile_sample_min_overlap", -1);
  t.min_overlap_height = meta_int(m, "tile_sample_min_overlap_height", both > 0 ? both : t.min_overlap_height);
  t.min_overlap_width = meta_int(m, "tile_sample_min_overlap_width", both > 0 ? both : t.min_overlap_width);
  return t;
}

VideoVae& prepared(video_vae::VaePrecision precision, const test::GoldenCase& c) {
  VideoVae& vae = model_for(precision);
  bool tiling = true;
  const nlohmann::json& m = meta_of(c);
  if (m.contains("use_tiling") && m["use_tiling"].is_boolean()) tiling = m["use_tiling"].get<bool>();
  vae.set_tiling(tiling, tiles_of(c));
  return vae;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The golden README's input formula: a hash of the C-order flat index, unsigned 32-bit arithmetic.
uint32_t golden_hash(uint64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u + seed * 40503u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

Tensor hashed_pixels(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::kU8);
  auto* p = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>(golden_hash(i, seed) >> 24);
  return t;
}

Tensor hashed_latents(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  auto* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(static_cast<int32_t>(golden_hash(i, seed) >> 22) - 512) / 256.0f;
  return t;
}

Shape shape_from(const nlohmann::json& v) {
  Shape s;
  for (const auto& e : v) s.push_back(e.get<int64_t>());
  return s;
}

// The generated values at `*_check_index` must equal `*_check_values` (checks the formula).
void expect_formula(const std::string& name, const Tensor& generated, const Tensor& index,
                    const Tensor& values) {
  const std::vector<int64_t> idx = index.to_i64_vector();
  const Tensor flat = generated.view({generated.numel()});
  std::vector<float> got;
  for (int64_t i : idx) got.push_back(static_cast<float>(flat.item_as_double({i})));
  test::expect_equal(name, Tensor::from_f32(got, {static_cast<int64_t>(got.size())}),
                     values.to(DType::kF32));
}

void expect_layout(const std::string& axis, const video_vae::TileAxis& got, const Tensor& starts,
                   const Tensor& overlaps) {
  EXPECT_EQ(got.starts, starts.to_i64_vector()) << axis << " tile starts";
  EXPECT_EQ(got.overlaps, overlaps.to_i64_vector()) << axis << " tile overlaps";
  std::printf("  tile layout %s: %zu tiles, exact match %s\n", axis.c_str(), got.starts.size(),
              (got.starts == starts.to_i64_vector() && got.overlaps == overlaps.to_i64_vector())
                  ? "yes"
                  : "NO");
}

// Picks out[ :, frames][:, :, rows][:, :, :, cols] of x [C, F, H, W] (float32 CPU).
Tensor sample_grid(const Tensor& x, const std::vector<int64_t>& frames, const std::vector<int64_t>& rows,
                   const std::vector<int64_t>& cols) {
  const Tensor h = x.contiguous();
  const int64_t c = h.size(0), f = h.size(1), hh = h.size(2), ww = h.size(3);
  const float* p = h.data<float>();
  std::vector<float> out;
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t fi : frames)
      for (int64_t r : rows)
        for (int64_t col : cols) out.push_back(p[((ci * f + fi) * hh + r) * ww + col]);
  return Tensor::from_f32(out, {c, static_cast<int64_t>(frames.size()), static_cast<int64_t>(rows.size()),
                                static_cast<int64_t>(cols.size())});
}

Tensor sample_frames_u8(const Tensor& frames, const std::vector<int64_t>& fs, const std::vector<int64_t>& rows,
                        const std::vector<int64_t>& cols) {
  // frames [F, H, W, 3] uint8 -> [nf, nr, nc, 3]
  const int64_t hh = frames.size(1), ww = frames.size(2);
  const auto* p = frames.data<uint8_t>();
  Tensor out = Tensor::empty({static_cast<int64_t>(fs.size()), static_cast<int64_t>(rows.size()),
                              static_cast<int64_t>(cols.size()), 3},
                             DType::kU8);
  auto* o = out.data<uint8_t>();
  for (int64_t fi : fs)
    for (int64_t r : rows)
      for (int64_t col : cols)
        for (int c = 0; c < 3; ++c) *o++ = p[((fi * hh + r) * ww + col) * 3 + c];
  return out;
}

TEST(GoldenVideoVae, Encode) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "video_vae_encode");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("vae");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    std::printf("case %s\n", c.file.c_str());
    const auto f = c.open();
    VideoVae& vae = prepared(video_vae::VaePrecision::kF32, c);
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor pixels = f->tensor("pixels_uint8");
    const Tensor moments = vae.encode_moments(video_vae::normalize_pixels(pixels)).to(Device::cpu());
    std::printf("  encode %s -> %s in %.2f s (f32)\n", shape_str(pixels.shape()).c_str(),
                shape_str(moments.shape()).c_str(), seconds_since(t0));
    ASSERT_EQ(moments.shape(), f->tensor("moments").shape());
    test::expect_close("moments", moments, f->tensor("moments"), kF32Bound, kF32Bound);

    // The posterior and the pipeline helper, each where the case stores it.
    const video_vae::Posterior post = video_vae::posterior_from_moments(moments);
    auto compare_if_stored = [&](const char* name, const Tensor& got) {
      if (f->has(name)) test::expect_close(name, got, f->tensor(name), kF32Bound, kF32Bound);
    };
    compare_if_stored("posterior_mean", post.mean);
    compare_if_stored("posterior_logvar_clamped", post.logvar);
    compare_if_stored("posterior_std", post.std);
    if (const std::string missing = test::missing_tensors(
            *f, {"posterior_noise_seed42", "posterior_sample", "posterior_sample_fp16_roundtrip",
                 "latents_normalized", "encode_vae_condition_output"});
        !missing.empty()) {
      std::printf("  posterior sample and pipeline helper not compared (lacks %s)\n", missing.c_str());
      continue;
    }
    const Tensor noise = f->tensor("posterior_noise_seed42");
    const Tensor sample = video_vae::posterior_sample(post, noise);
    test::expect_close("posterior_sample", sample, f->tensor("posterior_sample"), kF32Bound, kF32Bound);

    // The float16 round trip and normalization from the golden sample: exact arithmetic, so the
    // stage is checked without the encoder's last-ulp noise moving values across a float16 tie.
    const Tensor golden_rt = f->tensor("posterior_sample").to(DType::kF16).to(DType::kF32);
    test::expect_close("posterior_sample_fp16_roundtrip (from golden sample)", golden_rt,
                       f->tensor("posterior_sample_fp16_roundtrip"), 0.0, 0.0);
    test::expect_close("latents_normalized (from golden sample)", vae.normalize_latents(golden_rt),
                       f->tensor("latents_normalized"), kF32Bound, kF32Bound);

    // End to end through the pipeline helper. A float16 rounding can flip by one float16 step
    // where our sample differs from the reference's in the last float32 bit; count such flips.
    const Tensor ours = video_vae::encode_condition(vae, pixels, noise);
    const test::Metrics m = test::compare(ours, f->tensor("encode_vae_condition_output"));
    const Tensor our_rt = sample.to(DType::kF16).to(DType::kF32);
    const int64_t flips = test::count_bit_mismatches(our_rt, f->tensor("posterior_sample_fp16_roundtrip"));
    std::printf("  encode_vae_condition_output (end to end): %s, float16 flips %lld of %lld\n",
                test::format_metrics(m).c_str(), static_cast<long long>(flips),
                static_cast<long long>(our_rt.numel()));
    EXPECT_LE(flips, our_rt.numel() / 100) << "more float16 flips than last-ulp noise explains";
    if (flips == 0) {
      EXPECT_LE(m.rel_max, kF32Bound);
      EXPECT_LE(m.rel_l2, kF32Bound);
    }
    test::expect_close("encode_vae_condition_output vs latents_normalized (golden self-check)",
                       f->tensor("encode_vae_condition_output"), f->tensor("latents_normalized"), 0.0, 0.0);
  }
}

TEST(GoldenVideoVae, Decode) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "video_vae_decode");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("vae");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    std::printf("case %s\n", c.file.c_str());
    const auto f = c.open();
    VideoVae& vae = prepared(video_vae::VaePrecision::kF32, c);
    const Tensor z = vae.denormalize_latents(f->tensor("latents_normalized"));
    test::expect_close("latents_denormalized", z, f->tensor("latents_denormalized"), kF32Bound, kF32Bound);
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor decoded = vae.decode(f->tensor("latents_denormalized")).to(Device::cpu());
    std::printf("  decode %s -> %s in %.2f s (f32)\n", shape_str(z.shape()).c_str(),
                shape_str(decoded.shape()).c_str(), seconds_since(t0));
    ASSERT_EQ(decoded.shape(), f->tensor("decoded_raw").shape());
    test::expect_close("decoded_raw (f32)", decoded, f->tensor("decoded_raw"), kF32Bound, kF32Bound);
    if (f->has("frames_uint8")) {
      const Tensor frames = video_vae::frames_to_uint8(video_vae::denormalize_pixels(decoded));
      test::expect_max_abs("frames_uint8 (f32)", frames.select(0, 0), f->tensor("frames_uint8"), kUint8Bound);
    }

    // The reference's CUDA recipe (fp16 autocast) emulated on the CPU: distance from float32.
    VideoVae& half = prepared(video_vae::VaePrecision::kF16Autocast, c);
    const Tensor decoded16 = half.decode(f->tensor("latents_denormalized")).to(Device::cpu());
    test::expect_close("decoded_raw (f16-autocast policy vs f32 golden)", decoded16,
                       f->tensor("decoded_raw"), -1.0, kF16SanityL2);
  }
}

TEST(GoldenVideoVae, EncodeSampled) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "video_vae_encode_sampled");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("vae");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    std::printf("case %s\n", c.file.c_str());
    const auto f = c.open();
    const nlohmann::json& m = meta_of(c);
    ASSERT_TRUE(m.contains("pixels_shape") && m.contains("seed")) << "meta lacks pixels_shape/seed";
    const Tensor pixels = hashed_pixels(shape_from(m["pixels_shape"]), m["seed"].get<uint32_t>());
    expect_formula("pixels formula", pixels, f->tensor("pixels_check_index"), f->tensor("pixels_check_values"));

    VideoVae& vae = prepared(video_vae::VaePrecision::kF32, c);
    const TileSettings& ts = vae.options().tiles;
    const int64_t r = vae.config().spatial_ratio();
    expect_layout("y", video_vae::split_tiles(pixels.size(3), ts.tile_height, ts.min_overlap_height, r),
                  f->tensor("tile_starts_y"), f->tensor("tile_overlaps_y"));
    expect_layout("x", video_vae::split_tiles(pixels.size(4), ts.tile_width, ts.min_overlap_width, r),
                  f->tensor("tile_starts_x"), f->tensor("tile_overlaps_x"));

    const auto t0 = std::chrono::steady_clock::now();
    const Tensor moments = vae.encode_moments(video_vae::normalize_pixels(pixels)).to(Device::cpu());
    std::printf("  encode %s -> %s in %.2f s (f32)\n", shape_str(pixels.shape()).c_str(),
                shape_str(moments.shape()).c_str(), seconds_since(t0));
    if (m.contains("moments_shape")) {
      EXPECT_EQ(moments.shape(), shape_from(m["moments_shape"]));
    }
    const Tensor item = moments.select(0, 0);
    std::vector<int64_t> all_frames;
    for (int64_t i = 0; i < item.size(1); ++i) all_frames.push_back(i);
    const Tensor got = sample_grid(item, all_frames, f->tensor("sample_rows").to_i64_vector(),
                                   f->tensor("sample_cols").to_i64_vector());
    test::expect_close("moments_sampled (f32)", got, f->tensor("moments_sampled"), kF32Bound, kF32Bound);
  }
}

TEST(GoldenVideoVae, DecodeSampled) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "video_vae_decode_sampled");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("vae");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    std::printf("case %s\n", c.file.c_str());
    const auto f = c.open();
    const nlohmann::json& m = meta_of(c);
    ASSERT_TRUE(m.contains("latents_normalized_shape") && m.contains("seed"))
        << "meta lacks latents_normalized_shape/seed";
    const Tensor zn = hashed_latents(shape_from(m["latents_normalized_shape"]), m["seed"].get<uint32_t>());
    expect_formula("latents formula", zn, f->tensor("latents_check_index"), f->tensor("latents_check_values"));

    VideoVae& vae = prepared(video_vae::VaePrecision::kF32, c);
    const TileSettings& ts = vae.options().tiles;
    const int64_t r = vae.config().spatial_ratio();
    expect_layout("y", video_vae::split_tiles(zn.size(3) * r, ts.tile_height, ts.min_overlap_height, r),
                  f->tensor("tile_starts_y"), f->tensor("tile_overlaps_y"));
    expect_layout("x", video_vae::split_tiles(zn.size(4) * r, ts.tile_width, ts.min_overlap_width, r),
                  f->tensor("tile_starts_x"), f->tensor("tile_overlaps_x"));

    const auto t0 = std::chrono::steady_clock::now();
    const Tensor decoded = vae.decode(vae.denormalize_latents(zn)).to(Device::cpu());
    std::printf("  decode %s -> %s in %.2f s (f32)\n", shape_str(zn.shape()).c_str(),
                shape_str(decoded.shape()).c_str(), seconds_since(t0));
    if (m.contains("num_frames")) {
      EXPECT_EQ(decoded.size(2), m["num_frames"].get<int64_t>());
    }
    const std::vector<int64_t> fs = f->tensor("sample_frames").to_i64_vector();
    const std::vector<int64_t> rows = f->tensor("sample_rows").to_i64_vector();
    const std::vector<int64_t> cols = f->tensor("sample_cols").to_i64_vector();
    const Tensor item = decoded.select(0, 0);
    test::expect_close("decoded_raw_sampled (f32)", sample_grid(item, fs, rows, cols),
                       f->tensor("decoded_raw_sampled"), kF32Bound, kF32Bound);
    const Tensor frames = video_vae::frames_to_uint8(video_vae::denormalize_pixels(decoded)).select(0, 0);
    test::expect_max_abs("frames_uint8_sampled (f32)", sample_frames_u8(frames, fs, rows, cols),
                         f->tensor("frames_uint8_sampled"), kUint8Bound);
  }
}

}  // namespace
}  // namespace h3
