#include "models/audio_vae/audio_vae_weights.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/phase_timer.h"
#include "core/status.h"
#include "io/device_loader.h"
#include "models/audio_vae/audio_vae_filters.h"
#include "models/schema.h"
#include "ops/ops.h"

namespace h3::audio_vae {

Tensor fold_weight_norm(const Tensor& g, const Tensor& v) {
  H3_CHECK(v.defined() && g.defined() && v.dim() >= 1 && v.size(0) >= 1, ErrorCode::kInvalidArgument,
           "fold_weight_norm: weight_v must be a non-empty tensor, got ",
           v.defined() ? v.desc() : std::string("<undefined>"));
  H3_CHECK(g.numel() == v.size(0), ErrorCode::kInvalidArgument, "fold_weight_norm: weight_g ",
           g.desc(), " must hold one gain per slice of dim 0 of weight_v ", v.desc());
  H3_CHECK(dtype_is_float(g.dtype()) && dtype_is_float(v.dtype()), ErrorCode::kInvalidArgument,
           "fold_weight_norm: weight_g ", g.desc(), " and weight_v ", v.desc(), " must be float");
  H3_CHECK(g.device() == v.device(), ErrorCode::kInvalidArgument, "fold_weight_norm: weight_g ",
           g.desc(), " and weight_v ", v.desc(), " must be on one device");
  const Tensor vf = v.dtype() == DType::kF32 ? v
                    : v.device().is_cuda()   ? ops::cast(v, DType::kF32)
                                             : v.to(DType::kF32);
  return ops::weight_norm(g, vf);
}

Tensor head_pool_matrix(int64_t heads, int64_t head_dim, int64_t out_dim) {
  H3_CHECK(heads >= 1 && head_dim >= 1 && out_dim >= 1, ErrorCode::kInvalidArgument,
           "head_pool_matrix: heads ", heads, ", head_dim ", head_dim, " and out_dim ", out_dim,
           " must be positive");
  const int64_t in = heads * head_dim;
  std::vector<float> m(static_cast<size_t>(out_dim * in), 0.0f);
  for (int64_t o = 0; o < out_dim; ++o) {
    const int64_t start = (o * head_dim) / out_dim;
    const int64_t end = ((o + 1) * head_dim + out_dim - 1) / out_dim;
    const double w = 1.0 / (static_cast<double>(heads) * static_cast<double>(end - start));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = start; d < end; ++d) m[static_cast<size_t>(o * in + h * head_dim + d)] = static_cast<float>(w);
  }
  return Tensor::from_f32(m, {out_dim, in});
}

namespace {

// Builds the weights on the policy's device. On the CPU the stored tensors are the checkpoint's
// mmap views, converted and folded on the host. On CUDA every tensor of the requested parts but
// the anti-aliasing filters is read first in one pass straight onto the device, in its stored
// dtype, into one allocation (io::load_tensors_to, LoadLayout::kPacked: the pinned staging ring,
// one read in file order; a released decoder has 660 such tensors, most of a few kilobytes), and
// the preparation runs there with ops: each weight-norm fold writes w over its float32 v in place
// (ops::weight_norm_into), so the folded weights need no memory beyond what was read and no
// allocation at all; concatenations and casts make their own tensors. The filters, 12 taps each,
// are read on the host, checked, repeated per channel and uploaded together by a host thread
// beside the device pass (prepare_filters), which spends most of its time waiting for copies.
class Builder {
 public:
  static constexpr const char* kUpFilter = "upsample.filter";
  static constexpr const char* kDownFilter = "downsample.lowpass.filter";

  Builder(const io::Checkpoint& ckpt, const AudioVaeWeightPolicy& p) : ckpt_(ckpt), policy_(p) {}

