// h3 bench dit: times DiT main blocks with random bf16 weights at the released width on the packed
// length of a 1344x768x124 T2VA request (h3_dit_spec.md §2.14), and reports ms per block, GEMM and
// attention TFLOP/s and peak device memory. No checkpoint is needed.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "core/device.h"
#include "core/status.h"
#include "models/h3_dit/dit_bench.h"

namespace {

using h3::ErrorCode;
namespace dit = h3::dit;

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

double parse_fraction(const std::string& flag, const std::string& v) {
  double x = 0.0;
  size_t used = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  H3_CHECK(used == v.size() && !v.empty() && x >= 0.0 && x < 1.0, ErrorCode::kInvalidArgument,
           flag, " expects a number in [0, 1), got '", v, "'");
  return x;
}

void print_help() {
  std::printf(
      "usage: h3 bench dit [options]\n\n"
      "Times DiT main blocks with random weights (no checkpoint). Default: the released width\n"
      "(hidden 5376, 56 x 128 heads, FFN 14336), 2 blocks, bf16, on the packed length of a\n"
      "1344x768x124 T2VA request: 256 text + 414 audio + 37,296 video rows (grid 37x24x42).\n\n"
      "  --blocks N          main blocks (default 2)\n"
      "  --rows S            total packed rows; the video grid is chosen to fit, the rest are\n"
      "                      condition rows\n"
      "  --text-rows T       text rows (default 256); --audio-rows A (default 414)\n"
      "  --hidden H, --heads N, --head-dim D, --ffn F   model width (default 5376, 56, 128, "
      "14336)\n"
      "  --device D          cuda, cuda:N or cpu (default: cuda when available)\n"
      "  --attention A       dense or vsa (default dense)\n"
      "  --vsa-sparsity s    in [0, 1) (default 0.9: FastH3 with gates)\n"
      "  --vsa-tile E        64 or 256 (default 64); --no-gates: VSA without FastH3 gates\n"
      "  --precision P       bf16 (default) or f32\n"
      "  --dit-dtype D       bf16 (default) or fp8: E4M3 projections, per-token activation scales\n"
      "  --fp8-scaling S     block (default: 128 x 128 weight blocks x activations per token and\n"
      "                      128 columns) or channel (per output channel x per token)\n"
      "  --lora-rank R       a random rank-R LoRA adapter on every block's q, k, v, out and FFN\n"
      "                      projections; --lora-mode runtime (default: the extra GEMM pair) or\n"
      "                      fused (folded in; the time to fold is reported)\n"
      "  --iters n           timed iterations (default 3); --warmup n (default 1)\n"
      "  --seed N            random weight seed (default 0)\n"
      "  --json              print the result as JSON\n\n"
      "Exit status 2 when an op is not available on the device (the report says which).\n");
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

int run_bench_dit(const std::vector<std::string>& args) {
  dit::DitBenchOptions o;
  std::string device;
  bool as_json = false;
  bool scaling_flag = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    auto value = [&]() -> const std::string& {
      H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, f, " needs a value");
      return args[++i];
    };
    constexpr int64_t kBig = int64_t{1} << 24;
    if (f == "--help" || f == "-h") {
      print_help();
      return 0;
    } else if (f == "--blocks") {
      o.blocks = parse_int(f, value(), 1, 64);
    } else if (f == "--rows") {
      o.rows = parse_int(f, value(), 1, kBig);
    } else if (f == "--text-rows") {
      o.text_rows = parse_int(f, value(), 1, kBig);
    } else if (f == "--audio-rows") {
      o.audio_rows = parse_int(f, value(), 0, kBig);
    } else if (f == "--hidden") {
      o.hidden = parse_int(f, value(), 1, 65536);
    } else if (f == "--heads") {
      o.heads = parse_int(f, value(), 1, 1024);
    } else if (f == "--head-dim") {
      o.head_dim = parse_int(f, value(), 6, 1024);
    } else if (f == "--ffn") {
      o.ffn = parse_int(f, value(), 1, 262144);
    } else if (f == "--device") {
      device = value();
    } else if (f == "--attention") {
      o.attention = dit::parse_attention_backend(value());
    } else if (f == "--vsa-sparsity") {
      o.vsa_sparsity = parse_fraction(f, value());
    } else if (f == "--vsa-tile") {
      o.vsa_tile_size = static_cast<int>(parse_int(f, value(), 1, 1024));
    } else if (f == "--no-gates") {
      o.gates = false;
    } else if (f == "--dit-dtype") {
      const std::string v = value();
      H3_CHECK(v == "bf16" || v == "fp8", ErrorCode::kInvalidArgument,
               "--dit-dtype must be bf16 or fp8, got '", v, "'");
      o.fp8 = v == "fp8";
    } else if (f == "--fp8-scaling") {
      o.fp8_scaling = h3::ops::parse_fp8_weight_scaling(value());
      scaling_flag = true;
    } else if (f == "--precision") {
      o.precision = dit::parse_precision(value());
    } else if (f == "--lora-rank") {
      o.lora_rank = parse_int(f, value(), 1, 4096);
    } else if (f == "--lora-mode") {
      o.lora_mode = dit::parse_lora_mode(value());
    } else if (f == "--iters") {
      o.iters = static_cast<int>(parse_int(f, value(), 1, 1000));
    } else if (f == "--warmup") {
      o.warmup = static_cast<int>(parse_int(f, value(), 0, 1000));
    } else if (f == "--seed") {
      o.seed = static_cast<uint64_t>(parse_int(f, value(), 0, int64_t{1} << 40));
    } else if (f == "--json") {
      as_json = true;
    } else {
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", f, "' (see h3 bench dit --help)");
    }
  }
  H3_CHECK(o.fp8 || !scaling_flag, ErrorCode::kInvalidArgument,
           "--fp8-scaling says how --dit-dtype fp8 quantizes the blocks' weights; without it "
           "nothing is quantized (add --dit-dtype fp8)");
  o.device = device.empty() ? (h3::cuda_available() ? h3::Device::cuda(0) : h3::Device::cpu())
                            : h3::parse_device(device);
  H3_CHECK(o.device.is_cpu() || h3::cuda_available(), ErrorCode::kUnsupported, "--device ",
           o.device.str(), ": no CUDA device is available in this build or machine");
  const bool released_width = o.hidden == 5376 && o.ffn == 14336 && o.heads * o.head_dim == 7168;
  H3_CHECK(o.device.is_cuda() || !released_width || o.rows > 0, ErrorCode::kInvalidArgument,
           "a block at the released width over 37,966 rows takes hours on a CPU; use --device "
           "cuda, or --rows with --hidden/--heads/--head-dim/--ffn for a smaller size");
  o.rounding = dit::DitRounding::kFused;  // the engine's CUDA path (§6)

