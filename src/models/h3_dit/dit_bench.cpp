#include "models/h3_dit/dit_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "core/cuda_stream.h"
#include "core/dtype.h"
#include "core/part_timer.h"
#include "core/status.h"
#include "ops/fp8.h"
#include "ops/ops.h"

namespace h3::dit {
namespace {

// Random tensors: a pool of uniform values in [-1, 1) repeated from a seeded offset. The values do
// not change the work done; repeating a pool keeps generating gigabytes of weights cheap.
class RandomPool {
 public:
  explicit RandomPool(uint64_t seed) : values_(size_t{1} << 20) {
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (float& v : values_) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
  }

  // Uniform in [center - scale, center + scale), in `dtype`, on `device`.
  Tensor make(const Shape& shape, DType dtype, float scale, float center, const Device& device) {
    Tensor t = Tensor::empty(shape, dtype);
    const int64_t n = t.numel();
    const size_t pool = values_.size();
    const size_t offset = (next_offset_ += 7919) % pool;
    if (dtype == DType::kBF16) {
      std::vector<uint16_t> chunk(pool);
      for (size_t i = 0; i < pool; ++i) {
        chunk[i] = f32_to_bf16(center + scale * values_[(offset + i) % pool]);
      }
      uint16_t* p = t.data<uint16_t>();
      for (int64_t i = 0; i < n; i += static_cast<int64_t>(pool)) {
        const size_t m = static_cast<size_t>(std::min<int64_t>(n - i, static_cast<int64_t>(pool)));
        std::memcpy(p + i, chunk.data(), m * sizeof(uint16_t));
      }
    } else {
      H3_CHECK(dtype == DType::kF32, ErrorCode::kInvalidArgument,
               "bench random tensor: dtype must be f32 or bf16, got ", dtype_name(dtype));
      float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i) {
        p[i] = center + scale * values_[(offset + static_cast<size_t>(i)) % pool];
      }
    }
    return device.is_cpu() ? t : t.to(device);
  }