  // CUDA: reads `names` onto the device in one pass, into one allocation; later requests for
  // them take these copies.
  void preload(const std::vector<std::string>& names) {
    preload_to(names, policy_.device, io::LoadLayout::kPacked, preloaded_);
  }
  // The filters, read on the host through the loader too, so that the component's bytes read
  // (io::device_load_totals) count them; before the device pass, which names the load's method.
  void preload_host(const std::vector<std::string>& names) {
    preload_to(names, Device::cpu(), io::LoadLayout::kSeparate, host_);
  }

  // A stored tensor as float32 of `shape` (reshaped from the stored shape when the element count
  // agrees, e.g. Snake alphas [1, C, 1] -> [C]), on the device.
  Tensor f32(const std::string& name, const Shape& shape) const {
    if (on_device()) return device_f32(name, shape);
    return place(host(name, shape));
  }

  ConvWeights wn_conv(const std::string& prefix, const Shape& v_shape, bool bias) const {
    ConvWeights c;
    c.w = folded(prefix, v_shape);
    if (bias) c.b = f32(prefix + "bias", {v_shape[0]});
    return c;
  }
  // ConvTranspose1d [in, out, k]: the bias has one entry per output channel.
  ConvWeights wn_conv_transpose(const std::string& prefix, int64_t cin, int64_t cout, int64_t k) const {
    return {folded(prefix, {cin, cout, k}), f32(prefix + "bias", {cout})};
  }
  ConvWeights plain_conv(const std::string& prefix, int64_t cout, int64_t cin, int64_t k) const {
    return {f32(prefix + "weight", {cout, cin, k}), f32(prefix + "bias", {cout})};
  }

  // The attention's bias [q_bias | zero_k_bias | v_bias] (§3.3): the stored zero key bias is used
  // as stored, like every other buffer.
  Tensor qkv_bias(int64_t ld) const {
    const char* names[3] = {"pre_block.attn.q_bias", "pre_block.attn.zero_k_bias",
                            "pre_block.attn.v_bias"};
    if (on_device()) {
      std::vector<Tensor> parts;
      for (const char* name : names) parts.push_back(device_f32(name, {ld}));
      return ops::concat(parts, 0);
    }
    std::vector<float> bias;
    for (const char* name : names) {
      const std::vector<float> part = host(name, {ld}).to_f32_vector();
      bias.insert(bias.end(), part.begin(), part.end());
    }
    return place(Tensor::from_f32(bias, {3 * ld}));
  }

  // Anti-aliased SnakeBeta parameters. On the device the filters are views of the buffer
  // prepare_filters uploaded.
  ActivationWeights activation(const std::string& prefix, int64_t channels) const {
    ActivationWeights a;
    a.log_alpha = f32(prefix + "act.alpha", {channels});
    a.log_beta = f32(prefix + "act.beta", {channels});
    const std::string up = prefix + kUpFilter, down = prefix + kDownFilter;
    if (on_device()) {
      a.up_filter = device_filter(up, channels);
      a.down_filter = device_filter(down, channels);
    } else {
      a.up_filter = place(repeat_filter(filter(up), channels, static_cast<float>(kAliasRatio)));
      a.down_filter = place(repeat_filter(filter(down), channels, 1.0f));
    }
    return a;
  }

  // Device loads: the filters of `activations` (name prefix, channels), checked, repeated per
  // channel (the up filter times the ratio) and packed into one buffer, each at a 256-byte
  // boundary, that goes to the device in one copy. Runs on a host thread beside the device pass,
  // after preload_host; activation() then takes views of the buffer.
  void prepare_filters(const std::vector<std::pair<std::string, int64_t>>& activations) {
    if (!on_device()) return;
    constexpr size_t kAlign = 256 / sizeof(float);
    std::vector<float> packed;
    for (const auto& [prefix, channels] : activations) {
      for (const bool up : {true, false}) {
        const std::string name = prefix + (up ? kUpFilter : kDownFilter);
        filter_at_[name] = static_cast<int64_t>(packed.size());
        append_repeated(filter(name), channels, up ? static_cast<float>(kAliasRatio) : 1.0f, &packed);
        packed.resize((packed.size() + kAlign - 1) / kAlign * kAlign, 0.0f);
      }
    }
    if (!packed.empty())
      device_filters_ =
          Tensor::from_f32(packed, {static_cast<int64_t>(packed.size())}).to(policy_.device);
  }

