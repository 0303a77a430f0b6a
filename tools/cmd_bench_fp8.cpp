// h3 bench fp8: the DiT's linear layers at the released width, bf16 against FP8 (E4M3 weights with
// per-channel scales and activations quantized per token or per tensor as the layer runs, or 128 x
// 128 weight blocks with activations per token and 128 columns), on one GPU: milliseconds,
// TFLOP/s (2 per multiply-add) and the FP8 output's error against bf16 on the first rows. The FP8
// figure includes quantizing the activations: it is what a DiT layer pays.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/status.h"
#include "ops/cuda/fp8_cuda.h"
#include "ops/fp8.h"
#include "ops/ops.h"

namespace {

using h3::ErrorCode;
using h3::Tensor;
namespace ops = h3::ops;

struct Shape2 {
  const char* name;
  int64_t k, n;
};

// The released block's GEMMs (hidden 5376, attention 56 x 128 = 7168, SwiGLU FFN 14336).
constexpr Shape2 kShapes[] = {{"qkv", 5376, 3 * 7168},
                              {"attn_out", 7168, 5376},
                              {"ffn_in", 5376, 2 * 14336},
                              {"ffn_out", 14336, 5376}};

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  H3_CHECK(!v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos &&
               std::stoll(v) >= lo && std::stoll(v) <= hi,
           ErrorCode::kInvalidArgument, flag, " expects an integer in [", lo, ", ", hi, "], got '",
           v, "'");
  return std::stoll(v);
}