 private:
  std::vector<float> values_;
  size_t next_offset_ = 0;
};

// Samples the device's used memory (total - free) while alive and keeps the maximum.
class PeakSampler {
 public:
  explicit PeakSampler(const Device& d) : device_(d) {
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
  ~PeakSampler() { stop(); }
  PeakSampler(const PeakSampler&) = delete;
  PeakSampler& operator=(const PeakSampler&) = delete;
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t used() const {
    size_t free_b = 0, total_b = 0;
    cuda_memory_info(device_.index, &free_b, &total_b);
    return static_cast<int64_t>(total_b - free_b);
  }
  int64_t peak() const { return peak_.load(); }

 private:
  Device device_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread thread_;
};

// CUDA events on the stream the ops use (the legacy default stream), or the wall clock on a CPU
// (CPU ops are synchronous).
class Timer {
 public:
  explicit Timer(const Device& d) : device_(d) {
    if (d.is_cuda()) {
      start_ = Event::create(d.index);
      end_ = Event::create(d.index);
    }
  }
  void start() {
    if (device_.is_cuda()) {
      start_.record(Stream());
    } else {
      t0_ = std::chrono::steady_clock::now();
    }
  }
  double stop_ms() {
    if (device_.is_cuda()) {
      end_.record(Stream());
      return static_cast<double>(Event::elapsed_ms(start_, end_));
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  Device device_;
  Event start_, end_;
  std::chrono::steady_clock::time_point t0_;
};

DitConfig bench_config(const DitBenchOptions& o) {
  DitConfig c;
  c.num_attention_heads = o.heads;
  c.attention_head_dim = o.head_dim;
  c.hidden_size = o.hidden;
  c.num_layers = o.blocks;
  c.num_refiner_layers = 0;
  c.ffn_dim = o.ffn;
  c.in_channels = 24;
  c.audio_in_channels = 32;
  c.text_dim = o.hidden;
  c.freq_dim = 256;
  c.time_embed_hidden_dim = o.hidden;
  c.time_embed_dim = std::max<int64_t>(o.hidden / 2, 1);  // released: 2688 = 5376 / 2
  c.rope_freq_dim = std::min<int64_t>(16, o.head_dim / 6);
  return c;
}

DitBlockWeights random_block(const DitConfig& c, bool gate, RandomPool& pool, DType body,
                             const Device& dev) {
  const int64_t h = c.hidden_size, inner = c.inner_dim(), hd = c.attention_head_dim;
  auto w = [&](const Shape& s, int64_t fan_in) {
    return pool.make(s, body, std::sqrt(3.0f / static_cast<float>(fan_in)), 0.0f, dev);
  };
  DitBlockWeights b;
  b.norm1 = pool.make({h}, body, 0.1f, 1.0f, dev);
  b.norm2 = pool.make({h}, body, 0.1f, 1.0f, dev);
  b.attn.to_q = w({inner, h}, h);
  b.attn.to_k = w({inner, h}, h);
  b.attn.to_v = w({inner, h}, h);
  b.attn.norm_q = pool.make({hd}, body, 0.1f, 1.0f, dev);
  b.attn.norm_k = pool.make({hd}, body, 0.1f, 1.0f, dev);
  b.attn.to_out = w({h, inner}, inner);
  if (gate) b.attn.to_gate = w({inner, h}, h);
  b.ff.fc_in = w({2 * c.ffn_dim, h}, h);
  b.ff.fc_out = w({h, c.ffn_dim}, c.ffn_dim);
  // Small modulation so that activations stay in range over many blocks.
  b.adaln_w = pool.make({c.adaln_width(), c.time_embed_dim}, body,
                        0.1f / std::sqrt(static_cast<float>(c.time_embed_dim)), 0.0f, dev);
  b.adaln_b = pool.make({c.adaln_width()}, body, 0.05f, 0.0f, dev);
  return b;
}

double tensor_bytes(const Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; }

bool is_unsupported(const Error& e) { return e.code() == ErrorCode::kUnsupported; }

}  // namespace

DitWeights random_dit_block_weights(const DitConfig& config, bool gates, uint64_t seed, DType dtype,
                                    const Device& device) {
  RandomPool pool(seed);
  DitWeights w;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    w.blocks.push_back(random_block(config, gates, pool, dtype, device));
  }
  w.has_vsa_gates = gates;
  return w;
}

double DitBenchResult::gemm_tflops() const {
  return gemm_ms > 0.0 ? gemm_flops / (gemm_ms * 1e9) : 0.0;
}

double DitBenchResult::attention_tflops() const {
  return attention_ms > 0.0 ? attention_flops / (attention_ms * 1e9) : 0.0;
}

void choose_bench_layout(const DitBenchOptions& o, int64_t grid[3], int64_t* cond_rows) {
  *cond_rows = 0;
  if (o.rows <= 0) {
    for (int i = 0; i < 3; ++i) grid[i] = o.grid[i];
    H3_CHECK(grid[0] > 0 && grid[1] > 0 && grid[2] > 0, ErrorCode::kInvalidArgument,
             "bench dit: the video grid must be positive, got ", grid[0], "x", grid[1], "x", grid[2]);
    return;
  }
  const int64_t video = o.rows - o.text_rows - o.audio_rows;
  H3_CHECK(video >= 1, ErrorCode::kInvalidArgument, "bench dit: --rows ", o.rows,
           " leaves no video rows after ", o.text_rows, " text and ", o.audio_rows, " audio rows");
  // Released-like frame shapes, largest first; the first that holds at least 4 frames (or any
  // frame at all) is used and the remainder becomes condition rows.
  static const int64_t kFrames[][2] = {{24, 42}, {16, 28}, {12, 20}, {8, 12}, {8, 8},
                                       {4, 8},   {4, 4},   {2, 4},   {2, 2},  {1, 1}};
  for (const auto& f : kFrames) {
    const int64_t per = f[0] * f[1];
    if (video / per >= 4 || (per == 1)) {
      grid[0] = video / per;
      grid[1] = f[0];
      grid[2] = f[1];
      *cond_rows = video - grid[0] * per;
      return;
    }
  }
}

DitBenchResult run_dit_bench(const DitBenchOptions& o, bool verbose) {
  H3_CHECK(o.blocks >= 1 && o.iters >= 1 && o.warmup >= 0, ErrorCode::kInvalidArgument,
           "bench dit: blocks and iterations must be at least 1");
  H3_CHECK(o.hidden >= 1 && o.heads >= 1 && o.head_dim >= 6 && o.ffn >= 1 && o.text_rows >= 1 &&
               o.audio_rows >= 0,
           ErrorCode::kInvalidArgument, "bench dit: sizes must be positive (head dim >= 6)");
  DitBenchResult r;
  choose_bench_layout(o, r.grid, &r.cond_rows);
  r.text_rows = o.text_rows;
  r.audio_rows = o.audio_rows;
  const int64_t video_grid_rows = r.grid[0] * r.grid[1] * r.grid[2];
  const int64_t s = o.text_rows + r.cond_rows + o.audio_rows + video_grid_rows;
  r.seq_len = s;
  r.timer = o.device.is_cuda() ? "cuda events" : "wall clock";
  const Device dev = o.device;
  const DitConfig c = bench_config(o);
  c.validate("bench dit config");
  const bool vsa = o.attention == DitAttentionBackend::kVsa;
  const bool gates = vsa && o.gates;

  DitOptions mo;
  mo.device = dev;
  mo.precision = o.precision;
  mo.rounding = o.rounding;
  mo.fp8 = o.fp8;
  mo.fp8_scaling = o.fp8_scaling;
  mo.attention = o.attention;
  mo.vsa.tile_size = o.vsa_tile_size;
  mo.vsa.sparsity = o.vsa_sparsity;
  const DType act = o.precision == DitPrecision::kF32 ? DType::kF32 : DType::kBF16;

  PeakSampler sampler(dev);
  r.baseline_device_bytes = dev.is_cuda() ? static_cast<double>(sampler.used()) : 0.0;
  auto unsupported = [&](const std::string& what, const Error& e) {
    r.unsupported += (r.unsupported.empty() ? "" : "; ") + what + ": " + e.what();
  };

  try {
    if (verbose) std::fprintf(stderr, "bench dit: generating %lld blocks of random weights\n",
                              static_cast<long long>(o.blocks));
    RandomPool pool(o.seed);
    DitWeights weights;
    for (int64_t i = 0; i < o.blocks; ++i) weights.blocks.push_back(random_block(c, gates, pool, act, dev));
    weights.has_vsa_gates = gates;
    // Block 0 of the model, as it runs (FP8 values and scales with --dit-dtype fp8): the vector's
    // buffer moves into the model with its elements in place.
    const DitBlockWeights& b0 = weights.blocks[0];
    DitModel model = DitModel::from_weights(c, std::move(weights), mo);
    for (const Tensor* t : {&b0.norm1,
                            &b0.norm2,
                            &b0.attn.to_q,
                            &b0.attn.to_k,
                            &b0.attn.to_v,
                            &b0.attn.norm_q,
                            &b0.attn.norm_k,
                            &b0.attn.to_out,
                            &b0.attn.to_gate,
                            &b0.ff.fc_in,
                            &b0.ff.fc_out,
                            &b0.adaln_w,
                            &b0.adaln_b,
                            &b0.attn.to_q_scale,
                            &b0.attn.to_k_scale,
                            &b0.attn.to_v_scale,
                            &b0.attn.to_out_scale,
                            &b0.attn.to_gate_scale,
                            &b0.ff.fc_in_scale,
                            &b0.ff.fc_out_scale,
                            &b0.adaln_scale}) {
      r.weight_bytes += tensor_bytes(*t);
    }
    if (vsa) r.sparsity = model.vsa_sparsity();
    LoraAdapter adapter;  // outlives the model's run-time pairs' use below
    if (o.lora_rank > 0) {
      // The usual targets of a style or character adapter; A and B scaled like trained factors
      // (their values do not change the timing).
      const int64_t rk = o.lora_rank;
      adapter.file = "random rank-" + std::to_string(rk) + " adapter";
      for (int64_t bi = 0; bi < o.blocks; ++bi) {
        const std::string p = "transformer_blocks." + std::to_string(bi) + ".";
        const std::pair<const char*, Shape> targets[] = {
            {"attn.to_q.weight", {c.inner_dim(), c.hidden_size}},
            {"attn.to_k.weight", {c.inner_dim(), c.hidden_size}},
            {"attn.to_v.weight", {c.inner_dim(), c.hidden_size}},
            {"attn.to_out.0.weight", {c.hidden_size, c.inner_dim()}},
            {"ff.net.0.proj.weight", {2 * c.ffn_dim, c.hidden_size}},
            {"ff.net.2.weight", {c.hidden_size, c.ffn_dim}}};
        for (const auto& [name, shape] : targets) {
          LoraUpdate u;
          u.target = p + name;
          u.kind = LoraUpdateKind::kLowRank;
          u.down = pool.make({rk, shape[1]}, DType::kF32, 0.01f, 0.0f, Device::cpu());
          u.up = pool.make({shape[0], rk}, DType::kF32, 0.01f, 0.0f, Device::cpu());
          u.rank = rk;
          u.alpha = static_cast<double>(rk);
          u.source = u.target;
          adapter.updates.push_back(std::move(u));
        }
      }
      if (verbose)
        std::fprintf(stderr, "bench dit: applying a rank-%lld adapter (%s)\n",
                     static_cast<long long>(rk), lora_mode_name(o.lora_mode));
      const auto t0 = std::chrono::steady_clock::now();
      model.apply_loras({{&adapter, 1.0f}}, o.lora_mode, /*restorable=*/false);
      if (dev.is_cuda()) Stream().synchronize();
      r.lora_apply_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }

    // Packed layout [text | cond | audio | video] (§4.3), positions (t, h, w).
    std::vector<double> pos(static_cast<size_t>(s * 3), 0.0);
    std::vector<int64_t> tags(static_cast<size_t>(s), 0), tidx, vidx, aidx, ts_idx(static_cast<size_t>(s), 1);
    int64_t row = 0;
    for (int64_t i = 0; i < o.text_rows; ++i, ++row) {
      tags[static_cast<size_t>(row)] = 1;
      tidx.push_back(row);
    }
    for (int64_t i = 0; i < r.cond_rows; ++i, ++row) {
      pos[static_cast<size_t>(row * 3 + 2)] = static_cast<double>(i);
      vidx.push_back(row);
    }
    for (int64_t i = 0; i < o.audio_rows; ++i, ++row) {
      tags[static_cast<size_t>(row)] = 2;
      pos[static_cast<size_t>(row * 3)] = static_cast<double>(i);
      ts_idx[static_cast<size_t>(row)] = 0;  // audio at its own timestep (§3.3)
      aidx.push_back(row);
    }
    for (int64_t t = 0; t < r.grid[0]; ++t) {
      for (int64_t y = 0; y < r.grid[1]; ++y) {
        for (int64_t x = 0; x < r.grid[2]; ++x, ++row) {
          pos[static_cast<size_t>(row * 3)] = static_cast<double>(t);
          pos[static_cast<size_t>(row * 3 + 1)] = static_cast<double>(y);
          pos[static_cast<size_t>(row * 3 + 2)] = static_cast<double>(x);
          vidx.push_back(row);
        }
      }
    }
    Tensor pos_t = Tensor::empty({s, 3}, DType::kF64);
    std::memcpy(pos_t.raw(), pos.data(), pos.size() * sizeof(double));
    auto ids = [](const std::vector<int64_t>& v) {
      return Tensor::from_i64(v, {static_cast<int64_t>(v.size())});
    };
    const DitLayout layout =
        model.make_layout(pos_t, ids(tags), ids(vidx), ids(aidx), ids(tidx));
    if (vsa) r.vsa_summary = layout.vsa.summary();

    std::vector<int64_t> adaln_idx(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) {
      adaln_idx[static_cast<size_t>(i)] = ts_idx[static_cast<size_t>(i)] * 3 + tags[static_cast<size_t>(i)];
    }
    const Tensor adaln_rows = Tensor::from_i64(adaln_idx, {s}).to(dev);
    const Tensor temb_act = pool.make({2, c.time_embed_dim}, act, 1.0f, 0.0f, dev);
    const Tensor x0 = pool.make({s, c.hidden_size}, act, 1.0f, 0.0f, dev);

    // FLOPs (2 per multiply-add): q, k, v, out (+ gate) projections and the SwiGLU FFN.
    const double sd = static_cast<double>(s), hd = static_cast<double>(c.hidden_size);
    const double inner = static_cast<double>(c.inner_dim()), ffn = static_cast<double>(c.ffn_dim);
    r.gemm_flops = 2.0 * sd * hd * ((gates ? 5.0 : 4.0) * inner + 3.0 * ffn);
    r.attention_flops = 4.0 * sd * sd * inner;  // QK^T and PV, dense

    Timer timer(dev);
    // The attention op alone on random q, k, v (and gate) of the block's shape.
    try {
      const Shape qs = {s, c.num_attention_heads, c.attention_head_dim};
      const Tensor q = pool.make(qs, act, 1.0f, 0.0f, dev);
      const Tensor k = pool.make(qs, act, 1.0f, 0.0f, dev);
      const Tensor v = pool.make(qs, act, 1.0f, 0.0f, dev);
      const Tensor g = gates ? pool.make(qs, act, 0.1f, 0.0f, dev) : Tensor();
      ops::VsaOptions vo;
      vo.sparsity = r.sparsity;
      auto call = [&](ops::VsaTrace* trace) {
        return vsa ? ops::vsa_attention(q, k, v, gates ? &g : nullptr, layout.vsa, vo, trace)
                   : ops::attention(q, k, v, ops::AttentionParams{});
      };
      if (vsa) {
        // Untimed call with a trace: the kept tiles give the fine branch's FLOPs.
        ops::VsaTrace trace;
        (void)call(&trace);
        const Tensor mask = trace.mask.device().is_cpu() ? trace.mask : trace.mask.to(Device::cpu());
        const uint8_t* m = mask.data<uint8_t>();
        const int64_t n = layout.vsa.num_tiles();
        const std::vector<int64_t>& ts = layout.vsa.tile_sizes;
        double pairs = 0.0;
        for (int64_t h = 0; h < mask.size(0); ++h) {
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              if (m[(h * n + i) * n + j]) pairs += static_cast<double>(ts[static_cast<size_t>(i)] * ts[static_cast<size_t>(j)]);
            }
          }
        }
        r.attention_flops = 4.0 * pairs * static_cast<double>(c.attention_head_dim);
      } else {
        for (int i = 0; i < o.warmup; ++i) (void)call(nullptr);
      }
      r.attention_ms = 1e300;
      for (int i = 0; i < o.iters; ++i) {
        timer.start();
        const Tensor out = call(nullptr);
        r.attention_ms = std::min(r.attention_ms, timer.stop_ms());
      }
      if (verbose) std::fprintf(stderr, "bench dit: attention %.3f ms\n", r.attention_ms);
    } catch (const Error& e) {
      if (!is_unsupported(e)) throw;
      r.attention_ms = 0.0;
      unsupported(vsa ? "vsa_attention" : "attention", e);
    }

