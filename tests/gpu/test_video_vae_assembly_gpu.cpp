// The video VAE's device assembly kernels (ops/cuda/vae_assemble.h) against their CPU twins, bit
// for bit: the windowed cross-fade written into the video, and the decoded video to uint8 frames
// (frames_to_uint8(denormalize_pixels(x)) on the host, including NaN, out-of-range values and exact
// rounding ties). Skips visibly without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "models/video_vae/video_vae_assembly.h"
#include "models/video_vae/video_vae_model.h"
#include "models/video_vae/video_vae_tiling.h"
#include "ops/cuda/vae_assemble.h"
#include "ops/ops.h"
#include "support/golden.h"

namespace h3 {
namespace {

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

TEST(VideoVaeAssemblyGpu, AssembleFramesMatchesCpu) {
  H3_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  for (const DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int64_t c = 3, fc = 28, fp = 5, h = 24, w = 40;
    std::vector<float> cv(static_cast<size_t>(c * fc * h * w)), pv(static_cast<size_t>(c * fp * h * w));
    uint64_t s = 12345;
    auto next = [&]() {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 6.0 - 3.0);
    };
    for (float& v : cv) v = next();
    for (float& v : pv) v = next();
    const Tensor clip = Tensor::from_f32(cv, {c, fc, h, w}, dt);
    const Tensor prev = Tensor::from_f32(pv, {c, fp, h, w}, dt);
    std::vector<float> wa, wb;
    video_vae::blend_weights(5, dt, &wa, &wb);
    Tensor ref = Tensor::zeros({c, 40, h, w}, DType::kF32);
    video_vae::assemble_frames(ref, 7, clip, 3, 17, &prev, 0, wa, wb);
    const Tensor clip_d = clip.to(gpu), prev_d = prev.to(gpu);
    Tensor got = Tensor::zeros({c, 40, h, w}, DType::kF32, gpu);
    video_vae::assemble_frames(got, 7, clip_d, 3, 17, &prev_d, 0, wa, wb);
    // Plain copy (the last window's tail) too.
    video_vae::assemble_frames(ref, 30, prev, 0, 5, nullptr, 0, {}, {});
    video_vae::assemble_frames(got, 30, prev_d, 0, 5, nullptr, 0, {}, {});
    std::string first;
    const int64_t bad = test::count_bit_mismatches(got.to(Device::cpu()), ref, &first);
    std::printf("assemble %s: %lld of %lld values differ %s\n", dtype_name(dt), static_cast<long long>(bad),
                static_cast<long long>(ref.numel()), first.c_str());
    EXPECT_EQ(bad, 0);
    // The same frames into a video held in the windows' dtype (decode()'s CUDA layout).
    Tensor narrow = Tensor::zeros({c, 40, h, w}, dt, gpu);
    video_vae::assemble_frames(narrow, 7, clip_d, 3, 17, &prev_d, 0, wa, wb);
    video_vae::assemble_frames(narrow, 30, prev_d, 0, 5, nullptr, 0, {}, {});
    const int64_t bad_narrow = test::count_bit_mismatches(narrow.to(Device::cpu()).to(DType::kF32), ref, &first);
    std::printf("assemble %s into %s: %lld values differ %s\n", dtype_name(dt), dtype_name(dt),
                static_cast<long long>(bad_narrow), first.c_str());
    EXPECT_EQ(bad_narrow, 0);
  }
}

// The one-kernel stitch against stitch_tiles' op composition on the same device, bit for bit:
// each float dtype, overlaps that differ per boundary (as the release's 96/80/80 and 80/.../64),
// an overlap larger than a neighbour, one row of tiles, and a single tile.
TEST(VideoVaeAssemblyGpu, StitchKernelMatchesComposition) {
  H3_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  struct Grid {
    int64_t ny, nx;
    std::vector<int64_t> heights, widths, yo, xo;
  };
  const Grid grids[] = {
      {3, 4, {32, 32, 32}, {40, 40, 40, 40}, {12, 8}, {10, 6, 16}},
      {2, 3, {24, 16}, {20, 20, 12}, {20}, {4, 16}},  // overlaps past the smaller tile: min() applies
      {1, 5, {16}, {24, 24, 24, 24, 24}, {}, {8, 8, 8, 4}},
      {1, 1, {20}, {28}, {}, {}},
  };
  for (const DType dt : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (const Grid& g : grids) {
      uint64_t s = 777;
      auto next = [&]() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 4.0 - 2.0);
      };
      std::vector<std::vector<Tensor>> rows(static_cast<size_t>(g.ny));
      std::vector<Tensor> flat;
      for (int64_t i = 0; i < g.ny; ++i)
        for (int64_t j = 0; j < g.nx; ++j) {
          std::vector<float> v(static_cast<size_t>(3 * 5 * g.heights[i] * g.widths[j]));
          for (float& x : v) x = next();
          const Tensor t = Tensor::from_f32(v, {3, 5, g.heights[i], g.widths[j]}, dt).to(gpu);
          rows[i].push_back(t);
          flat.push_back(t);
        }
      const Tensor ref = video_vae::stitch_tiles(rows, g.yo, g.xo).to(Device::cpu());
      const Tensor got = ops::cuda::vae_stitch_tiles(flat, g.ny, g.nx, g.yo, g.xo).to(Device::cpu());
      ASSERT_EQ(got.shape(), ref.shape());
      std::string first;
      const int64_t bad = test::count_bit_mismatches(got, ref, &first);
      std::printf("stitch %s %lldx%lld tiles -> %s: %lld values differ %s\n", dtype_name(dt),
                  static_cast<long long>(g.ny), static_cast<long long>(g.nx), shape_str(ref.shape()).c_str(),
                  static_cast<long long>(bad), first.c_str());
      EXPECT_EQ(bad, 0);
    }
  }
  // A tile that does not fit the grid is refused, naming it.
  const Tensor a = Tensor::zeros({3, 2, 8, 8}, DType::kF16, gpu), b = Tensor::zeros({3, 2, 8, 6}, DType::kF16, gpu);
  EXPECT_THROW(ops::cuda::vae_stitch_tiles({a, b, b, a}, 2, 2, {2}, {2}), Error);
}

