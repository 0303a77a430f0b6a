// h3 bench vae: times a video VAE decode with deterministic random weights, by default at the
// released dimensions and the full 1344x768x124 request (latents 24x37x48x84: 7 windows x 28 tiles
// = 196 decoder calls, h3_components_spec.md §2.11), and reports seconds and peak memory.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/part_timer.h"
#include "core/status.h"
#include "models/audio_vae/audio_vae_model.h"
#include "models/video_vae/video_vae_assembly.h"
#include "models/video_vae/video_vae_model.h"
#include "ops/ops.h"
#include "pipeline/random_weights.h"

namespace {

using h3::ErrorCode;
namespace vv = h3::video_vae;

struct BenchArgs {
  std::string device;
  std::string precision;
  bool small = false;
  bool tiling = true;
  int64_t t = -1, h = -1, w = -1;
  int repeat = 1;
  int warmup = 0;
  int64_t tile_batch = 0;  // 0: automatic (VideoVaeOptions::tile_batch)
  bool profile = false;
  bool stream = false;
  bool f32_output = false;  // widen the video to float32 on the device (default: decoder dtype)
  uint64_t seed = 0;
  h3::ops::AttentionKernel attention = h3::ops::AttentionKernel::kAuto;
  bool fp8 = false;
  std::string audio_vae;  // an audio_vae/ folder: also time its decode of the same request
};

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  H3_CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos,
           ErrorCode::kInvalidArgument, flag, " expects a non-negative integer, got '", v, "'");
  int64_t x = 0;
  try {
    x = std::stoll(v);
  } catch (const std::exception&) {
    h3::fail(ErrorCode::kInvalidArgument, flag, " value '", v, "' is out of range");
  }
  H3_CHECK(x >= lo && x <= hi, ErrorCode::kInvalidArgument, flag, " must be in [", lo, ", ", hi,
           "], got ", x);
  return x;
}

void parse_latents(const std::string& v, BenchArgs& a) {
  // "T,h,w" latent frames, rows, columns.
  std::vector<int64_t> parts;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t comma = v.find(',', start);
    const std::string piece = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    parts.push_back(parse_int("--latents", piece, 1, 4096));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  H3_CHECK(parts.size() == 3, ErrorCode::kInvalidArgument,
           "--latents expects T,h,w (latent frames, rows, columns), got '", v, "'");
  a.t = parts[0], a.h = parts[1], a.w = parts[2];
}

void print_help() {
  std::printf(
      "usage: h3 bench vae [options]\n\n"
      "Decodes random latents with a video VAE of deterministic random weights and reports the\n"
      "time and peak memory. Default: released dimensions (36-layer ViT decoder, width 2048) and\n"
      "the 1344x768x124 request (latents 37x48x84), released tiling (256 px tiles, >= 64 px\n"
      "overlap).\n\n"
      "  --device D        cuda, cuda:N or cpu (default: cuda when available)\n"
      "  --precision P     f16-autocast (the reference's CUDA recipe; default on cuda) or f32\n"
      "  --small           tiny dimensions (the golden tiny-h3 VAE) and latents 7x24x40\n"
      "                    (384x640x22): a decode that runs on a CPU in seconds\n"
      "  --latents T,h,w   latent frames, rows and columns (pixels: 16h x 16w, frames 17n+5\n"
      "                    for 5n+2)\n"
      "  --no-tiling       decode whole windows without spatial tiles\n"
      "  --tile-batch N    tiles of a window decoded in one batched forward (default 0:\n"
      "                    automatic, as many as a 1 GiB activation budget allows on CUDA, 4 at\n"
      "                    the released tiles; 1: one at a time)\n"
      "  --vae-attention K the decoder's attention kernel: auto (default), hopper, mma or generic\n"
      "  --vae-dtype D     f16 (default) or fp8: the decoder blocks' GEMMs in E4M3; then also\n"
      "                    decodes with the f16 weights and reports the PSNR per frame between\n"
      "                    the two\n"
      "  --profile         one more decode with the device synchronized at every stage boundary,\n"
      "                    reporting seconds per stage (GEMMs, attention, norms, other, stitch,\n"
      "                    blend)\n"
      "  --stream          time the streaming decode of h3 generate instead (each window's frames\n"
      "                    made uint8 on the device and copied to the host as they finish), with\n"
      "                    the latency to the first finished frames\n"
      "  --f32-output      leave the decoded video on the device in float32 (the f16 decode "
      "widened,\n"
      "                    twice the memory); default: in the decoder's dtype, as the reference's\n"
      "                    decode returns the video in its model's bf16\n"
      "  --repeat N        timed decodes (default 1); --warmup N untimed ones first (default 0)\n"
      "  --seed N          weight and latent seed (default 0)\n"
      "  --audio-vae DIR   also decode the request's audio latents with the audio VAE of DIR (a\n"
      "                    component folder, e.g. the audio_vae/ of `h3 make-tiny\n"
      "                    --released-shapes`; random weights filled at load) and report its\n"
      "                    time beside the video's; with --profile also where the audio\n"
      "                    decode's time goes, pass by pass\n");
}