template <typename F>
double median_ms(int warmup, int iters, F&& fn) {
  h3::Stream stream;
  h3::Event e0 = h3::Event::create(0), e1 = h3::Event::create(0);
  std::vector<double> ms;
  for (int it = 0; it < warmup + iters; ++it) {
    e0.record(stream);
    fn();
    e1.record(stream);
    const double t = h3::Event::elapsed_ms(e0, e1);
    if (it >= warmup) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double rel_l2(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(h3::Device::cpu()).to_f32_vector();
  const std::vector<float> y = b.to(h3::Device::cpu()).to_f32_vector();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : 0.0;
}

int run_bench_fp8(const std::vector<std::string>& args) {
  int64_t rows = 37966;
  int iters = 10, warmup = 3;
  bool json = false;
  int algos = 0, search = 0;
  ops::Fp8ActScaling act = ops::Fp8ActScaling::kPerToken;
  ops::Fp8WeightScaling scaling = ops::Fp8WeightScaling::kPerChannel;
  bool act_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    auto value = [&]() -> const std::string& {
      H3_CHECK(i + 1 < args.size(), ErrorCode::kInvalidArgument, f, " needs a value");
      return args[++i];
    };
    if (f == "--help" || f == "-h") {
      std::printf(
          "usage: h3 bench fp8 [--rows M] [--scaling channel|block] [--act token|tensor|group]\n"
          "                    [--iters N] [--warmup N] [--algos N] [--search N] [--json]\n\n"
          "Times the DiT block's linear layers at the released width (qkv 5376->21504, attn_out\n"
          "7168->5376, ffn_in 5376->28672, ffn_out 14336->5376) for M rows (default 37966: "
          "1344x768x124)\n"
          "in bf16 and in FP8: E4M3 weights with per-channel scales and activations quantized per\n"
          "token or per tensor (--scaling channel, the default), or 128 x 128 weight blocks with\n"
          "activations per token and 128 columns (--scaling block, --act group), quantized as the\n"
          "layer runs (included in the time); the FP8 GEMM alone (activations\n"
          "quantized beforehand), and the FP8 output's relative L2 error against bf16 on the\n"
          "first 256 rows. --algos N also times cuBLASLt's first N heuristic choices for each "
          "GEMM\n"
          "(the engine runs the first), with and without fast accumulation (per-channel only).\n"
          "--search N times up\n"
          "to N configurations cuBLASLt accepts for each GEMM (algorithm, tile, stages, cluster,\n"
          "swizzle; float32 promotion kept) and prints the five fastest. Needs a CUDA device.\n");
      return 0;
    }
    if (f == "--rows")
      rows = parse_int(f, value(), 1, 1 << 20);
    else if (f == "--act") {
      act = ops::parse_fp8_act_scaling(value());
      act_given = true;
    } else if (f == "--scaling")
      scaling = ops::parse_fp8_weight_scaling(value());
    else if (f == "--iters")
      iters = static_cast<int>(parse_int(f, value(), 1, 1000));
    else if (f == "--warmup")
      warmup = static_cast<int>(parse_int(f, value(), 0, 1000));
    else if (f == "--algos")
      algos = static_cast<int>(parse_int(f, value(), 1, 64));
    else if (f == "--search")
      search = static_cast<int>(parse_int(f, value(), 1, 100000));
    else if (f == "--json")
      json = true;
    else
      h3::fail(ErrorCode::kInvalidArgument, "unknown option '", f, "' (see h3 bench fp8 --help)");
  }
  // The tensor cores take per-channel weights with per-token or per-tensor activations, and
  // weight blocks with activation groups; other pairings would time the float32 fallback.
  const bool block = scaling == ops::Fp8WeightScaling::kPerBlock;
  if (block && !act_given) act = ops::Fp8ActScaling::kPerGroup;
  H3_CHECK(block == (act == ops::Fp8ActScaling::kPerGroup), ErrorCode::kInvalidArgument,
           "--scaling ", ops::fp8_weight_scaling_name(scaling), " with --act ",
           ops::fp8_act_scaling_name(act),
           " does not run on the FP8 tensor cores (expected --scaling channel with --act token or "
           "tensor, or --scaling block with --act group)");
  H3_CHECK(!block || (algos == 0 && search == 0), ErrorCode::kInvalidArgument,
           "--algos and --search time the per-channel GEMM only (not with --scaling block)");
  H3_CHECK(h3::cuda_available(), ErrorCode::kUnsupported,
           "h3 bench fp8 needs a CUDA device (none in this build or machine)");
  const h3::Device dev = h3::Device::cuda(0);
  nlohmann::json out = {{"rows", rows},
                        {"scaling", ops::fp8_weight_scaling_name(scaling)},
                        {"act", ops::fp8_act_scaling_name(act)},
                        {"shapes", nlohmann::json::array()}};
  if (!json)
    std::printf("%-9s %6s %6s | %9s %8s | %9s %8s | %7s | %9s %8s | %11s | %9s\n", "layer", "K",
                "N", "bf16 ms", "TFLOP/s", "fp8 ms", "TFLOP/s", "speedup", "gemm ms", "TFLOP/s",
                "+bias ms", "rel_l2");
  double bf16_total = 0.0, fp8_total = 0.0, gemm_total = 0.0;
  for (const Shape2& s : kShapes) {
    Tensor x = Tensor::empty({rows, s.k}, h3::DType::kBF16, dev);
    Tensor w = Tensor::empty({s.n, s.k}, h3::DType::kBF16, dev);
    ops::fill_random(x, 1, 0.0f, 1.0f);
    ops::fill_random(w, 2, 0.0f, 0.02f);
    const ops::Fp8Weight wq = ops::quantize_weight_fp8(w, scaling);
    const double flops =
        2.0 * static_cast<double>(rows) * static_cast<double>(s.k) * static_cast<double>(s.n);
    const double bf16_ms = median_ms(warmup, iters, [&] { (void)ops::linear(x, w, nullptr); });
    const double fp8_ms =
        median_ms(warmup, iters, [&] { (void)ops::linear_fp8(x, wq, nullptr, act); });
    // The GEMM alone: the activations quantized once beforehand, as for the second and later
    // projections of one x (or a quantization fused into the kernel that makes x).
    const ops::Fp8Activation xq = ops::quantize_activation_fp8(x, act);
    const double gemm_ms = median_ms(warmup, iters, [&] { (void)ops::linear_fp8(xq, wq, nullptr); });
    // With a bf16 bias, as the DiT's projections have one: in the GEMM's epilogue where cuBLASLt
    // has that kernel (the `bias_in_epilogue` field says whether it did).
    Tensor bias = Tensor::empty({s.n}, h3::DType::kBF16, dev);
    ops::fill_random(bias, 3, 0.0f, 0.02f);
    const double bias_ms = median_ms(warmup, iters, [&] { (void)ops::linear_fp8(xq, wq, &bias); });
    // (The question is asked of the per-channel kernels; with --scaling block the column says
    // nothing.)
    const bool bias_epilogue =
        !block && ops::cuda::linear_fp8_bias_in_epilogue(rows, s.n, s.k, h3::DType::kBF16,
                                                         h3::DType::kBF16, dev.index);
    nlohmann::json sweep = nlohmann::json::array();
    for (bool fast : {false, true}) {
      if (algos == 0) break;
      for (const ops::cuda::Fp8AlgoTiming& t :
           ops::cuda::sweep_linear_fp8(xq, wq, algos, std::max(iters, 3), fast)) {
        const double tf = 2.0 * static_cast<double>(rows) * static_cast<double>(s.k) *
                          static_cast<double>(s.n) / t.ms * 1e-9;
        sweep.push_back({{"index", t.index}, {"fast_accum", fast}, {"ms", t.ms}, {"tflops", tf},
                         {"tile", t.tile}, {"stages", t.stages}, {"split_k", t.split_k},
                         {"cluster", t.cluster}});
        if (!json)
          std::printf("  %s algo %2d%s: %8.3f ms %7.1f TFLOP/s (algo %d, tile %d, stages %d, "
                      "split-k %d, cluster %d, swizzle %d, custom %d)\n",
                      s.name, t.index, fast ? " fast-accum" : "", t.ms, tf, t.algo_id, t.tile,
                      t.stages, t.split_k, t.cluster, t.swizzle, t.custom);
      }
    }
    nlohmann::json searched = nlohmann::json::array();
    if (search > 0) {
      ops::cuda::Fp8SearchStats ss;
      const std::vector<ops::cuda::Fp8AlgoTiming> found =
          ops::cuda::search_linear_fp8(xq, wq, search, std::max(iters, 3), &ss);
      if (!json)
        std::printf("  %s search: %d heuristic choices, %d algorithm ids, %d configurations tried, "
                    "%d not settable, %d accepted (first refusal: status %d), %zu timed\n",
                    s.name, ss.heuristic, ss.ids, ss.tried, ss.unset, ss.accepted, ss.first_refusal,
                    found.size());
      for (size_t i = 0; i < found.size(); ++i) {
        const ops::cuda::Fp8AlgoTiming& t = found[i];
        const double tf = flops / t.ms * 1e-9;
        searched.push_back({{"ms", t.ms}, {"tflops", tf}, {"algo_id", t.algo_id}, {"tile", t.tile},
                            {"stages", t.stages}, {"cluster", t.cluster}, {"swizzle", t.swizzle},
                            {"custom", t.custom}});
        if (!json && (i < 5 || t.index == -1))
          std::printf("  %s config %zu of %zu: %8.3f ms %7.1f TFLOP/s (algo %d, tile %d, stages %d, "
                      "cluster %d, swizzle %d, custom %d)%s\n",
                      s.name, i + 1, found.size(), t.ms, tf, t.algo_id, t.tile, t.stages,
                      t.cluster, t.swizzle, t.custom, t.index == -1 ? " = the heuristic's" : "");
      }
    }
    const Tensor xs = x.slice(0, 0, std::min<int64_t>(rows, 256));
    const double err = rel_l2(ops::linear_fp8(xs, wq, nullptr, act), ops::linear(xs, w, nullptr));
    bf16_total += bf16_ms;
    fp8_total += fp8_ms;
    gemm_total += gemm_ms;
    const double bf16_tf = flops / bf16_ms * 1e-9, fp8_tf = flops / fp8_ms * 1e-9;
    const double gemm_tf = flops / gemm_ms * 1e-9;
    out["shapes"].push_back({{"layer", s.name},
                             {"k", s.k},
                             {"n", s.n},
                             {"bf16_ms", bf16_ms},
                             {"bf16_tflops", bf16_tf},
                             {"fp8_ms", fp8_ms},
                             {"fp8_tflops", fp8_tf},
                             {"fp8_gemm_ms", gemm_ms},
                             {"fp8_gemm_tflops", gemm_tf},
                             {"fp8_gemm_bias_ms", bias_ms},
                             {"bias_in_epilogue", bias_epilogue},
                             {"algos", sweep},
                             {"search", searched},
                             {"rel_l2_vs_bf16", err}});
    if (!json)
      std::printf(
          "%-9s %6lld %6lld | %9.3f %8.1f | %9.3f %8.1f | %6.2fx | %9.3f %8.1f | %8.3f %s | %9.2e\n",
          s.name, static_cast<long long>(s.k), static_cast<long long>(s.n), bf16_ms, bf16_tf,
          fp8_ms, fp8_tf, bf16_ms / fp8_ms, gemm_ms, gemm_tf, bias_ms, bias_epilogue ? "e" : "f",
          err);
  }
  out["bf16_ms"] = bf16_total;
  out["fp8_ms"] = fp8_total;
  out["fp8_gemm_ms"] = gemm_total;
  if (json)
    std::printf("%s\n", out.dump(2).c_str());
  else
    std::printf("all four: bf16 %.3f ms, fp8 %.3f ms (%.2fx), fp8 GEMMs alone %.3f ms (%.2fx)\n"
                "(+bias ms: the GEMM alone with a bf16 bias; e = added in its epilogue, f = through "
                "a float32 accumulator)\n",
                bf16_total, fp8_total, bf16_total / fp8_total, gemm_total,
                bf16_total / gemm_total);
  return 0;
}

}  // namespace

H3_COMMAND("bench fp8", "time the DiT's linear layers in bf16 and FP8 (E4M3) on the GPU",
           run_bench_fp8);