  Tensor place(const Tensor& host_tensor) const { return host_tensor.to(policy_.device); }

  Tensor host(const std::string& name, const Shape& shape) const {
    const auto it = host_.find(name);
    Tensor t = it != host_.end() ? it->second : ckpt_.has(name) ? ckpt_.tensor(name) : Tensor();
    return stored(name, shape, std::move(t)).to(DType::kF32).contiguous().reshape(shape);
  }

 private:
  bool on_device() const { return policy_.device.is_cuda(); }

  void preload_to(const std::vector<std::string>& names, Device device, io::LoadLayout layout,
                  std::map<std::string, Tensor>& into) {
    if (names.empty()) return;
    std::vector<io::LoadItem> items;
    items.reserve(names.size());
    for (const std::string& n : names) items.push_back({n, std::nullopt});
    std::vector<Tensor> ts = io::load_tensors_to(ckpt_, items, device, layout);
    for (size_t i = 0; i < names.size(); ++i) into.emplace(names[i], std::move(ts[i]));
  }

  // Checks a stored tensor (`t` undefined: missing) against the expected shape.
  Tensor stored(const std::string& name, const Shape& shape, Tensor t) const {
    H3_CHECK(t.defined(), ErrorCode::kInvalidFile, "audio VAE checkpoint ", ckpt_.source(),
             ": missing tensor '", name, "'");
    H3_CHECK(t.numel() == shape_numel(shape), ErrorCode::kInvalidFile, "audio VAE weight '", name,
             "' has shape ", shape_str(t.shape()), ", expected ", shape_str(shape));
    H3_CHECK(dtype_is_float(t.dtype()), ErrorCode::kInvalidFile, "audio VAE weight '", name,
             "' must be floating point, got ", t.desc());
    return t;
  }

  // The device copy of a stored tensor, taken out of the preloaded set (each is used once). The
  // preloaded tensors share one allocation, which lives as long as any weight made of it: the
  // weights used as stored and the folds written over their v; the weight_g gains (one float per
  // channel) stay in it unused.
  Tensor device_stored(const std::string& name, const Shape& shape) const {
    Tensor t;
    const auto it = preloaded_.find(name);
    if (it != preloaded_.end()) {
      t = std::move(it->second);
      preloaded_.erase(it);
    } else if (ckpt_.has(name)) {
      t = io::load_tensor_to(ckpt_, name, policy_.device);  // not expected: every name is preloaded
    }
    return stored(name, shape, std::move(t)).view(shape);
  }

  Tensor device_f32(const std::string& name, const Shape& shape) const {
    Tensor t = device_stored(name, shape);
    return t.dtype() == DType::kF32 ? t : ops::cast(t, DType::kF32);
  }

  Tensor folded(const std::string& prefix, const Shape& v_shape) const {
    if (on_device()) {
      const Tensor g = device_stored(prefix + "weight_g", {v_shape[0], 1, 1});
      Tensor v = device_stored(prefix + "weight_v", v_shape);
      if (v.dtype() != DType::kF32 || !v.is_contiguous())
        return fold_weight_norm(g.dtype() == DType::kF32 ? g : ops::cast(g, DType::kF32), v);
      // Over v where it lies: the same kernel and bits as fold_weight_norm, no allocation.
      ops::weight_norm_into(v, g, v);
      return v;
    }
    const Tensor v = host(prefix + "weight_v", v_shape);
    const Tensor g = host(prefix + "weight_g", {v_shape[0], 1, 1});
    return place(fold_weight_norm(g, v));
  }