TEST(VideoVaeAssemblyGpu, Uint8FramesMatchHostConversion) {
  H3_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  const int64_t b = 2, f = 3, h = 17, w = 33;
  std::vector<float> v(static_cast<size_t>(b * 3 * f * h * w));
  uint64_t s = 99;
  for (size_t i = 0; i < v.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t c = static_cast<int64_t>(i / static_cast<size_t>(f * h * w)) % 3;
    const double u = static_cast<double>(s >> 11) * 0x1.0p-53;
    if (i % 5 == 0) {
      // Exact ties: pixel (k + 0.5)/255 mapped back through the normalization.
      const float target = (static_cast<float>(i % 255) + 0.5f) / 255.0f;
      v[i] = (target - mean[c]) / stdv[c];
    } else {
      v[i] = static_cast<float>(u * 6.0 - 3.0);  // well outside [0, 1] after denormalization too
    }
  }
  v[1] = std::numeric_limits<float>::quiet_NaN();
  v[2] = std::numeric_limits<float>::infinity();
  v[3] = -std::numeric_limits<float>::infinity();
  for (const DType dt : {DType::kF32, DType::kF16}) {
    const Tensor x = Tensor::from_f32(v, {b, 3, f, h, w}, dt);
    const Tensor ref = video_vae::frames_to_uint8(video_vae::denormalize_pixels(x));
    unsetenv("H3_VAE_DEVICE_UINT8");
    const Tensor got = video_vae::decoded_to_uint8(x.to(gpu));
    ASSERT_EQ(got.shape(), ref.shape());
    EXPECT_TRUE(got.device().is_cpu());
    int64_t bad = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) bad += got.data<uint8_t>()[i] != ref.data<uint8_t>()[i];
    std::printf("uint8 frames from %s: %lld of %lld bytes differ\n", dtype_name(dt), static_cast<long long>(bad),
                static_cast<long long>(ref.numel()));
    EXPECT_EQ(bad, 0);
  }
}

// The decoder's fused LayerScale residual against the op composition it replaces, on the GPU.
TEST(VideoVaeAssemblyGpu, LayerScaleResidualMatchesComposition) {
  H3_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t rows = 301, cols = 200;
  std::vector<float> xv(static_cast<size_t>(rows * cols)), bv(xv.size()), sv(static_cast<size_t>(cols));
  uint64_t s = 7;
  auto next = [&]() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 8.0 - 4.0);
  };
  for (float& v : xv) v = next();
  for (float& v : bv) v = next();
  for (float& v : sv) v = next() * 0.01f;
  const Tensor x = Tensor::from_f32(xv, {rows, cols}, DType::kF32).to(gpu);
  const Tensor scale = Tensor::from_f32(sv, {cols}, DType::kF32).to(gpu);
  for (const DType dt : {DType::kF32, DType::kF16}) {
    const Tensor br = Tensor::from_f32(bv, {rows, cols}, dt).to(gpu);
    const Tensor ref = ops::add(x, ops::mul(dt == DType::kF32 ? br : ops::cast(br, DType::kF32), scale));
    const Tensor got = ops::cuda::vae_layerscale_residual(x, br, scale);
    std::string first;
    const int64_t bad = test::count_bit_mismatches(got.to(Device::cpu()), ref.to(Device::cpu()), &first);
    std::printf("layerscale residual, %s branch: %lld of %lld values differ %s\n", dtype_name(dt),
                static_cast<long long>(bad), static_cast<long long>(ref.numel()), first.c_str());
    EXPECT_EQ(bad, 0);
  }
  EXPECT_THROW(ops::cuda::vae_layerscale_residual(x, x.slice(0, 0, 5).contiguous(), scale), Error);
}

}  // namespace
}  // namespace h3