    // The GEMMs alone, on the block's shapes.
    try {
      const Tensor o_in = pool.make({s, c.inner_dim()}, act, 1.0f, 0.0f, dev);
      const Tensor f_in = pool.make({s, c.ffn_dim}, act, 1.0f, 0.0f, dev);
      // As the block runs them: FP8 weights quantize the activations per token on the fly.
      auto lin = [](const Tensor& x, const Tensor& w, const Tensor& scale) {
        return ops::linear_projection(x, w, scale);
      };
      auto gemms = [&]() {
        (void)lin(x0, b0.attn.to_q, b0.attn.to_q_scale);
        (void)lin(x0, b0.attn.to_k, b0.attn.to_k_scale);
        (void)lin(x0, b0.attn.to_v, b0.attn.to_v_scale);
        if (gates) (void)lin(x0, b0.attn.to_gate, b0.attn.to_gate_scale);
        (void)lin(o_in, b0.attn.to_out, b0.attn.to_out_scale);
        (void)lin(x0, b0.ff.fc_in, b0.ff.fc_in_scale);
        (void)lin(f_in, b0.ff.fc_out, b0.ff.fc_out_scale);
      };
      for (int i = 0; i < o.warmup; ++i) gemms();
      r.gemm_ms = 1e300;
      for (int i = 0; i < o.iters; ++i) {
        timer.start();
        gemms();
        r.gemm_ms = std::min(r.gemm_ms, timer.stop_ms());
      }
      if (verbose) std::fprintf(stderr, "bench dit: GEMMs %.3f ms\n", r.gemm_ms);
    } catch (const Error& e) {
      if (!is_unsupported(e)) throw;
      r.gemm_ms = 0.0;
      unsupported("linear", e);
    }

