// h3 bench vsa: times VSA-H3 attention (h3_dit_spec.md §5) on the GPU at the production geometry of a
// 1344x768x124 T2VA request (256 text + 414 audio + 37,296 video rows, grid 37x24x42, prefix segments
// (text, cond, audio) as the DiT builds them), 56 heads x 128, random bf16 q/k/v/gate: the whole op
// (pool + scores + top-k + compression + fine), each stage, and our dense attention on the same shape.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/status.h"
#include "ops/cuda/vsa_cuda.h"
#include "ops/ops.h"
#include "ops/vsa.h"

namespace {

using h3::ErrorCode;
using h3::Tensor;
namespace ops = h3::ops;

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  H3_CHECK(!v.empty() && v.size() < 12 && v.find_first_not_of("0123456789") == std::string::npos,
           ErrorCode::kInvalidArgument, flag, " expects a non-negative integer, got '", v, "'");
  const int64_t x = std::stoll(v);
  H3_CHECK(x >= lo && x <= hi, ErrorCode::kInvalidArgument, flag, " must be in [", lo, ", ", hi, "], got ", x);
  return x;
}

double parse_fraction(const std::string& flag, const std::string& v) {
  double x = -1.0;
  size_t used = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  H3_CHECK(used == v.size() && !v.empty() && x >= 0.0 && x < 1.0, ErrorCode::kInvalidArgument, flag,
           " expects a number in [0, 1), got '", v, "'");
  return x;
}

void print_help() {
  std::printf(
      "usage: h3 bench vsa [options]\n\n"
      "Times VSA-H3 attention on the GPU with random bf16 q, k, v and gate. Default: the packed rows of\n"
      "a 1344x768x124 T2VA request (256 text + 414 audio + 37,296 video rows, grid 37x24x42), 56 x 128\n"
      "heads, tile 64, sparsity 0.9, exempt mode, with the gate branch; and dense attention on the same\n"
      "q, k, v for comparison.\n\n"
      "  --text-rows T, --cond-rows C, --audio-rows A   prefix segments (default 256, 0, 414)\n"
      "  --grid T H W        video grid in patches (default 37 24 42)\n"
      "  --heads N, --head-dim D                       (default 56, 128)\n"
      "  --tile E            64 or 256 (default 64)\n"
      "  --sparsity s        in [0, 1) (default 0.9); --mode exempt|compete (default exempt)\n"
      "  --no-gate           no compression branch\n"
      "  --iters n           timed calls (default 5); --warmup n (default 1)\n"
      "  --no-dense          skip the dense comparison\n");
}