vv::VideoVaeConfig small_config() {
  // The golden tiny-h3 VAE's dimensions.
  vv::VideoVaeConfig c;
  c.block_out_channels = {8, 16, 16, 32, 32, 32};
  c.layers_per_block = 1;
  c.norm_num_groups = 8;
  c.decoder_num_layers = 2;
  c.decoder_num_attention_heads = 2;
  c.decoder_attention_head_dim = 32;
  c.validate("tiny VAE config");
  return c;
}

int64_t peak_host_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // kilobytes on Linux
}

// Samples the device's used memory (total - free) while alive; records the maximum.
class DevicePeakSampler {
 public:
  explicit DevicePeakSampler(const h3::Device& d) : device_(d) {
    if (!d.is_cuda()) return;
    peak_ = used();
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const int64_t u = used();
        int64_t p = peak_.load();
        while (u > p && !peak_.compare_exchange_weak(p, u)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~DevicePeakSampler() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t used() const {
    size_t free_b = 0, total_b = 0;
    h3::cuda_memory_info(device_.index, &free_b, &total_b);
    return static_cast<int64_t>(total_b - free_b);
  }
  int64_t peak() const { return peak_.load(); }

 private:
  h3::Device device_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread thread_;
};

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

int run_bench_vae(const std::vector<std::string>& args) {
  BenchArgs a;
  bool latents_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    auto value = [&]() -> const std::string& {
      H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, f, " needs a value");
      return args[++i];
    };
    if (f == "--help" || f == "-h") {
      print_help();
      return 0;
    } else if (f == "--device") {
      a.device = value();
    } else if (f == "--precision") {
      a.precision = value();
    } else if (f == "--small") {
      a.small = true;
    } else if (f == "--no-tiling") {
      a.tiling = false;
    } else if (f == "--tile-batch") {
      a.tile_batch = parse_int(f, value(), 0, 4096);
    } else if (f == "--profile") {
      a.profile = true;
    } else if (f == "--vae-dtype") {
      const std::string& v = value();
      H3_CHECK(v == "f16" || v == "fp8", ErrorCode::kInvalidArgument, "--vae-dtype must be f16 or fp8, got '", v, "'");
      a.fp8 = v == "fp8";
    } else if (f == "--vae-attention") {
      a.attention = h3::ops::parse_attention_kernel(value(), f);
    } else if (f == "--audio-vae") {
      a.audio_vae = value();
    } else if (f == "--stream") {
      a.stream = true;
    } else if (f == "--f32-output") {
      a.f32_output = true;
    } else if (f == "--latents") {
      parse_latents(value(), a);
      latents_given = true;
    } else if (f == "--repeat") {
      a.repeat = static_cast<int>(parse_int(f, value(), 1, 1000));
    } else if (f == "--warmup") {
      a.warmup = static_cast<int>(parse_int(f, value(), 0, 1000));
    } else if (f == "--seed") {
      a.seed = static_cast<uint64_t>(parse_int(f, value(), 0, int64_t{1} << 40));
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", f, "' (see h3 bench vae --help)");
    }
  }
  const h3::Device device =
      a.device.empty() ? (h3::cuda_available() ? h3::Device::cuda(0) : h3::Device::cpu())
                       : h3::parse_device(a.device);
  H3_CHECK(device.is_cpu() || h3::cuda_available(), ErrorCode::kUnsupported, "--device ",
           device.str(), ": no CUDA device is available in this build or machine");
  if (!latents_given) {
    if (a.small) {
      a.t = 7, a.h = 24, a.w = 40;
    } else {
      a.t = 37, a.h = 48, a.w = 84;
    }
  }
  H3_CHECK(!(a.stream && a.f32_output), ErrorCode::kInvalidArgument,
           "--f32-output is the non-streamed decode's video; --stream hands out uint8 frames: use "
           "one of them");
  H3_CHECK(!(a.stream && a.fp8), ErrorCode::kInvalidArgument,
           "--stream hands out uint8 frames, and --vae-dtype fp8's PSNR needs the float decode: use one of them");
  H3_CHECK(device.is_cuda() || a.small || latents_given, ErrorCode::kInvalidArgument,
           "a full-size decode at released dimensions takes hours on a CPU; use --device cuda, "
           "--small, or --latents to choose a smaller request");
  vv::VideoVaeOptions opt;
  opt.device = device;
  opt.precision = a.precision.empty()
                      ? (device.is_cuda() || a.fp8 ? vv::VaePrecision::kF16Autocast : vv::VaePrecision::kF32)
                      : vv::parse_precision(a.precision);
  opt.use_tiling = a.tiling;
  opt.tile_batch = a.tile_batch;
  opt.load_encoder = false;
  opt.attention = a.attention;
  opt.decoder_fp8 = a.fp8;
  const vv::VideoVaeConfig config = a.small ? small_config() : vv::VideoVaeConfig();

