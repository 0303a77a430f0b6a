#include "models/video_vae/video_vae_weights.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <thread>
#include <vector>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/device_loader.h"
#include "models/schema.h"
#include "ops/fp8.h"
#include "ops/ops.h"

namespace h3::video_vae {
namespace {

// Gives the float tensor stored under `name` (any float dtype, CPU), of shape `shape`.
using Source = std::function<Tensor(const std::string& name, const Shape& shape)>;

class Builder {
 public:
  Builder(const Source& src, const VideoVaeWeightPolicy& p) : src_(src), policy_(p) {}

  // A tensor in float32 on the device (encoder weights, norms, LayerScale, registers).
  Tensor f32(const std::string& name, const Shape& shape) const { return place(name, shape, DType::kF32); }
  // A decoder GEMM operand in the policy's dtype.
  Tensor gemm(const std::string& name, const Shape& shape) const {
    return place(name, shape, policy_.decoder_gemm_dtype);
  }
  ConvWeights conv(const std::string& prefix, int64_t cout, int64_t cin, int64_t k) const {
    return {f32(prefix + "weight", {cout, cin, k, k, k}), f32(prefix + "bias", {cout})};
  }

 private:
  Tensor place(const std::string& name, const Shape& shape, DType dtype) const {
    Tensor t = src_(name, shape);
    H3_CHECK(t.shape() == shape, ErrorCode::kInvalidFile, "video VAE weight '", name, "' has shape ",
             shape_str(t.shape()), ", expected ", shape_str(shape));
    if (t.device().is_cuda()) return t.dtype() == dtype ? t : ops::cast(t, dtype);  // streamed
    // Host tensors (random weights) go up first and narrow there: the same rounding, without a
    // single-threaded host pass over every weight.
    if (policy_.device.is_cuda()) {
      const Tensor d = t.to(policy_.device);
      return d.dtype() == dtype ? d : ops::cast(d, dtype);
    }
    return t.to(dtype).to(policy_.device);
  }
  const Source& src_;
  const VideoVaeWeightPolicy& policy_;
};

VideoVaeWeights build(const VideoVaeConfig& c, const Source& src, const VideoVaeWeightPolicy& policy) {
  const Builder b(src, policy);
  VideoVaeWeights w;
  if (policy.load_encoder) {
    w.has_encoder = true;
    EncoderWeights& e = w.encoder;
    const auto& boc = c.block_out_channels;
    e.conv_in = b.conv("encoder.conv_in.", boc[0], c.in_channels, 3);
    int64_t ch = boc[0];
    for (size_t i = 0; i < boc.size(); ++i) {
      DownBlockWeights blk;
      const std::string p = "encoder.down_blocks." + std::to_string(i) + ".";
      for (int64_t j = 0; j < c.layers_per_block; ++j) {
        const std::string r = p + "resnets." + std::to_string(j) + ".";
        ResnetWeights rw;
        rw.norm1_w = b.f32(r + "norm1.weight", {ch});
        rw.norm1_b = b.f32(r + "norm1.bias", {ch});
        rw.conv1 = b.conv(r + "conv1.", boc[i], ch, 3);
        rw.norm2_w = b.f32(r + "norm2.weight", {boc[i]});
        rw.norm2_b = b.f32(r + "norm2.bias", {boc[i]});
        rw.conv2 = b.conv(r + "conv2.", boc[i], boc[i], 3);
        if (ch != boc[i]) rw.shortcut = b.conv(r + "conv_shortcut.", boc[i], ch, 1);
        blk.resnets.push_back(std::move(rw));
        ch = boc[i];
      }
      blk.spatial_stride = c.spatial_downsample_factors[i];
      blk.temporal_stride = c.temporal_downsample_factors[i];
      if (blk.spatial_stride * blk.temporal_stride > 1)
        blk.downsampler = b.conv(p + "downsamplers.0.conv.", boc[i], boc[i], 3);
      e.blocks.push_back(std::move(blk));
    }
    e.norm_out_w = b.f32("encoder.norm_out.weight", {ch});
    e.norm_out_b = b.f32("encoder.norm_out.bias", {ch});
    e.conv_out = b.conv("encoder.conv_out.", 2 * c.latent_channels, ch, 3);
    e.quant_conv = b.conv("quant_conv.", 2 * c.latent_channels, 2 * c.latent_channels, 1);
  }
  if (policy.load_decoder) {
    w.has_decoder = true;
    DecoderWeights& d = w.decoder;
    const int64_t lat = c.latent_channels, width = c.decoder_width(), ff = c.decoder_ffn_dim();
    d.post_quant_w = b.gemm("post_quant_conv.weight", {lat, lat, 1, 1, 1}).view({lat, lat});
    d.post_quant_b = b.gemm("post_quant_conv.bias", {lat});
    d.proj_in_w = b.gemm("decoder.proj_in.weight", {width, lat});
    d.proj_in_b = b.gemm("decoder.proj_in.bias", {width});
    d.register_tokens = b.f32("decoder.register_tokens", {1, c.decoder_num_register_tokens, width})
                            .view({c.decoder_num_register_tokens, width});
    for (int64_t i = 0; i < c.decoder_num_layers; ++i) {
      const std::string p = "decoder.transformer_blocks." + std::to_string(i) + ".";
      DecoderBlockWeights bw;
      bw.norm1 = b.f32(p + "norm1.weight", {width});
      bw.q_w = b.gemm(p + "attn.to_q.weight", {width, width});
      bw.q_b = b.gemm(p + "attn.to_q.bias", {width});
      bw.k_w = b.gemm(p + "attn.to_k.weight", {width, width});
      bw.k_b = b.gemm(p + "attn.to_k.bias", {width});
      bw.v_w = b.gemm(p + "attn.to_v.weight", {width, width});
      bw.v_b = b.gemm(p + "attn.to_v.bias", {width});
      bw.out_w = b.gemm(p + "attn.to_out.0.weight", {width, width});
      bw.out_b = b.gemm(p + "attn.to_out.0.bias", {width});
      bw.scale1 = b.f32(p + "scale1", {width});
      bw.norm2 = b.f32(p + "norm2.weight", {width});
      bw.ff_in_w = b.gemm(p + "ff.net.0.proj.weight", {2 * ff, width});
      bw.ff_in_b = b.gemm(p + "ff.net.0.proj.bias", {2 * ff});
      bw.ff_out_w = b.gemm(p + "ff.net.2.weight", {width, ff});
      bw.ff_out_b = b.gemm(p + "ff.net.2.bias", {width});
      bw.scale2 = b.f32(p + "scale2", {width});
      if (policy.decoder_fp8) {
        // Block by block, so the float copies of one block are released before the next loads.
        ops::quantize_projection_fp8(bw.q_w, bw.q_s);
        ops::quantize_projection_fp8(bw.k_w, bw.k_s);
        ops::quantize_projection_fp8(bw.v_w, bw.v_s);
        ops::quantize_projection_fp8(bw.out_w, bw.out_s);
        ops::quantize_projection_fp8(bw.ff_in_w, bw.ff_in_s);
        ops::quantize_projection_fp8(bw.ff_out_w, bw.ff_out_s);
      }
      d.blocks.push_back(std::move(bw));
    }
    d.norm_out_w = b.f32("decoder.norm_out.weight", {width});
    d.norm_out_b = b.f32("decoder.norm_out.bias", {width});
    const int64_t patch = c.out_channels * c.temporal_ratio() * c.spatial_ratio() * c.spatial_ratio();
    d.proj_out_w = b.gemm("decoder.proj_out.weight", {patch, width});
    d.proj_out_b = b.gemm("decoder.proj_out.bias", {patch});
  }
  return w;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

VideoVaeWeights load_video_vae_weights(const VideoVaeConfig& config, const io::Checkpoint& ckpt,
                                       const VideoVaeWeightPolicy& policy) {
  const models::Schema schema = models::video_vae_schema(config.to_json(), ckpt.source());
  const models::SchemaCheck check = models::check_schema(schema, ckpt);
  if (!check.ok()) {
    std::string msg;
    for (const auto& e : check.errors()) msg += "\n  " + e;
    fail(ErrorCode::kInvalidFile, "video VAE checkpoint ", ckpt.source(),
         " does not match its config:", msg);
  }
  // On CUDA every tensor the build will ask for is read in one pass in file order (the loader
  // overlaps reads and copies across tensors; one call per tensor would serialize them). The
  // encoder's tensors (and quant_conv, its output projection) only when the encoder is built, the
  // others only when the decoder is.
  std::map<std::string, Tensor> preloaded;
  if (policy.device.is_cuda()) {
    std::vector<io::LoadItem> items;
    for (const std::string& name : ckpt.names()) {
      const bool encoder_side = name.rfind("encoder.", 0) == 0 || name.rfind("quant_conv.", 0) == 0;
      if (!(encoder_side ? policy.load_encoder : policy.load_decoder)) continue;
      items.push_back({name, std::nullopt});
    }
    std::vector<Tensor> ts = io::load_tensors_to(ckpt, items, policy.device);
    for (size_t i = 0; i < items.size(); ++i) preloaded.emplace(items[i].name, std::move(ts[i]));
  }
  // Each preloaded tensor is taken out of the set when the build asks for it (every name is asked
  // for once): a float32 GEMM weight cast to the float16 policy is freed right after its cast, so
  // the next cast's output reuses its memory instead of growing the pool by the float16 copies
  // while the whole float32 set is still held.
  const Source src = [&ckpt, &preloaded](const std::string& name, const Shape&) {
    H3_CHECK(ckpt.has(name), ErrorCode::kNotFound, "video VAE checkpoint ", ckpt.source(),
             " has no tensor '", name, "'");
    Tensor t;
    if (const auto it = preloaded.find(name); it != preloaded.end()) {
      t = std::move(it->second);
      preloaded.erase(it);
    } else {
      t = ckpt.tensor(name);
    }
    H3_CHECK(dtype_is_float(t.dtype()), ErrorCode::kInvalidFile, "video VAE weight '", name,
             "' must be floating point, got ", t.desc());
    return t;
  };
  return build(config, src, policy);
}

VideoVaeWeights random_video_vae_weights(const VideoVaeConfig& config, uint64_t seed,
                                         const VideoVaeWeightPolicy& policy) {
  const Source src = [seed](const std::string& name, const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    float* p = t.data<float>();
    const int64_t n = t.numel();
    const uint64_t state0 = name_hash(name) ^ (seed * 0x2545f4914f6cdd1dull);
    uint64_t state = state0;
    auto uniform = [&state]() {  // [-1, 1)
      return static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);
    };
    const bool vector = shape.size() == 1;
    if (vector && (ends_with(name, "scale1") || ends_with(name, "scale2"))) {
      for (int64_t i = 0; i < n; ++i) p[i] = 0.1f;
    } else if (vector && ends_with(name, ".weight")) {  // norm weights
      for (int64_t i = 0; i < n; ++i) p[i] = 1.0f + 0.05f * uniform();
    } else if (vector) {  // biases
      for (int64_t i = 0; i < n; ++i) p[i] = 0.02f * uniform();
    } else {
      int64_t fan_in = 1;
      for (size_t d = 1; d < shape.size(); ++d) fan_in *= shape[d];
      if (ends_with(name, "register_tokens")) fan_in = 1;
      const float bound = static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in)));
      // splitmix64 steps its state by a constant, so value i follows from state0 + i steps: large
      // matrices (the released decoder has 2.4 G weights) are filled by several threads, same values.
      const int64_t parts = n >= (int64_t{1} << 22) ? std::max(1u, std::thread::hardware_concurrency()) : 1;
      std::vector<std::thread> pool;
      for (int64_t part = 0; part < parts; ++part) {
        const int64_t lo = n * part / parts, hi = n * (part + 1) / parts;
        auto fill = [=] {
          uint64_t st = state0 + static_cast<uint64_t>(lo) * 0x9e3779b97f4a7c15ull;
          for (int64_t i = lo; i < hi; ++i)
            p[i] = bound * static_cast<float>(static_cast<double>(splitmix64(st) >> 11) * 0x1.0p-52 - 1.0);
        };
        if (parts == 1) fill();
        else pool.emplace_back(fill);
      }
      for (std::thread& th : pool) th.join();
    }
    return t;
  };
  return build(config, src, policy);
}