// Uniform [-scale, scale) bf16 values from a counter-based hash (fast, any number of threads).
Tensor random_bf16(const h3::Shape& shape, uint64_t seed, float scale) {
  Tensor t = Tensor::empty(shape, h3::DType::kBF16);
  uint16_t* p = t.data<uint16_t>();
  const int64_t n = t.numel();
  const int threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 16u));
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([=] {
      for (int64_t i = n * w / threads; i < n * (w + 1) / threads; ++i) {
        uint64_t z = (static_cast<uint64_t>(i) + seed * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
        z ^= z >> 31;
        z *= 0x94D049BB133111EBull;
        z ^= z >> 29;
        const float u = static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0) * scale;
        uint32_t bits;
        std::memcpy(&bits, &u, 4);
        p[i] = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench_vsa(const std::vector<std::string>& args) {
  int64_t text = 256, cond = 0, audio = 414, heads = 56, head_dim = 128;
  int64_t grid[3] = {37, 24, 42};
  int tile = 64, iters = 5, warmup = 1;
  double sparsity = 0.9;
  ops::VsaMode mode = ops::VsaMode::kExempt;
  bool gate = true, dense = true;
  constexpr int64_t kBig = int64_t{1} << 24;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    auto value = [&]() -> const std::string& {
      H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, f, " needs a value");
      return args[++i];
    };
    if (f == "--help" || f == "-h") {
      print_help();
      return 0;
    } else if (f == "--text-rows") {
      text = parse_int(f, value(), 0, kBig);
    } else if (f == "--cond-rows") {
      cond = parse_int(f, value(), 0, kBig);
    } else if (f == "--audio-rows") {
      audio = parse_int(f, value(), 0, kBig);
    } else if (f == "--grid") {
      for (int64_t& g : grid) g = parse_int(f, value(), 1, 4096);
    } else if (f == "--heads") {
      heads = parse_int(f, value(), 1, 1024);
    } else if (f == "--head-dim") {
      head_dim = parse_int(f, value(), 8, 256);
    } else if (f == "--tile") {
      tile = static_cast<int>(parse_int(f, value(), 1, 1024));
    } else if (f == "--sparsity") {
      sparsity = parse_fraction(f, value());
    } else if (f == "--mode") {
      mode = ops::parse_vsa_mode(value());
    } else if (f == "--no-gate") {
      gate = false;
    } else if (f == "--iters") {
      iters = static_cast<int>(parse_int(f, value(), 1, 1000));
    } else if (f == "--warmup") {
      warmup = static_cast<int>(parse_int(f, value(), 0, 1000));
    } else if (f == "--no-dense") {
      dense = false;
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", f, "' (see h3 bench vsa --help)");
    }
  }
  H3_CHECK(h3::cuda_available(), ErrorCode::kUnsupported,
           "h3 bench vsa needs a CUDA device (none in this build or machine)");
  const int64_t S = text + cond + audio + grid[0] * grid[1] * grid[2];
  const ops::VsaGeometry geo = ops::build_vsa_geometry(tile, {text, cond, audio}, grid, S);
  const h3::Device dev = h3::Device::cuda(0);
  const h3::Shape shape = {S, heads, head_dim};
  std::fprintf(stderr, "bench vsa: generating random q, k, v%s (%lld x %lld x %lld bf16)\n", gate ? ", gate" : "",
               static_cast<long long>(S), static_cast<long long>(heads), static_cast<long long>(head_dim));
  const Tensor q = random_bf16(shape, 1, 1.0f).to(dev);
  const Tensor k = random_bf16(shape, 2, 1.0f).to(dev);
  const Tensor v = random_bf16(shape, 3, 1.0f).to(dev);
  const Tensor g = gate ? random_bf16(shape, 4, 0.1f).to(dev) : Tensor();
  ops::VsaOptions opt;
  opt.sparsity = sparsity;
  opt.mode = mode;

  // Kept tiles from one traced call: density and the fine branch's FLOPs (2 per multiply-add).
  ops::VsaTrace trace;
  (void)ops::cuda::vsa_attention(q, k, v, gate ? &g : nullptr, geo, opt, &trace);
  const Tensor mask = trace.mask.to(h3::Device::cpu());
  const uint8_t* m = mask.data<uint8_t>();
  const int64_t n = geo.num_tiles();
  double pairs = 0.0;
  int64_t kept = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (m[(h * n + i) * n + j]) {
          pairs += static_cast<double>(geo.tile_sizes[i]) * static_cast<double>(geo.tile_sizes[j]);
          ++kept;
        }
  const double density = pairs / (static_cast<double>(heads) * static_cast<double>(S) * static_cast<double>(S));
  const double fine_flops = 4.0 * pairs * static_cast<double>(head_dim);
  const double dense_flops = 4.0 * static_cast<double>(S) * static_cast<double>(S) * static_cast<double>(heads * head_dim);

  h3::Stream stream;
  h3::Event e0 = h3::Event::create(0), e1 = h3::Event::create(0);
  std::vector<double> whole, fine, layout, pool, scores, topk, comp;
  bool fine_hopper = false;
  for (int it = 0; it < warmup + iters; ++it) {
    ops::cuda::VsaStageTimes st;
    e0.record(stream);
    (void)ops::cuda::vsa_attention(q, k, v, gate ? &g : nullptr, geo, opt, nullptr, it >= warmup ? &st : nullptr);
    e1.record(stream);
    const double ms = h3::Event::elapsed_ms(e0, e1);
    if (it < warmup) continue;
    whole.push_back(ms);
    fine_hopper = st.fine_hopper;
    fine.push_back(st.fine_ms);
    layout.push_back(st.layout_ms);
    pool.push_back(st.pool_ms);
    scores.push_back(st.scores_ms);
    topk.push_back(st.topk_ms);
    comp.push_back(st.compress_ms);
  }
  // The whole op untraced and without stage events: the figure the targets are about.
  std::vector<double> plain;
  for (int it = 0; it < iters; ++it) {
    e0.record(stream);
    (void)ops::vsa_attention(q, k, v, gate ? &g : nullptr, geo, opt);
    e1.record(stream);
    plain.push_back(h3::Event::elapsed_ms(e0, e1));
  }
  double dense_ms = 0.0;
  if (dense) {
    std::vector<double> d;
    for (int it = 0; it < warmup + std::min(iters, 3); ++it) {
      e0.record(stream);
      (void)ops::attention(q, k, v);
      e1.record(stream);
      if (it >= warmup) d.push_back(h3::Event::elapsed_ms(e0, e1));
    }
    dense_ms = median(d);
  }

  const double whole_ms = median(plain), fine_ms = median(fine);
  std::printf("h3 bench vsa: %s, %lld rows = %lld text + %lld cond + %lld audio + %lldx%lldx%lld video, "
              "%lld x %lld heads, bf16\n",
              dev.str().c_str(), static_cast<long long>(S), static_cast<long long>(text),
              static_cast<long long>(cond), static_cast<long long>(audio), static_cast<long long>(grid[0]),
              static_cast<long long>(grid[1]), static_cast<long long>(grid[2]), static_cast<long long>(heads),
              static_cast<long long>(head_dim));
  std::printf("vsa: sparsity %.3f, %s, k_vid %lld, gate %s; %s\n", sparsity,
              mode == ops::VsaMode::kExempt ? "exempt" : "compete",
              static_cast<long long>(ops::vsa_topk(sparsity, geo.num_video_tiles)), gate ? "on" : "off",
              geo.summary().c_str());
  std::printf("kept tile pairs %lld of %lld; selected density %.4f (row pairs)\n\n", static_cast<long long>(kept),
              static_cast<long long>(heads * n * n), density);
  std::printf("| metric (median of %d) | ms | TFLOP/s |\n|---|---|---|\n", iters);
  std::printf("| VSA attention, whole op | %.3f | %.1f |\n", whole_ms, fine_flops / (whole_ms * 1e9));
  std::printf("| ... with stage events | %.3f | |\n", median(whole));
  std::printf("| tile-ordered copies of q/k/v | %.3f | |\n", median(layout));
  std::printf("| pool q/k/v | %.3f | |\n", median(pool));
  std::printf("| pooled scores | %.3f | |\n", median(scores));
  std::printf("| top-k mask + lists | %.3f | |\n", median(topk));
  std::printf("| compression branch | %.3f | |\n", median(comp));
  std::printf("| fine branch (+ fused gate), %s | %.3f | %.1f |\n",
              fine_hopper ? "Hopper wgmma + TMA kernel" : "mma.sync kernel (H3_VSA_HOPPER=0 or not eligible)",
              fine_ms, fine_flops / (fine_ms * 1e9));
  if (dense) {
    std::printf("| dense attention (ops::attention) | %.3f | %.1f |\n", dense_ms, dense_flops / (dense_ms * 1e9));
    std::printf("\nVSA / dense: %.1f%% (target <= 20%%); whole op %.2f ms (target < 19.3 ms)\n",
                100.0 * whole_ms / dense_ms, whole_ms);
  }
  return 0;
}

}  // namespace

H3_COMMAND("bench vsa", "time VSA-H3 attention on the GPU (stages, TFLOP/s, against dense)", run_bench_vsa);