  // [C, 1, K] view of the uploaded filter `name` (prepare_filters).
  Tensor device_filter(const std::string& name, int64_t channels) const {
    const auto it = filter_at_.find(name);
    H3_CHECK(it != filter_at_.end() && device_filters_.defined(), ErrorCode::kInternal,
             "audio VAE ", ckpt_.source(), ": filter '", name, "' was not prepared for ",
             policy_.device.str());
    return device_filters_.slice(0, it->second, it->second + channels * kAliasFilterTaps)
        .view({channels, 1, kAliasFilterTaps});
  }

  std::vector<float> filter(const std::string& name) const {
    std::vector<float> taps = host(name, {kAliasFilterTaps}).to_f32_vector();
    if (built_filter_.empty()) built_filter_ = alias_free_filter();  // the same for every filter
    const std::vector<float>& built = built_filter_;
    double worst = 0.0;
    for (size_t i = 0; i < taps.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(taps[i]) - built[i]));
    if (worst > 1e-6) {
      ++filters_differing_;
      worst_filter_difference_ = std::max(worst_filter_difference_, worst);
    }
    return taps;
  }

 public:
  // One line for the whole component (a released decoder has about 130 filters): the stored
  // values are used either way, as the reference does.
  void report_filters() const {
    if (filters_differing_ == 0) return;
    H3_LOG_WARN("audio VAE ", ckpt_.source(), ": ", filters_differing_,
                " anti-alias filters differ from the Kaiser-sinc construction (largest difference ",
                worst_filter_difference_, "); using the stored values, as the reference does");
  }

 private:
  // [C, 1, K] on the host; on the CPU policy that is its place.
  static Tensor repeat_filter(const std::vector<float>& taps, int64_t channels, float gain) {
    std::vector<float> out;
    append_repeated(taps, channels, gain, &out);
    return Tensor::from_f32(out, {channels, 1, static_cast<int64_t>(taps.size())});
  }
  // gain * taps, once per channel, appended to `out` (repeat_filter's values, in its order).
  static void append_repeated(const std::vector<float>& taps, int64_t channels, float gain,
                              std::vector<float>* out) {
    for (int64_t c = 0; c < channels; ++c)
      for (const float t : taps) out->push_back(gain * t);
  }

  const io::Checkpoint& ckpt_;
  const AudioVaeWeightPolicy& policy_;
  mutable std::map<std::string, Tensor> preloaded_;  // on the device, taken out as used
  std::map<std::string, Tensor> host_;               // the filters of a device load
  std::map<std::string, int64_t> filter_at_;         // each filter's place in device_filters_
  Tensor device_filters_;                            // the decoder's filters, packed (device)
  mutable std::vector<float> built_filter_;          // the Kaiser-sinc construction, once
  mutable int64_t filters_differing_ = 0;
  mutable double worst_filter_difference_ = 0.0;
};