    // Whole blocks, chained as in forward().
    try {
      r.block_ms.assign(static_cast<size_t>(o.blocks), 1e300);
      double sum = 0.0;
      int64_t count = 0;
      for (int it = -o.warmup; it < o.iters; ++it) {
        Tensor x = x0;
        for (int64_t bi = 0; bi < o.blocks; ++bi) {
          timer.start();
          x = model.run_block(bi, x, temb_act, adaln_rows, layout, /*step_index=*/0);
          const double ms = timer.stop_ms();
          if (it < 0) continue;
          r.block_ms[static_cast<size_t>(bi)] = std::min(r.block_ms[static_cast<size_t>(bi)], ms);
          sum += ms;
          ++count;
        }
        if (verbose) std::fprintf(stderr, "bench dit: iteration %d done\n", it);
      }
      r.block_ms_mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
    } catch (const Error& e) {
      if (!is_unsupported(e)) throw;
      r.block_ms.clear();
      unsupported("block", e);
    }

    // The same blocks again, their parts marked, for where the time goes (kept apart from the
    // block times above so that the marks cannot move them).
    if (!r.block_ms.empty()) {
      PartTimer timer_parts(dev);
      std::map<std::string, double> part_ms;
      int64_t runs = 0;
      model.set_part_timer(&timer_parts);
      try {
        for (int it = 0; it < o.iters; ++it) {
          Tensor x = x0;
          for (int64_t bi = 0; bi < o.blocks; ++bi, ++runs) {
            timer_parts.begin();
            x = model.run_block(bi, x, temb_act, adaln_rows, layout, /*step_index=*/0);
            timer_parts.collect(&part_ms);
          }
        }
      } catch (...) {
        model.set_part_timer(nullptr);
        throw;
      }
      model.set_part_timer(nullptr);
      // Bytes each glue part moves per block at least, activations in the activation dtype.
      const double e = static_cast<double>(dtype_size(act));
      const double rows_d = sd * hd * e, rows_inner = sd * inner * e, rows_ffn = sd * ffn * e;
      const double tables = static_cast<double>(layout.rope_cos.nbytes() + layout.rope_sin.nbytes());
      // The attention residual and the next norm run as one part where the block fuses them.
      const double apart = part_ms.count("gated residual + norm + modulate") ? 1 : 2;
      const std::map<std::string, double> glue_bytes = {
          {"norm + modulate", apart * 2 * rows_d},             // read x, write
          {"q/k norm + RoPE", 2 * (2 * rows_inner + tables)},  // q and k: read, write, tables
          {"gated residual", apart * 3 * rows_d},              // residual, branch, write
          {"gated residual + norm + modulate", 4 * rows_d},    // residual, branch; sum, rows
          {"SwiGLU", 3 * rows_ffn}};                           // read value and gate, write
      for (const auto& [name, ms] : part_ms) {
        DitBenchResult::Part p;
        p.name = name;
        p.ms = ms / static_cast<double>(std::max<int64_t>(runs, 1));
        p.glue = name.rfind("GEMM", 0) != 0 && name != "attention" && name != "adaLN";
        const auto b = glue_bytes.find(name);
        p.bytes = b != glue_bytes.end() ? b->second : 0.0;
        if (p.glue) {
          r.glue_ms += p.ms;
          r.glue_bytes += p.bytes;
        }
        r.parts.push_back(p);
      }
    }
  } catch (const Error& e) {
    if (!is_unsupported(e)) throw;
    unsupported("setup", e);
  }
  sampler.stop();
  r.peak_device_bytes = dev.is_cuda() ? static_cast<double>(sampler.peak()) : 0.0;
  return r;
}

}  // namespace h3::dit