  const dit::DitBenchResult r = dit::run_dit_bench(o, !as_json);
  const bool vsa = o.attention == dit::DitAttentionBackend::kVsa;
  if (as_json) {
    nlohmann::json j;
    j["device"] = o.device.str();
    j["attention"] = dit::attention_backend_name(o.attention);
    j["precision"] = dit::precision_name(o.precision);
    j["dit_dtype"] = o.fp8 ? "fp8" : dit::precision_name(o.precision);
    if (o.fp8) j["fp8_scaling"] = h3::ops::fp8_weight_scaling_name(o.fp8_scaling);
    j["blocks"] = o.blocks;
    j["hidden"] = o.hidden;
    j["heads"] = o.heads;
    j["head_dim"] = o.head_dim;
    j["ffn"] = o.ffn;
    j["seq_len"] = r.seq_len;
    j["rows"] = {{"text", r.text_rows}, {"cond", r.cond_rows}, {"audio", r.audio_rows},
                 {"video_grid", {r.grid[0], r.grid[1], r.grid[2]}}};
    if (vsa) {
      j["vsa"] = {{"sparsity", r.sparsity}, {"tile", o.vsa_tile_size}, {"gates", o.gates},
                  {"tiling", r.vsa_summary}};
    }
    j["timer"] = r.timer;
    j["block_ms"] = r.block_ms;
    j["block_ms_mean"] = r.block_ms_mean;
    j["gemm_ms"] = r.gemm_ms;
    j["gemm_tflops"] = r.gemm_tflops();
    j["attention_ms"] = r.attention_ms;
    j["attention_tflops"] = r.attention_tflops();
    j["gemm_gflop_per_block"] = r.gemm_flops * 1e-9;
    j["attention_gflop"] = r.attention_flops * 1e-9;
    j["weight_gib_per_block"] = gib(r.weight_bytes);
    if (o.device.is_cuda()) {
      j["peak_device_gib"] = gib(r.peak_device_bytes);
      j["peak_device_gib_above_baseline"] = gib(r.peak_device_bytes - r.baseline_device_bytes);
    }
    if (o.lora_rank > 0) {
      j["lora"] = {{"rank", o.lora_rank},
                   {"mode", dit::lora_mode_name(o.lora_mode)},
                   {"apply_ms", r.lora_apply_ms}};
    }
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& p : r.parts) {
      nlohmann::json pj = {{"name", p.name}, {"ms", p.ms}, {"glue", p.glue}};
      if (p.bytes > 0) pj["gb"] = p.bytes * 1e-9;
      parts.push_back(pj);
    }
    j["parts"] = parts;
    j["glue_ms"] = r.glue_ms;
    j["glue_gb"] = r.glue_bytes * 1e-9;
    j["unsupported"] = r.unsupported;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "h3 bench dit: %s, %s attention, %s%s, %lld blocks, hidden %lld, %lld x %lld heads, "
        "FFN %lld\n",
        o.device.str().c_str(), dit::attention_backend_name(o.attention),
        dit::precision_name(o.precision),
        !o.fp8 ? ""
        : o.fp8_scaling == h3::ops::Fp8WeightScaling::kPerBlock
            ? " with FP8 projections (128 x 128 blocks)"
            : " with FP8 projections",
        static_cast<long long>(o.blocks), static_cast<long long>(o.hidden),
        static_cast<long long>(o.heads), static_cast<long long>(o.head_dim),
        static_cast<long long>(o.ffn));
    std::printf("rows: %lld = %lld text + %lld cond + %lld audio + %lldx%lldx%lld video\n",
                static_cast<long long>(r.seq_len), static_cast<long long>(r.text_rows),
                static_cast<long long>(r.cond_rows), static_cast<long long>(r.audio_rows),
                static_cast<long long>(r.grid[0]), static_cast<long long>(r.grid[1]),
                static_cast<long long>(r.grid[2]));
    if (vsa) {
      std::printf("vsa: sparsity %.3f, tile %d, gates %s; %s\n", r.sparsity, o.vsa_tile_size,
                  o.gates ? "on" : "off", r.vsa_summary.c_str());
    }
    std::printf("\n| metric | value |\n|---|---|\n");
    for (size_t i = 0; i < r.block_ms.size(); ++i) {
      std::printf("| block %zu ms (best of %d) | %.3f |\n", i, o.iters, r.block_ms[i]);
    }
    if (!r.block_ms.empty()) std::printf("| block ms (mean) | %.3f |\n", r.block_ms_mean);
    if (o.lora_rank > 0) {
      std::printf("| LoRA rank %lld, %s: apply ms (%lld blocks) | %.3f |\n",
                  static_cast<long long>(o.lora_rank), dit::lora_mode_name(o.lora_mode),
                  static_cast<long long>(o.blocks), r.lora_apply_ms);
    }
    std::printf("| GEMMs of one block ms | %.3f |\n", r.gemm_ms);
    std::printf("| GEMM TFLOP/s (%.1f GFLOP per block) | %.2f |\n", r.gemm_flops * 1e-9,
                r.gemm_tflops());
    std::printf("| attention op ms | %.3f |\n", r.attention_ms);
    std::printf("| attention TFLOP/s (%.1f GFLOP%s) | %.2f |\n", r.attention_flops * 1e-9,
                vsa ? ", kept tiles" : "", r.attention_tflops());
    std::printf("| weights per block (GiB) | %.3f |\n", gib(r.weight_bytes));
    if (o.device.is_cuda()) {
      std::printf("| peak device memory in use (GiB, sampled every 2 ms) | %.2f |\n",
                  gib(r.peak_device_bytes));
      std::printf("| ... above the baseline (GiB) | %.2f |\n",
                  gib(r.peak_device_bytes - r.baseline_device_bytes));
    }
    std::printf("| timer | %s |\n", r.timer.c_str());
    if (!r.parts.empty()) {
      // Each part once per block (a name used twice adds up), in the order of their time.
      std::vector<dit::DitBenchResult::Part> parts = r.parts;
      std::stable_sort(parts.begin(), parts.end(),
                       [](const auto& a, const auto& b) { return a.ms > b.ms; });
      double total = 0.0;
      for (const auto& p : parts) total += p.ms;
      std::printf("\n| part of a block (marked run) | ms per block | GB moved at least | GB/s |\n"
                  "|---|---|---|---|\n");
      for (const auto& p : parts) {
        if (p.bytes > 0) {
          std::printf("| %s%s | %.3f | %.3f | %.0f |\n", p.name.c_str(), p.glue ? " (glue)" : "",
                      p.ms, p.bytes * 1e-9, p.bytes * 1e-9 / (p.ms * 1e-3));
        } else {
          std::printf("| %s%s | %.3f | | |\n", p.name.c_str(), p.glue ? " (glue)" : "", p.ms);
        }
      }
      std::printf("| all parts | %.3f | | |\n", total);
      std::printf("| glue per block (between the GEMMs and the attention) | %.3f | %.3f | %.0f |\n",
                  r.glue_ms, r.glue_bytes * 1e-9,
                  r.glue_ms > 0 ? r.glue_bytes * 1e-9 / (r.glue_ms * 1e-3) : 0.0);
    }
    if (!r.unsupported.empty()) {
      std::printf("\nUNSUPPORTED on %s: %s\n", o.device.str().c_str(), r.unsupported.c_str());
    }
  }
  return r.unsupported.empty() ? 0 : 2;
}

}  // namespace

H3_COMMAND("bench dit", "time DiT blocks (random weights): ms per block, TFLOP/s, peak memory",
           run_bench_dit);