EncoderWeights build_encoder(const AudioVaeConfig& c, const Builder& b) {
  EncoderWeights e;
  e.conv_in = b.wn_conv("encoder.block.0.", {c.encoder_dim, 1, 7}, true);
  int64_t d = c.encoder_dim;  // residual-unit width of the current block (§3.3: d/2 of its output)
  const int64_t dilations[3] = {1, 3, 9};
  for (size_t i = 0; i < c.encoder_rates.size(); ++i) {
    const std::string p = "encoder.block." + std::to_string(i + 1) + ".block.";
    EncoderBlockWeights blk;
    for (int u = 0; u < 3; ++u) {
      const std::string r = p + std::to_string(u) + ".block.";
      ResidualUnitWeights ru;
      ru.alpha1 = b.f32(r + "0.alpha", {d});
      ru.conv1 = b.wn_conv(r + "1.", {d, d, 7}, true);
      ru.alpha2 = b.f32(r + "2.alpha", {d});
      ru.conv2 = b.wn_conv(r + "3.", {d, d, 1}, true);
      ru.dilation = dilations[u];
      blk.units.push_back(std::move(ru));
    }
    blk.alpha = b.f32(p + "3.alpha", {d});
    blk.stride = c.encoder_rates[i];
    blk.down = b.wn_conv(p + "4.", {2 * d, d, 2 * blk.stride}, true);
    e.blocks.push_back(std::move(blk));
    d *= 2;
  }
  const size_t n = c.encoder_rates.size();
  e.alpha_out = b.f32("encoder.block." + std::to_string(n + 1) + ".alpha", {d});
  e.conv_out = b.wn_conv("encoder.block." + std::to_string(n + 2) + ".", {c.latent_dim, d, 3}, true);

  PreBlockWeights& pb = e.pre_block;
  const int64_t ld = c.latent_dim, lc = c.latent_channels;
  pb.norm1_w = b.f32("pre_block.norm1.weight", {ld});
  pb.norm1_b = b.f32("pre_block.norm1.bias", {ld});
  pb.norm3_w = b.f32("pre_block.norm3.weight", {ld});
  pb.norm3_b = b.f32("pre_block.norm3.bias", {ld});
  pb.norm2_w = b.f32("pre_block.norm2.weight", {lc});
  pb.norm2_b = b.f32("pre_block.norm2.bias", {lc});
  pb.qkv_w = b.f32("pre_block.attn.qkv.weight", {3 * ld, ld});
  pb.qkv_b = b.qkv_bias(ld);  // F.linear(x, W, cat(q_bias, zero_k_bias, v_bias)) (§3.3)
  pb.head_pool = b.place(head_pool_matrix(c.num_attention_heads, c.head_dim(), lc));
  pb.attn_proj_w = b.f32("pre_block.attn.proj.weight", {lc, lc});
  pb.attn_proj_b = b.f32("pre_block.attn.proj.bias", {lc});
  pb.proj_w = b.f32("pre_block.proj.weight", {lc, ld});
  pb.proj_b = b.f32("pre_block.proj.bias", {lc});
  pb.mlp_norm_w = b.f32("pre_block.mlp.norm.weight", {lc});
  pb.mlp_norm_b = b.f32("pre_block.mlp.norm.bias", {lc});
  pb.w0 = b.f32("pre_block.mlp.w0.weight", {2 * lc, lc});
  pb.b0 = b.f32("pre_block.mlp.w0.bias", {2 * lc});
  pb.w1 = b.f32("pre_block.mlp.w1.weight", {2 * lc, lc});
  pb.b1 = b.f32("pre_block.mlp.w1.bias", {2 * lc});
  pb.w2 = b.f32("pre_block.mlp.w2.weight", {lc, 2 * lc});
  pb.b2 = b.f32("pre_block.mlp.w2.bias", {lc});

  e.mean_proj = b.plain_conv("mean_proj.", lc, lc, 1);
  e.logs_proj = b.plain_conv("logs_proj.", lc, lc, 1);
  return e;
}

std::string resblock_prefix(const AudioVaeConfig& c, size_t stage, size_t kernel) {
  return "decoder.resblocks." + std::to_string(stage * c.resblock_kernel_sizes.size() + kernel) + ".";
}

// The decoder's anti-aliased activations as build_decoder makes them: name prefix, channels.
std::vector<std::pair<std::string, int64_t>> decoder_activations(const AudioVaeConfig& c) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t i = 0; i < c.decoder_rates.size(); ++i)
    for (size_t j = 0; j < c.resblock_kernel_sizes.size(); ++j)
      for (size_t a = 0; a < 2 * c.resblock_dilation_sizes[j].size(); ++a)
        out.emplace_back(resblock_prefix(c, i, j) + "activations." + std::to_string(a) + ".",
                         c.decoder_channels(i));
  int64_t last = c.decoder_dim;  // halved by every upsampling, as in build_decoder
  for (size_t i = 0; i < c.decoder_rates.size(); ++i) last /= 2;
  out.emplace_back("decoder.activation_post.", last);
  return out;
}