  DevicePeakSampler sampler(device);
  const int64_t baseline = device.is_cuda() ? sampler.used() : 0;
  const auto t_load = std::chrono::steady_clock::now();
  vv::VideoVaeWeightPolicy wp;
  wp.device = device;
  wp.decoder_gemm_dtype = opt.precision == vv::VaePrecision::kF16Autocast ? h3::DType::kF16 : h3::DType::kF32;
  wp.load_encoder = false;
  wp.decoder_fp8 = a.fp8;
  const vv::VideoVae vae =
      vv::VideoVae::from_weights(config, vv::random_video_vae_weights(config, a.seed, wp), opt);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

  // Latents: uniform in [-2, 2), deterministic in the seed (values do not change the work done).
  h3::Tensor z = h3::Tensor::empty({1, config.latent_channels, a.t, a.h, a.w}, h3::DType::kF32);
  uint64_t state = a.seed * 6364136223846793005ull + 1442695040888963407ull;
  float* zp = z.data<float>();
  for (int64_t i = 0; i < z.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    zp[i] = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 4.0 - 2.0);
  }
  const h3::Tensor z_dev = z.to(device);
  // From here the pool's high-water mark counts the weights and latents in use plus the decode's
  // peak: the measure of the reference's figure (torch.cuda.max_memory_allocated after a reset
  // with the model loaded), without the CUDA context and the pool's unused blocks that the
  // sampled figure includes.
  if (device.is_cuda()) h3::cuda_pool_reset_peak(device.index);

  const vv::TemporalPlan plan = vv::temporal_decode_plan(a.t, config);
  const int64_t r = config.spatial_ratio();
  int64_t tiles = 1;
  if (a.tiling) {
    tiles = static_cast<int64_t>(vv::split_tiles(a.h * r, opt.tiles.tile_height, opt.tiles.min_overlap_height, r).starts.size() *
                                 vv::split_tiles(a.w * r, opt.tiles.tile_width, opt.tiles.min_overlap_width, r).starts.size());
  }
  std::printf("h3 bench vae: %s, %s%s, %s dimensions, weights %.2f GiB (decoder only), loaded in %.2f s\n",
              device.str().c_str(), vv::precision_name(opt.precision), a.fp8 ? " with FP8 block GEMMs" : "",
              a.small ? "tiny" : "released",
              gib(static_cast<int64_t>(vv::video_vae_weight_bytes(vae.weights()))), load_s);
  std::printf("request: latents %lldx%lldx%lldx%lld -> %lld frames at %lldx%lld; %lld windows x %lld tiles = %lld decoder calls%s\n",
              static_cast<long long>(config.latent_channels), static_cast<long long>(a.t),
              static_cast<long long>(a.h), static_cast<long long>(a.w),
              static_cast<long long>(plan.output_frames), static_cast<long long>(a.w * r),
              static_cast<long long>(a.h * r), static_cast<long long>(plan.num_chunks),
              static_cast<long long>(tiles), static_cast<long long>(plan.num_chunks * tiles),
              a.tiling ? "" : " (tiling off)");

  // Streaming: each finished piece is copied to the host as it comes (as the muxer would take it).
  double first_piece_s = 0.0;
  int64_t pieces = 0;
  const h3::DType out_dtype = a.f32_output ? h3::DType::kF32 : vae.decoder_dtype();
  auto decode_once = [&](vv::VideoDecodeProfile* prof) {
    if (!a.stream) {
      // The decoded video stays on the device (as the reference's decode returns it); the uint8
      // conversion and host copy are timed separately below.
      h3::Tensor out = vae.decode(z_dev, prof, out_dtype);
      if (out.device().is_cuda()) h3::Stream().synchronize();  // the ops run on the legacy default stream
      return out;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<h3::Tensor> parts;
    pieces = 0;
    vae.decode_streaming(
        z_dev,
        [&](int64_t, int64_t, const h3::Tensor& frames) {
          // As h3 generate's decode stage: uint8 frames [n, H, W, 3] made where the piece is, then
          // to the host (a quarter of the float32 bytes).
          parts.push_back(vv::decoded_to_uint8(frames.unsqueeze(0)).select(0, 0).to(h3::Device::cpu()));
          if (pieces++ == 0)
            first_piece_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        },
        prof);
    return parts.size() == 1 ? parts[0] : h3::ops::concat(parts, 0);
  };
  // The batch decode_clip will use: the limit for a window's tiles, spread evenly over batches.
  int64_t tile_batch = 1;
  if (a.tiling) {
    const int64_t tile_rows = plan.window_tokens * (opt.tiles.tile_height / r) * (opt.tiles.tile_width / r) +
                              config.decoder_num_register_tokens + 1;
    const int64_t limit = vae.resolve_tile_batch(tiles, tile_rows);
    const int64_t batches = (tiles + limit - 1) / limit;
    tile_batch = (tiles + batches - 1) / batches;
  }
  for (int i = 0; i < a.warmup; ++i) (void)decode_once(nullptr);
  std::vector<double> times;
  double frames_s = 0.0;
  h3::Tensor decoded;
  for (int i = 0; i < a.repeat; ++i) {
    // The last decode's video is released first, as the reference's timing loop drops each
    // output: two videos at once are no decode's peak.
    decoded = h3::Tensor();
    const auto t0 = std::chrono::steady_clock::now();
    decoded = decode_once(nullptr);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  vv::VideoDecodeProfile prof;
  double profiled_s = 0.0;
  // The peaks of the timed decodes: the profiled decode below runs while their video is held (the
  // conversion after it uses that video), which is no decode's peak.
  const int64_t sampled_peak = device.is_cuda() ? sampler.peak() : 0;
  const uint64_t pool_peak = device.is_cuda() ? h3::cuda_pool_peak_bytes(device.index) : 0;
  if (a.profile) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)decode_once(&prof);
    profiled_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (!a.stream) {
    const auto t0 = std::chrono::steady_clock::now();
    // On CUDA: one device kernel, then the bytes to the host (H3_VAE_DEVICE_UINT8=0: host loops).
    const h3::Tensor frames = vv::decoded_to_uint8(decoded);
    frames_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  sampler.stop();
  double sum = 0.0;
  for (double t : times) sum += t;
  const double best = *std::min_element(times.begin(), times.end());
  std::printf("\n| metric | value |\n|---|---|\n");
  std::printf("| decode seconds (best of %d; output left on the device) | %.3f |\n", a.repeat, best);
  std::printf("| decode seconds (mean) | %.3f |\n", sum / static_cast<double>(times.size()));
  std::printf("| frames per second | %.2f |\n", static_cast<double>(plan.output_frames) / best);
  std::printf("| seconds per tile | %.4f |\n", best / static_cast<double>(plan.num_chunks * tiles));
  std::printf("| tile batch | %lld (requested %lld; 0 = automatic) |\n", static_cast<long long>(tile_batch),
              static_cast<long long>(a.tile_batch));
  std::printf("| attention kernel (asked: %s) | %s |\n", h3::ops::attention_kernel_name(a.attention),
              h3::ops::attention_kernel_name(vae.attention_used()));
  if (a.stream) {
    std::printf("| streaming: pieces handed out | %lld |\n", static_cast<long long>(pieces));
    std::printf("| streaming: seconds to the first finished frames (last run) | %.3f |\n", first_piece_s);
  }
  if (!a.stream) {
    std::printf("| to uint8 frames on the host (s; %s) | %.3f |\n",
                decoded.device().is_cuda() && vv::device_uint8_enabled() ? "device conversion + copy" : "host conversion",
                frames_s);
  }
  std::printf("| peak host RSS (GiB) | %.2f |\n", gib(peak_host_rss_bytes()));
  if (device.is_cuda()) {
    std::printf("| peak device memory in use (GiB, sampled every 2 ms) | %.2f |\n",
                gib(sampled_peak));
    std::printf("| ... above the baseline before loading (GiB) | %.2f |\n",
                gib(sampled_peak - baseline));
    if (pool_peak > 0) {
      std::printf("| peak allocated: the pool's high-water mark, weights included (GiB / GB) | %.2f / %.2f |\n",
                  gib(static_cast<int64_t>(pool_peak)), static_cast<double>(pool_peak) / 1e9);
    }
  }
  std::printf("| output | %s %s (%s) |\n", h3::shape_str(decoded.shape()).c_str(), h3::dtype_name(decoded.dtype()),
              decoded.device().str().c_str());
  if (a.fp8) {
    // The same weights (seed) and latents under the f16 policy: the distance FP8 adds.
    vv::VideoVaeOptions o16 = opt;
    o16.decoder_fp8 = false;
    vv::VideoVaeWeightPolicy wp16 = wp;
    wp16.decoder_fp8 = false;
    const vv::VideoVae ref = vv::VideoVae::from_weights(config, vv::random_video_vae_weights(config, a.seed, wp16), o16);
    const std::vector<double> psnr = vv::frame_psnr(decoded, ref.decode(z_dev, nullptr, out_dtype));
    double lo = psnr[0], hi = psnr[0], sum_db = 0.0;
    for (double p : psnr) lo = std::min(lo, p), hi = std::max(hi, p), sum_db += p;
    std::printf("| PSNR of the FP8 decode against f16 (dB, per frame: min / mean / max over %zu) | %.2f / %.2f / %.2f |\n",
                psnr.size(), lo, sum_db / static_cast<double>(psnr.size()), hi);
    std::printf("\nPSNR per frame (dB):");
    for (size_t i = 0; i < psnr.size(); ++i) std::printf("%s%.2f", i % 16 == 0 ? "\n " : " ", psnr[i]);
    std::printf("\n");
  }
  if (!a.audio_vae.empty()) {
    // The audio of the same request, as the pipeline decodes it (both stereo channels as a batch,
    // to float32 on the host), after the video: its share of the decode stage.
    namespace av = h3::audio_vae;
    const h3::pipeline::RandomWeightsScope fill(a.seed);
    av::AudioVaeOptions ao;
    ao.device = device;
    ao.load_encoder = false;
    const av::AudioVae avae = av::AudioVae::load(a.audio_vae, ao);
    const int64_t na = avae.config().latent_frames_for_video_frames(plan.output_frames);
    h3::Tensor zn = h3::Tensor::empty({2, avae.config().latent_channels, na}, h3::DType::kF32);
    float* zp2 = zn.data<float>();
    for (int64_t i = 0; i < zn.numel(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      zp2[i] = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    for (int i = 0; i < a.warmup; ++i) (void)avae.decode_normalized(zn);
    std::vector<double> at;
    h3::Tensor wave;
    for (int i = 0; i < a.repeat; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      wave = avae.decode_normalized(zn);  // ends on the host: the time includes the copy
      at.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double abest = *std::min_element(at.begin(), at.end());
    std::printf("| audio decode seconds (best of %d; 2 x %lld latents -> %s on the host) | %.3f |\n", a.repeat,
                static_cast<long long>(na), h3::shape_str(wave.shape()).c_str(), abest);
    std::printf("| audio decode / video decode | %.3f |\n", abest / best);
    if (a.profile) {
      // One more decode with every pass marked by events on the stream (no synchronization
      // between them): where the audio decode's time goes.
      h3::PartTimer timer(device);
      std::map<std::string, double> parts;
      const auto t0 = std::chrono::steady_clock::now();
      timer.begin();
      (void)avae.decode_normalized(zn, &timer);
      const double total_ms =
          1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      timer.collect(&parts);
      std::printf("\nProfiled audio decode: %.1f ms\n\n| part | ms | share |\n|---|---|---|\n",
                  total_ms);
      double marked = 0.0;
      for (const char* name : av::kDecodeParts) {
        const double ms = parts.count(name) ? parts.at(name) : 0.0;
        marked += ms;
        std::printf("| %s | %.1f | %.1f%% |\n", name, ms,
                    total_ms > 0 ? 100.0 * ms / total_ms : 0.0);
      }
      std::printf("| waveform to the host and clamp | %.1f | %.1f%% |\n", total_ms - marked,
                  total_ms > 0 ? 100.0 * (total_ms - marked) / total_ms : 0.0);
    }
  }
  if (a.profile) {
    const vv::DecoderProfile& d = prof.decoder;
    const double staged = d.gemm_s + d.attention_s + d.norm_s + d.other_s + prof.stitch_s + prof.temporal_s;
    std::printf("\nProfiled decode (device synchronized at each stage boundary): %.3f s, %lld windows, "
                "%lld decoder forwards of %lld tiles (batch up to %lld), %lld token rows\n\n",
                profiled_s, static_cast<long long>(prof.windows), static_cast<long long>(d.calls),
                static_cast<long long>(d.tiles), static_cast<long long>(prof.tile_batch),
                static_cast<long long>(d.rows));
    std::printf("| stage | seconds | share |\n|---|---|---|\n");
    auto row = [&](const char* name, double sec) {
      std::printf("| %s | %.3f | %.1f%% |\n", name, sec, profiled_s > 0 ? 100.0 * sec / profiled_s : 0.0);
    };
    row("decoder GEMMs (linear)", d.gemm_s);
    row("decoder attention", d.attention_s);
    row("decoder norms (RMSNorm, LayerNorm, q/k norm + RoPE)", d.norm_s);
    row("decoder other (casts, LayerScale, residual, SwiGLU, patching)", d.other_s);
    row("tile stitch (spatial blends)", prof.stitch_s);
    row("temporal cross-fade and assembly", prof.temporal_s);
    row("unaccounted (window slicing, latents padding, host copies)", profiled_s - staged);
    // Dense GEMM work of the decoder's linears, to read the GEMM stage as a throughput.
    const double dw = static_cast<double>(config.decoder_width());
    const double ff = static_cast<double>(config.decoder_ffn_dim());
    const double per_row = 2.0 * static_cast<double>(config.decoder_num_layers) * (4 * dw * dw + 3 * dw * ff);
    if (d.gemm_s > 0)
      std::printf("\nblock GEMMs: %.3g TFLOP in %.3f s = %.3g TFLOP/s\n", per_row * static_cast<double>(d.rows) * 1e-12,
                  d.gemm_s, per_row * static_cast<double>(d.rows) * 1e-12 / d.gemm_s);
    // Attention work: 4 S^2 D per head and layer for each tile of S rows (tiles of one size here).
    if (d.attention_s > 0 && d.tiles > 0) {
      const double s_tile = static_cast<double>(d.rows) / static_cast<double>(d.tiles);
      const double flop = 4.0 * s_tile * s_tile * static_cast<double>(config.decoder_num_attention_heads) *
                          static_cast<double>(config.decoder_attention_head_dim) *
                          static_cast<double>(config.decoder_num_layers) * static_cast<double>(d.tiles);
      std::printf("attention (%s): %.3g TFLOP in %.3f s = %.3g TFLOP/s\n", h3::ops::attention_kernel_name(vae.attention_used()),
                  flop * 1e-12, d.attention_s, flop * 1e-12 / d.attention_s);
    }
  }
  return 0;
}

}  // namespace

H3_COMMAND("bench vae", "time a video VAE decode (random weights) and report peak memory", run_bench_vae);