uint64_t video_vae_weight_bytes(const VideoVaeWeights& w) {
  uint64_t total = 0;
  auto add = [&total](const Tensor& t) {
    if (t.defined()) total += t.nbytes();
  };
  auto add_conv = [&add](const ConvWeights& c) {
    add(c.w);
    add(c.b);
  };
  if (w.has_encoder) {
    const EncoderWeights& e = w.encoder;
    add_conv(e.conv_in);
    for (const auto& blk : e.blocks) {
      for (const auto& r : blk.resnets) {
        add(r.norm1_w), add(r.norm1_b), add_conv(r.conv1), add(r.norm2_w), add(r.norm2_b);
        add_conv(r.conv2), add_conv(r.shortcut);
      }
      add_conv(blk.downsampler);
    }
    add(e.norm_out_w), add(e.norm_out_b), add_conv(e.conv_out), add_conv(e.quant_conv);
  }
  if (w.has_decoder) {
    const DecoderWeights& d = w.decoder;
    for (const Tensor* t : {&d.post_quant_w, &d.post_quant_b, &d.proj_in_w, &d.proj_in_b,
                            &d.register_tokens, &d.norm_out_w, &d.norm_out_b, &d.proj_out_w,
                            &d.proj_out_b})
      add(*t);
    for (const auto& b : d.blocks) {
      for (const Tensor* t : {&b.norm1, &b.q_w, &b.q_b, &b.k_w, &b.k_b, &b.v_w, &b.v_b, &b.out_w,
                              &b.out_b, &b.scale1, &b.norm2, &b.ff_in_w, &b.ff_in_b, &b.ff_out_w,
                              &b.ff_out_b, &b.scale2, &b.q_s, &b.k_s, &b.v_s, &b.out_s, &b.ff_in_s,
                              &b.ff_out_s})
        add(*t);
    }
  }
  return total;
}

}  // namespace h3::video_vae