DecoderWeights build_decoder(const AudioVaeConfig& c, const Builder& b) {
  DecoderWeights d;
  d.in_proj = b.plain_conv("dec_in_proj.", c.latent_dim, c.latent_channels, 1);
  d.conv_pre = b.wn_conv("decoder.conv_pre.", {c.decoder_dim, c.latent_dim, 7}, true);
  int64_t ch = c.decoder_dim;
  for (size_t i = 0; i < c.decoder_rates.size(); ++i) {
    const std::string p = "decoder.ups." + std::to_string(i) + ".0.";
    d.ups.push_back(b.wn_conv_transpose(p, ch, ch / 2, c.decoder_kernel_sizes[i]));
    d.rates.push_back(c.decoder_rates[i]);
    d.kernels.push_back(c.decoder_kernel_sizes[i]);
    ch /= 2;
  }
  const size_t nk = c.resblock_kernel_sizes.size();
  for (size_t i = 0; i < c.decoder_rates.size(); ++i) {
    const int64_t chi = c.decoder_channels(i);
    for (size_t j = 0; j < nk; ++j) {
      const std::string p = resblock_prefix(c, i, j);
      AmpBlockWeights amp;
      amp.kernel = c.resblock_kernel_sizes[j];
      amp.dilations = c.resblock_dilation_sizes[j];
      for (size_t m = 0; m < amp.dilations.size(); ++m) {
        amp.convs1.push_back(b.wn_conv(p + "convs1." + std::to_string(m) + ".", {chi, chi, amp.kernel}, true));
        amp.convs2.push_back(b.wn_conv(p + "convs2." + std::to_string(m) + ".", {chi, chi, amp.kernel}, true));
      }
      for (size_t a = 0; a < 2 * amp.dilations.size(); ++a)
        amp.acts.push_back(b.activation(p + "activations." + std::to_string(a) + ".", chi));
      d.resblocks.push_back(std::move(amp));
    }
  }
  d.act_post = b.activation("decoder.activation_post.", ch);
  d.conv_post = b.wn_conv("decoder.conv_post.", {1, ch, 7}, false);
  return d;
}

uint64_t bytes_of(const Tensor& t) { return t.defined() ? t.nbytes() : 0; }
uint64_t bytes_of(const ConvWeights& c) { return bytes_of(c.w) + bytes_of(c.b); }
uint64_t bytes_of(const ActivationWeights& a) {
  return bytes_of(a.log_alpha) + bytes_of(a.log_beta) + bytes_of(a.up_filter) + bytes_of(a.down_filter);
}

}  // namespace

