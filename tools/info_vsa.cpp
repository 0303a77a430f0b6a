// `h3 info --vsa`: the VSA-H3 tiling of a request geometry (h3_dit_spec.md §5.2), without a model.
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/vsa.h"
#include "pipeline/geometry.h"

namespace h3::cli {

namespace {

int64_t parse_int(const std::string& flag, const std::string& value) {
  H3_CHECK(!value.empty() && value.find_first_not_of("0123456789") == std::string::npos,
           ErrorCode::kInvalidArgument, flag, " expects a non-negative integer, got '", value, "'");
  try {
    return std::stoll(value);
  } catch (const std::exception&) {
    fail(ErrorCode::kInvalidArgument, flag, " value '", value, "' is out of range");
  }
}

}  // namespace

int run_info_vsa(const std::vector<std::string>& args) {
  int64_t height = 768, width = 1344, frames = 124, text = 300, cond_frames = 0;
  std::vector<int> tiles = {64, 256};
  std::vector<double> sparsities = {0.5, 0.9, 0.95};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--vsa") continue;
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: h3 info --vsa [--height H] [--width W] [--num-frames F] [--text-tokens N]\n"
          "                     [--keyframes K] [--vsa-tile-size 64|256]\n\n"
          "Prints the VSA-H3 tiling of a request: prefix and video tiles, padded length and k\n"
          "per sparsity. Defaults: 768x1344, 124 frames, 300 text rows, no keyframes, both tile\n"
          "sizes.\n");
      return 0;
    }
    H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, a, " needs a value");
    const std::string& v = args[++i];
    if (a == "--height") {
      height = parse_int(a, v);
    } else if (a == "--width") {
      width = parse_int(a, v);
    } else if (a == "--num-frames") {
      frames = parse_int(a, v);
    } else if (a == "--text-tokens") {
      text = parse_int(a, v);
    } else if (a == "--keyframes") {
      cond_frames = parse_int(a, v);
      H3_CHECK(cond_frames <= 2, ErrorCode::kInvalidArgument, "--keyframes is 0, 1 or 2, got ", v);
    } else if (a == "--vsa-tile-size") {
      const int64_t t = parse_int(a, v);
      H3_CHECK(t == 64 || t == 256, ErrorCode::kInvalidArgument,
               "--vsa-tile-size must be 64 or 256, got ", v);
      tiles = {static_cast<int>(t)};
    } else {
      fail(ErrorCode::kInvalidArgument, "unknown option '", a, "' for h3 info --vsa");
    }
  }
  H3_CHECK(height > 0 && width > 0 && height % 32 == 0 && width % 32 == 0,
           ErrorCode::kInvalidArgument, "--height/--width must be positive multiples of 32, got ",
           height, "x", width);
  const pipeline::FrameCount fc = pipeline::resolve_num_frames(frames, /*allow_any_duration=*/true);
  if (!fc.note.empty()) std::printf("note: %s\n", fc.note.c_str());
  const pipeline::TargetGeometry tg =
      pipeline::make_target_geometry(pipeline::Canvas{height, width}, fc.frames);
  const int64_t cond_rows = cond_frames * tg.rows_per_frame();
  const int64_t grid[3] = {tg.latent_frames, tg.latent_height / 2, tg.latent_width / 2};
  const int64_t seq = text + cond_rows + tg.audio_rows() + tg.video_rows();
  std::printf("request: %lldx%lld, %lld frames -> latents %lldx%lldx%lld, video grid %lldx%lldx%lld\n",
              static_cast<long long>(height), static_cast<long long>(width),
              static_cast<long long>(fc.frames), static_cast<long long>(tg.latent_frames),
              static_cast<long long>(tg.latent_height), static_cast<long long>(tg.latent_width),
              static_cast<long long>(grid[0]), static_cast<long long>(grid[1]),
              static_cast<long long>(grid[2]));
  std::printf("packed rows: %lld = %lld text + %lld condition + %lld audio + %lld video\n",
              static_cast<long long>(seq), static_cast<long long>(text),
              static_cast<long long>(cond_rows), static_cast<long long>(tg.audio_rows()),
              static_cast<long long>(tg.video_rows()));
  for (int tile : tiles) {
    const ops::VsaGeometry g =
        ops::build_vsa_geometry(tile, {text, cond_rows, tg.audio_rows()}, grid, seq);
    std::printf("%s\n  prefix tile sizes:", g.summary().c_str());
    for (int64_t i = 0; i < g.num_prefix_tiles; ++i) {
      std::printf(" %lld", static_cast<long long>(g.tile_sizes[i]));
    }
    std::printf("\n  k per query tile:");
    for (double s : sparsities) {
      std::printf(" %.2f -> %lld", s, static_cast<long long>(ops::vsa_topk(s, g.num_video_tiles)));
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace h3::cli