AudioVaeWeights load_audio_vae_weights(const AudioVaeConfig& config, const io::Checkpoint& ckpt,
                                       const AudioVaeWeightPolicy& policy, PhaseTimer* phases) {
  // Phase times for H3_LOG_LEVEL=debug: a small component's load is mostly fixed costs. A caller
  // that times more of the load passes its own timer and logs it.
  PhaseTimer own;
  PhaseTimer& timer = phases ? *phases : own;
  const models::Schema schema = models::audio_vae_schema(config.to_json(), ckpt.source());
  const models::SchemaCheck check = models::check_schema(schema, ckpt);
  if (!check.ok()) {
    // The first few problems name the mismatch; a wrong config makes hundreds of them.
    const std::vector<std::string> errors = check.errors();
    constexpr size_t kShown = 8;
    std::string msg;
    for (size_t i = 0; i < errors.size() && i < kShown; ++i) msg += "\n  " + errors[i];
    if (errors.size() > kShown) msg += str_cat("\n  ... and ", errors.size() - kShown, " more");
    fail(ErrorCode::kInvalidFile, "audio VAE checkpoint ", ckpt.source(),
         " does not match its config:", msg);
  }
  timer.mark("schema");
  Builder b(ckpt, policy);
  if (policy.device.is_cuda()) {
    // The checkpoint holds exactly the schema's tensors (checked above): the decoder's are
    // decoder.* and dec_in_proj.*, every other one belongs to the encoder side.
    std::vector<std::string> names, filters;
    for (const std::string& n : ckpt.names()) {
      const bool decoder_side = n.rfind("decoder.", 0) == 0 || n.rfind("dec_in_proj.", 0) == 0;
      if (!(decoder_side ? policy.load_decoder : policy.load_encoder)) continue;
      const bool filter = n.size() >= 7 && n.compare(n.size() - 7, 7, ".filter") == 0;
      (filter ? filters : names).push_back(n);
    }
    // The filters are read on the host beside the device pass, which spends most of its time
    // waiting for copies (the two fill different maps of the builder).
    const io::LoadStats before = io::device_load_totals();
    std::exception_ptr host_error;
    std::thread host_reader([&] {
      try {
        b.preload_host(filters);
        if (policy.load_decoder) b.prepare_filters(decoder_activations(config));
      } catch (...) {
        host_error = std::current_exception();
      }
    });
    try {
      b.preload(names);
    } catch (...) {
      host_reader.join();
      throw;
    }
    host_reader.join();
    if (host_error) std::rethrow_exception(host_error);
    const io::LoadStats read = io::device_load_totals().since(before);
    // The loader's own split of the device pass: allocation, page-cache check, preads, issuing
    // the copies, waiting for them, and a benchmark's weight fill.
    timer.mark("device read", str_cat(names.size(), " tensors and ", filters.size(),
                                      " filters on the host beside them, ", read.bytes >> 20,
                                      " MiB: ", read.parts_str()));
  }
  AudioVaeWeights w;
  if (policy.load_encoder) {
    w.encoder = build_encoder(config, b);
    w.has_encoder = true;
    timer.mark("encoder built");
  }
  if (policy.load_decoder) {
    w.decoder = build_decoder(config, b);
    timer.mark("decoder built");
    w.has_decoder = true;
  }
  b.report_filters();
  if (!phases) H3_LOG_DEBUG("audio VAE load ", ckpt.source(), ": ", own.str());
  return w;
}

uint64_t audio_vae_weight_bytes(const AudioVaeWeights& w) {
  uint64_t n = 0;
  if (w.has_encoder) {
    const EncoderWeights& e = w.encoder;
    n += bytes_of(e.conv_in) + bytes_of(e.alpha_out) + bytes_of(e.conv_out);
    for (const auto& blk : e.blocks) {
      n += bytes_of(blk.alpha) + bytes_of(blk.down);
      for (const auto& u : blk.units) n += bytes_of(u.alpha1) + bytes_of(u.conv1) + bytes_of(u.alpha2) + bytes_of(u.conv2);
    }
    const PreBlockWeights& p = e.pre_block;
    for (const Tensor* t : {&p.norm1_w, &p.norm1_b, &p.norm3_w, &p.norm3_b, &p.norm2_w, &p.norm2_b,
                            &p.qkv_w, &p.qkv_b, &p.head_pool, &p.attn_proj_w, &p.attn_proj_b,
                            &p.proj_w, &p.proj_b, &p.mlp_norm_w, &p.mlp_norm_b, &p.w0, &p.b0,
                            &p.w1, &p.b1, &p.w2, &p.b2})
      n += bytes_of(*t);
    n += bytes_of(e.mean_proj) + bytes_of(e.logs_proj);
  }
  if (w.has_decoder) {
    const DecoderWeights& d = w.decoder;
    n += bytes_of(d.in_proj) + bytes_of(d.conv_pre) + bytes_of(d.act_post) + bytes_of(d.conv_post);
    for (const auto& u : d.ups) n += bytes_of(u);
    for (const auto& amp : d.resblocks) {
      for (const auto& c : amp.convs1) n += bytes_of(c);
      for (const auto& c : amp.convs2) n += bytes_of(c);
      for (const auto& a : amp.acts) n += bytes_of(a);
    }
  }
  return n;
}

}  // namespace h3::audio_vae
