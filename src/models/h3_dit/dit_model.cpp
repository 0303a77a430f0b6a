#include "models/h3_dit/dit_model.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/layer_stream.h"
#include "core/nvtx.h"
#include "core/part_timer.h"
#include "core/status.h"
#include "models/h3_dit/dit_tables.h"
#include "ops/fp8.h"
#include "ops/ops.h"

namespace h3::dit {
namespace {

// x W^T (+ b) plus the run-time LoRA pairs of W (dit_lora.h): the adapter's two thin GEMMs beside
// the weight's, so that the weights themselves stay as loaded.
Tensor add_lora(const Tensor& x, Tensor y, const RuntimeLora& lora) {
  for (const LowRankPair& p : lora) y = ops::linear_residual(ops::linear(x, p.down), p.up, y);
  return y;
}

Tensor lora_linear(const Tensor& x, const Tensor& w, const RuntimeLora& lora,
                   const Tensor* bias = nullptr) {
  return add_lora(x, ops::linear(x, w, bias), lora);
}

// A block projection: an FP8 weight (E4M3 with its per-channel or per-block `scale`,
// DitOptions::fp8) runs the FP8 GEMM with the activations quantized per token or per group (once
// per x: `xq` carries them to the next projection of the same x); any other weight, the plain
// linear.
Tensor block_linear(const Tensor& x, ops::Fp8Activation& xq, const Tensor& w, const Tensor& scale,
                    const RuntimeLora& lora) {
  return add_lora(x, ops::linear_projection(x, xq, w, scale), lora);
}

Tensor block_linear(const Tensor& x, const Tensor& w, const Tensor& scale,
                    const RuntimeLora& lora) {
  ops::Fp8Activation xq;
  return block_linear(x, xq, w, scale, lora);
}

// Drops a leading batch dimension of 1 (H3 always runs batch 1, §2.1).
Tensor drop_batch(const Tensor& t, int rank, const char* what) {
  H3_CHECK(t.defined(), ErrorCode::kInvalidArgument, "DiT input '", what, "' is missing");
  if (t.dim() == rank + 1) {
    H3_CHECK(t.size(0) == 1, ErrorCode::kUnsupported, "DiT input '", what, "' ", t.desc(),
             ": only batch 1 is supported");
    return t.select(0, 0);
  }
  H3_CHECK(t.dim() == rank, ErrorCode::kInvalidArgument, "DiT input '", what, "' ", t.desc(),
           ": expected ", rank, " dimensions (or ", rank + 1, " with a batch of 1)");
  return t;
}

Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

bool is_integer(DType t) { return t == DType::kI64 || t == DType::kI32; }

std::vector<int64_t> host_indices(const Tensor& t, const char* what) {
  H3_CHECK(is_integer(t.dtype()), ErrorCode::kInvalidArgument, "DiT input '", what, "' ", t.desc(),
           ": expected an integer tensor");
  return on_host(t).to_i64_vector();
}

Tensor chunk(const Tensor& m, int64_t k, int64_t width) {
  return ops::copy(m.slice(1, k * width, (k + 1) * width));
}

}  // namespace

int64_t resolve_resident_blocks(const DitOptions& o, int64_t num_layers) {
  int64_t n = num_layers;
  if (o.resident_blocks) {
    n = *o.resident_blocks;
    H3_CHECK(n >= 0 && n <= num_layers, ErrorCode::kInvalidArgument,
             "DiT option resident_blocks = ", n, ": expected a block count in [0, ", num_layers,
             "]");
    H3_CHECK(!o.cpu_offload || n == 0, ErrorCode::kInvalidArgument,
             "DiT options cpu_offload (--cpu-offload) and resident_blocks = ", n,
             " contradict each other: cpu_offload streams every block (resident_blocks = 0)");
  } else if (o.cpu_offload) {
    n = 0;
  }
  // Streaming goes from host memory to a CUDA device; on the CPU it would be a silent no-op,
  // which hides a wrong command line or plan, so it is refused.
  H3_CHECK(!o.fp8 || n == num_layers, ErrorCode::kUnsupported,
           "--dit-dtype fp8 keeps every DiT block resident; streaming FP8 blocks from host memory ",
           "(--cpu-offload, or a plan that streams ", num_layers - n, " of ", num_layers,
           " blocks) is not implemented");
  if (o.cpu_offload || n < num_layers) {
    H3_CHECK(o.device.is_cuda(), ErrorCode::kUnsupported,
             o.cpu_offload
                 ? std::string("DiT option cpu_offload (--cpu-offload)")
                 : str_cat("DiT option resident_blocks = ", n, " (of ", num_layers, " blocks)"),
             " needs a CUDA device to stream blocks from pinned host memory; the model runs on ",
             o.device.str(), ", where the weights already live in host memory");
  }
  return n;
}

const char* precision_name(DitPrecision p) { return p == DitPrecision::kF32 ? "f32" : "bf16"; }

DitPrecision parse_precision(const std::string& text) {
  if (text == "f32" || text == "fp32" || text == "float32") return DitPrecision::kF32;
  if (text == "bf16" || text == "bfloat16") return DitPrecision::kBF16;
  fail(ErrorCode::kInvalidArgument, "DiT precision '", text, "': expected f32 or bf16");
}

const char* attention_backend_name(DitAttentionBackend b) {
  return b == DitAttentionBackend::kDense ? "dense" : "vsa";
}

DitAttentionBackend parse_attention_backend(const std::string& text) {
  if (text == "dense") return DitAttentionBackend::kDense;
  if (text == "vsa") return DitAttentionBackend::kVsa;
  fail(ErrorCode::kInvalidArgument, "attention backend '", text, "': expected dense or vsa");
}

DitModel DitModel::load(const std::string& component_dir, const DitOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  H3_CHECK(fs::is_directory(component_dir, ec), ErrorCode::kNotFound, component_dir,
           ": transformer component folder not found");
  const DitConfig config = DitConfig::load(component_dir);
  const io::Checkpoint ckpt = io::Checkpoint::open(component_dir);
  return from_checkpoint(config, ckpt, options);
}

DitModel DitModel::from_checkpoint(const DitConfig& config, const io::Checkpoint& ckpt,
                                   const DitOptions& options) {
  config.validate(ckpt.source());
  DitModel m;
  m.config_ = config;
  m.options_ = options;
  m.resident_blocks_ = resolve_resident_blocks(options, config.num_layers);
  m.act_ = options.precision == DitPrecision::kF32 ? DType::kF32 : DType::kBF16;
  const bool streams = m.resident_blocks_ < config.num_layers;
  m.weights_ =
      load_dit_weights(config, ckpt, {options.device, m.act_, streams ? m.resident_blocks_ : -1});
  if (options.fp8) quantize_block_linears_fp8(m.weights_, options.fp8_scaling);
  m.init_common();
  return m;
}

DitModel DitModel::from_weights(const DitConfig& config, DitWeights weights,
                                const DitOptions& options) {
  config.validate("DiT config");
  DitModel m;
  m.config_ = config;
  m.options_ = options;
  m.resident_blocks_ = resolve_resident_blocks(options, config.num_layers);
  m.act_ = options.precision == DitPrecision::kF32 ? DType::kF32 : DType::kBF16;
  H3_CHECK(static_cast<int64_t>(weights.blocks.size()) == config.num_layers,
           ErrorCode::kInvalidArgument, "DiT weights have ", weights.blocks.size(),
           " blocks, the config has ", config.num_layers);
  m.weights_ = std::move(weights);
  if (options.fp8) quantize_block_linears_fp8(m.weights_, options.fp8_scaling);
  if (m.resident_blocks_ < config.num_layers) {
    pin_blocks(m.weights_.blocks, m.act_, static_cast<size_t>(m.resident_blocks_));
  }
  m.init_common();
  return m;
}

void DitModel::init_common() {
  ones_ = Tensor::from_f32(std::vector<float>(static_cast<size_t>(config_.hidden_size), 1.0f),
                           {config_.hidden_size}, act_)
              .to(options_.device);
  const int64_t num_blocks = static_cast<int64_t>(weights_.blocks.size());
  if (resident_blocks_ < num_blocks) {
    std::vector<std::vector<Tensor>> lists;
    for (int64_t i = resident_blocks_; i < num_blocks; ++i) {
      DitBlockWeights b = weights_.blocks[static_cast<size_t>(i)];
      std::vector<Tensor> list;
      for (const Tensor* t : block_tensor_list(b)) list.push_back(*t);
      lists.push_back(std::move(list));
    }
    // The stream counts its own layers from 0: "DiT block 3 + streamed layer 2" is block 5.
    stream_ =
        std::make_shared<LayerStream>(std::move(lists), options_.device,
                                      str_cat("DiT block ", resident_blocks_, " + streamed layer"));
  }
  if (options_.attention != DitAttentionBackend::kVsa) return;
  // §5.1 knobs, checked once so that a bad value fails at load rather than mid-generation.
  const DitVsaOptions& v = options_.vsa;
  H3_CHECK(v.tile_size == 64 || v.tile_size == 256, ErrorCode::kInvalidArgument,
           "VSA tile size ", v.tile_size, ": expected 64 or 256");
  H3_CHECK(v.sparsity < 0.0 || v.sparsity < 1.0, ErrorCode::kInvalidArgument, "VSA sparsity ",
           v.sparsity, ": expected a value in [0, 1)");
  H3_CHECK(config_.attention_head_dim == 64 || config_.attention_head_dim == 128,
           ErrorCode::kUnsupported, "VSA attention needs head size 64 or 128 (§5.1), the model has ",
           config_.attention_head_dim);
  for (int64_t l : v.dense_layers) {
    H3_CHECK(l >= 0 && l < config_.num_layers, ErrorCode::kInvalidArgument, "VSA dense layer ", l,
             ": expected a block index in [0, ", config_.num_layers, ")");
  }
  H3_CHECK(v.dense_first_steps >= 0, ErrorCode::kInvalidArgument, "VSA dense first steps ",
           v.dense_first_steps, ": expected >= 0");
}

uint64_t DitModel::stream_slot_bytes() const { return stream_ ? stream_->slot_bytes() : 0; }
uint64_t DitModel::stream_host_bytes() const { return stream_ ? stream_->host_bytes() : 0; }

DitBlockWeights DitModel::acquire_streamed(int64_t block, int64_t next_block) const {
  const int64_t next = next_block < 0 ? -1 : next_block - resident_blocks_;
  const std::vector<Tensor> views = stream_->acquire(block - resident_blocks_, next);
  // The host block supplies which optional tensors exist; its tensors are replaced by the views,
  // which come in the same order.
  DitBlockWeights w = weights_.blocks[static_cast<size_t>(block)];
  const std::vector<Tensor*> list = block_tensor_list(w);
  H3_CHECK(list.size() == views.size(), ErrorCode::kInternal, "DiT block ", block, ": ",
           views.size(), " streamed tensors for ", list.size(), " weights");
  for (size_t k = 0; k < list.size(); ++k) *list[k] = views[k];
  return w;
}

void DitModel::release_streamed(int64_t block) const { stream_->release(block - resident_blocks_); }

double DitModel::vsa_sparsity() const {
  const double s = options_.vsa.sparsity;
  if (s >= 0.0) return s;
  // FastH3 was trained at 0.9 (§5.1); the base checkpoint's default is the reference's 0.
  return weights_.has_vsa_gates ? 0.9 : 0.0;
}

double DitModel::vsa_sparsity_for(int64_t block, int64_t step_index) const {
  const DitVsaOptions& v = options_.vsa;
  if (step_index < v.dense_first_steps) return 0.0;
  if (std::find(v.dense_layers.begin(), v.dense_layers.end(), block) != v.dense_layers.end()) {
    return 0.0;
  }
  return vsa_sparsity();
}

// ---- building blocks ----------------------------------------------------------------------------

// Rotate-half RoPE on the first 6F channels of each head (§2.8).
Tensor DitModel::apply_rope(const Tensor& x, const DitLayout& layout) const {
  const int64_t r = config_.rotary_dim();
  if (!eager_bf16()) return ops::rope(x, layout.rope_cos, layout.rope_sin, static_cast<int>(r));
  // Eager reference: x*cos and rotate_half(x)*sin are each rounded to bf16, then their sum (§2.8).
  // Heads go first so that the [S, r/2] tables broadcast over the leading (head) dimension.
  const int64_t half = r / 2;
  const int64_t hd = config_.attention_head_dim;
  const Tensor xh = x.permute({1, 0, 2});  // [H, S, hd] view
  const Tensor x1 = ops::copy(xh.slice(2, 0, half));
  const Tensor x2 = ops::copy(xh.slice(2, half, r));
  const Tensor cos1 = ops::copy(layout.rope_cos.slice(1, 0, half));
  const Tensor cos2 = ops::copy(layout.rope_cos.slice(1, half, r));
  const Tensor sin1 = ops::copy(layout.rope_sin.slice(1, 0, half));
  const Tensor sin2 = ops::copy(layout.rope_sin.slice(1, half, r));
  const Tensor o1 = ops::add(ops::mul(x1, cos1), ops::mul(ops::scale(x2, -1.0f), sin1));
  const Tensor o2 = ops::add(ops::mul(x2, cos2), ops::mul(x1, sin2));
  std::vector<Tensor> parts = {o1, o2};
  if (r < hd) parts.push_back(ops::copy(xh.slice(2, r, hd)));
  return ops::copy(ops::concat(parts, 2).permute({1, 0, 2}));
}

// q/k/v projections, per-head RMSNorm, optional RoPE, full attention, output projection (§2.10).
Tensor DitModel::attention_layer(const Tensor& a, ops::Fp8Activation aq,
                                 const DitAttentionWeights& w, const DitLayout* rope,
                                 double vsa_sparsity, ops::VsaTrace* vsa_trace,
                                 const Tensor* vsa_mask) const {
  const int64_t s = a.defined() ? a.size(0) : aq.shape.at(0);
  const int64_t heads = config_.num_attention_heads;
  const int64_t hd = config_.attention_head_dim;
  const float eps = static_cast<float>(config_.qk_norm_eps);
  // `aq`: `a` in E4M3, for every FP8 projection of it (made by the first that needs it, if not
  // given)
  Tensor q = block_linear(a, aq, w.to_q, w.to_q_scale, w.to_q_lora).view({s, heads, hd});
  part("GEMM q");
  Tensor k = block_linear(a, aq, w.to_k, w.to_k_scale, w.to_k_lora).view({s, heads, hd});
  part("GEMM k");
  const Tensor v = block_linear(a, aq, w.to_v, w.to_v_scale, w.to_v_lora).view({s, heads, hd});
  part("GEMM v");
  if (rope) {
    q = norm_rope(q, w.norm_q, eps, *rope);
    k = norm_rope(k, w.norm_k, eps, *rope);
  } else {
    q = ops::rms_norm(q, &w.norm_q, eps);
    k = ops::rms_norm(k, &w.norm_k, eps);
  }
  part(rope ? "q/k norm + RoPE" : "q/k norm");
  Tensor o;
  if (vsa_sparsity >= 0.0 && rope && rope->has_vsa) {
    // §5.6: the gate reads the same modulated input as q/k/v; no bias, no activation. It runs
    // whenever the checkpoint has gates, at every sparsity.
    Tensor g;
    if (w.to_gate.defined()) {
      g = block_linear(a, aq, w.to_gate, w.to_gate_scale, w.to_gate_lora).view({s, heads, hd});
      part("GEMM gate");
    }
    ops::VsaOptions vo;
    vo.sparsity = vsa_sparsity;
    vo.mode = options_.vsa.mode;
    vo.block_mask = vsa_mask;
    o = ops::vsa_attention(q, k, v, g.defined() ? &g : nullptr, rope->vsa, vo, vsa_trace);
  } else {
    ops::AttentionParams p;  // scale 1/sqrt(head_dim), bidirectional, one document
    o = ops::attention(q, k, v, p);
  }
  part("attention");
  Tensor out = block_linear(o.reshape({s, heads * hd}), w.to_out, w.to_out_scale, w.to_out_lora);
  part("GEMM out");
  return out;
}

// SwiGLU with the fused projection split [value | gate] (§2.11).
Tensor DitModel::feed_forward(const Tensor& b, ops::Fp8Activation bq,
                              const DitFeedForwardWeights& w) const {
  const Tensor u = block_linear(b, bq, w.fc_in, w.fc_in_scale, w.fc_in_lora);
  part("GEMM ffn in");
  if (fp8_only_reader({{&w.fc_out, &w.fc_out_lora}})) {
    // Only the FP8 GEMM reads the product: it goes straight to E4M3 (the same bits as swiglu,
    // then quantize), the largest activation of the block never written in bf16.
    const ops::Fp8Activation hq = ops::swiglu_fp8(u, ops::projection_act_scaling(w.fc_out_scale));
    part("SwiGLU");
    Tensor out = ops::linear_fp8(hq, ops::projection_fp8(w.fc_out, w.fc_out_scale), nullptr);
    part("GEMM ffn out");
    return out;
  }
  Tensor h;
  if (eager_bf16()) {
    // h = bf16(value * bf16(silu(gate))): two roundings.
    const int64_t f = config_.ffn_dim;
    h = ops::mul(ops::copy(u.slice(1, 0, f)), ops::silu(ops::copy(u.slice(1, f, 2 * f))));
  } else {
    h = ops::swiglu(u);
  }
  part("SwiGLU");
  Tensor out = block_linear(h, w.fc_out, w.fc_out_scale, w.fc_out_lora);
  part("GEMM ffn out");
  return out;
}

// modulate_rows(rms_norm(x)) (§2.9 steps 1-2): under the fused policy one kernel that reads x
// once and rounds once (ops::rms_norm_modulate; H3_FUSE_RMSNORM_MODULATE=0 goes back to the two
// single-rounding kernels).
Tensor DitModel::norm_modulate(const Tensor& x, const Tensor& norm, float eps, const Tensor& scale,
                               const Tensor& shift, const Tensor& idx) const {
  if (eager_bf16()) return modulate_rows(ops::rms_norm(x, &norm, eps), scale, shift, idx);
  return ops::rms_norm_modulate(x, &norm, eps, scale, shift, idx);
}

// RoPE of the per-head RMSNorm of q or k (§2.10): under the fused policy one kernel
// (ops::qk_norm_rope; H3_FUSE_QKNORM_ROPE=0 goes back to two).
Tensor DitModel::norm_rope(const Tensor& x, const Tensor& norm, float eps,
                           const DitLayout& layout) const {
  if (eager_bf16()) return apply_rope(ops::rms_norm(x, &norm, eps), layout);
  return ops::qk_norm_rope(x, &norm, eps, layout.rope_cos, layout.rope_sin,
                           static_cast<int>(config_.rotary_dim()));
}

bool DitModel::fp8_only_reader(
    std::initializer_list<std::pair<const Tensor*, const RuntimeLora*>> projections) const {
  if (eager_bf16()) return false;  // that policy's roundings are the separate ops'
  for (const auto& [w, lora] : projections) {
    if (w->defined() && (w->dtype() != DType::kF8E4M3 || !lora->empty())) return false;
  }
  return true;
}

void DitModel::part(const char* name) const {
  if (part_timer_) part_timer_->mark(name);
}

// x * (1 + scale[idx]) + shift[idx] (§2.9 step 2).
Tensor DitModel::modulate_rows(const Tensor& x, const Tensor& scale, const Tensor& shift,
                               const Tensor& idx) const {
  if (!eager_bf16()) return ops::modulate(x, scale, shift, idx);
  // bf16(bf16(x * bf16(1 + scale)) + shift): three roundings in this order.
  const Tensor one_plus = ops::add(scale, ones_);
  return ops::add(ops::mul(x, ops::gather_rows(one_plus, idx)), ops::gather_rows(shift, idx));
}

// residual + gate[idx] * branch (§2.9 steps 4 and 7).
Tensor DitModel::gated_add(const Tensor& residual, const Tensor& branch, const Tensor& gate,
                           const Tensor& idx) const {
  if (!eager_bf16()) return ops::gated_residual(residual, branch, gate, idx);
  // bf16(residual + bf16(gate * branch)).
  return ops::add(residual, ops::mul(branch, ops::gather_rows(gate, idx)));
}

// ---- text ----------------------------------------------------------------------------------------

DitTextContext DitModel::encode_text(const Tensor& encoder_hidden_states, DitTrace* trace) const {
  const Tensor ehs = drop_batch(encoder_hidden_states, 2, "encoder_hidden_states");
  H3_CHECK(dtype_is_float(ehs.dtype()) && ehs.size(1) == config_.text_dim && ehs.size(0) > 0,
           ErrorCode::kInvalidArgument, "DiT input 'encoder_hidden_states' ", ehs.desc(),
           ": expected [L, ", config_.text_dim, "] float with L >= 1");
  const float eps = static_cast<float>(config_.norm_eps);
  // §2.3: the text enters in the model dtype (bf16 in the released policy).
  const Tensor x_in = ops::cast(ops::copy(ehs.to(options_.device)), act_);
  Tensor x = lora_linear(x_in, weights_.context_w, weights_.context_lora, &weights_.context_b);
  if (trace) trace->context_embedder_out = x;
  // §2.4: plain pre-norm blocks, no RoPE, no AdaLN, text-only attention.
  for (const DitRefinerBlockWeights& b : weights_.refiner) {
    x = ops::add(x, attention_layer(ops::rms_norm(x, &b.norm1, eps), {}, b.attn, nullptr));
    x = ops::add(x, feed_forward(ops::rms_norm(x, &b.norm2, eps), {}, b.ff));
  }
  DitTextContext ctx;
  ctx.embeds = ops::rms_norm(x, &weights_.refiner_final_norm,
                             static_cast<float>(config_.final_norm_eps));
  if (trace) trace->token_refiner_out = ctx.embeds;
  return ctx;
}

// ---- layout --------------------------------------------------------------------------------------

DitLayout DitModel::make_layout(const Tensor& position_ids_in, const Tensor& token_tags_in,
                                const Tensor& video_indices_in, const Tensor& audio_indices_in,
                                const Tensor& text_indices_in) const {
  const Tensor pos = drop_batch(position_ids_in, 2, "position_ids");
  H3_CHECK(dtype_is_float(pos.dtype()) && pos.size(1) == 3 && pos.size(0) > 0,
           ErrorCode::kInvalidArgument, "DiT input 'position_ids' ", pos.desc(),
           ": expected [S, 3] float (t, h, w) with S >= 1");
  const int64_t s = pos.size(0);
  DitLayout layout;
  layout.seq_len = s;

  layout.token_tags = host_indices(drop_batch(token_tags_in, 1, "token_tags"), "token_tags");
  H3_CHECK(static_cast<int64_t>(layout.token_tags.size()) == s, ErrorCode::kInvalidArgument,
           "DiT input 'token_tags' has ", layout.token_tags.size(), " entries, position_ids has ",
           s, " rows");
  for (size_t i = 0; i < layout.token_tags.size(); ++i) {
    H3_CHECK(layout.token_tags[i] >= 0 && layout.token_tags[i] <= 2, ErrorCode::kInvalidArgument,
             "DiT input 'token_tags'[", i, "] = ", layout.token_tags[i],
             ": expected 0 (video), 1 (text) or 2 (audio)");
  }

  // The three index sets must partition [0, S): every packed row is written exactly once (§2.1).
  std::vector<uint8_t> seen(static_cast<size_t>(s), 0);
  auto take = [&](const Tensor& t, const char* what) {
    const Tensor t1 = drop_batch(t, 1, what);
    const std::vector<int64_t> v = host_indices(t1, what);
    for (size_t i = 0; i < v.size(); ++i) {
      H3_CHECK(v[i] >= 0 && v[i] < s, ErrorCode::kInvalidArgument, "DiT input '", what, "'[", i,
               "] = ", v[i], " is outside the packed sequence [0, ", s, ")");
      H3_CHECK(!seen[static_cast<size_t>(v[i])], ErrorCode::kInvalidArgument, "DiT input '", what,
               "'[", i, "] = ", v[i], ": packed row already claimed by another index entry");
      seen[static_cast<size_t>(v[i])] = 1;
    }
    return Tensor::from_i64(v, {static_cast<int64_t>(v.size())}).to(options_.device);
  };
  layout.video_indices = take(video_indices_in, "video_indices");
  layout.audio_indices = take(audio_indices_in, "audio_indices");
  layout.text_indices = take(text_indices_in, "text_indices");
  for (int64_t r = 0; r < s; ++r) {
    H3_CHECK(seen[static_cast<size_t>(r)], ErrorCode::kInvalidArgument, "DiT packed row ", r,
             " is in none of text_indices, video_indices, audio_indices (they must partition [0, ",
             s, "))");
  }

  const std::vector<double> pos_host = on_host(pos).to_f64_vector();
  if (options_.attention == DitAttentionBackend::kVsa) {
    // §5.2: the generated video grid is the trailing run of video rows (the packed order is
    // [text | cond | audio | video] for T2VA/FL2VA, and Ref2VA ends with the grid as well, §5.7);
    // its extent per axis is the number of distinct positions. Prefix segments are then
    // (text, the other video rows, audio), whose sum is S - T*Hh*Ww in every layout.
    int64_t tail = 0;
    while (tail < s && layout.token_tags[static_cast<size_t>(s - 1 - tail)] == 0) ++tail;
    int64_t grid[3] = {0, 0, 0};
    for (int axis = 0; axis < 3; ++axis) {
      std::set<double> distinct;
      for (int64_t r = s - tail; r < s; ++r) distinct.insert(pos_host[static_cast<size_t>(r * 3 + axis)]);
      grid[axis] = static_cast<int64_t>(distinct.size());
    }
    H3_CHECK(tail > 0 && grid[0] * grid[1] * grid[2] == tail, ErrorCode::kInvalidArgument,
             "VSA layout: the trailing ", tail, " video rows do not form a full (T, H, W) grid (",
             grid[0], "x", grid[1], "x", grid[2], " distinct positions)");
    const int64_t cond = layout.num_video_rows() - tail;
    attach_vsa(layout, {layout.num_text_rows(), cond, layout.num_audio_rows()}, grid);
  }
  const RopeTables tables = rope_tables(pos_host, config_.rope_freq_dim, config_.rope_theta);
  // §2.8: cos/sin are cast once per layout to the activation dtype.
  layout.rope_cos = tables.cos.to(act_).to(options_.device);
  layout.rope_sin = tables.sin.to(act_).to(options_.device);
  return layout;
}

void DitModel::attach_vsa(DitLayout& layout, const std::vector<int64_t>& prefix_segments,
                          const int64_t grid[3]) const {
  layout.vsa = ops::build_vsa_geometry(options_.vsa.tile_size, prefix_segments, grid, layout.seq_len);
  layout.has_vsa = true;
}

// ---- forward -------------------------------------------------------------------------------------

Tensor DitModel::run_block(int64_t block, const Tensor& x_in, const Tensor& temb_act,
                           const Tensor& adaln_rows, const DitLayout& layout, int64_t step_index,
                           DitTrace* trace) const {
  H3_CHECK(block >= 0 && block < static_cast<int64_t>(weights_.blocks.size()),
           ErrorCode::kInvalidArgument, "DiT block ", block, ": the model has ",
           weights_.blocks.size(), " blocks");
  if (block < resident_blocks_) {
    return run_block_with(weights_.blocks[static_cast<size_t>(block)], block, x_in, temb_act,
                          adaln_rows, layout, step_index, trace);
  }
  // One streamed block on its own: a pass of length one (no prefetch; no copy either when the
  // block still sits in a slot).
  stream_->begin(block - resident_blocks_);
  const DitBlockWeights w = acquire_streamed(block, -1);
  Tensor y = run_block_with(w, block, x_in, temb_act, adaln_rows, layout, step_index, trace);
  release_streamed(block);
  return y;
}

Tensor DitModel::run_block_with(const DitBlockWeights& b, int64_t block, const Tensor& x_in,
                                const Tensor& temb_act, const Tensor& adaln_rows,
                                const DitLayout& layout, int64_t step_index,
                                DitTrace* trace) const {
  H3_NVTX_RANGE("dit.block");
  const int64_t d = config_.hidden_size;
  const int64_t n_u = temb_act.size(0);
  const float eps = static_cast<float>(config_.norm_eps);
  // §2.7: [N_u, 18D] -> [N_u*3, 6D] (row u*3 + modality) -> six [N_u*3, D] tables.
  const Tensor m =
      add_lora(temb_act, ops::linear_projection(temb_act, b.adaln_w, b.adaln_scale, &b.adaln_b),
               b.adaln_lora)
          .view({n_u * 3, 6 * d});
  const Tensor shift_msa = chunk(m, 0, d), scale_msa = chunk(m, 1, d), gate_msa = chunk(m, 2, d);
  const Tensor shift_mlp = chunk(m, 3, d), scale_mlp = chunk(m, 4, d), gate_mlp = chunk(m, 5, d);
  double sparsity = -1.0;
  ops::VsaTrace* vt = nullptr;
  if (options_.attention == DitAttentionBackend::kVsa) {
    H3_CHECK(layout.has_vsa, ErrorCode::kInvalidArgument,
             "DiT layout has no VSA tiling (make the layout with this model, or call attach_vsa)");
    sparsity = vsa_sparsity_for(block, step_index);
    if (trace) {
      trace->vsa.emplace_back();
      vt = &trace->vsa.back();
    }
  }
  part("adaLN");
  // §2.9.
  // Modulated rows that only FP8 GEMMs read are formed in E4M3 directly (the same bits as
  // norm_modulate, then quantize): the block's 16-bit rows are never written.
  const DitAttentionWeights& at = b.attn;
  Tensor a;
  ops::Fp8Activation aq;
  if (fp8_only_reader({{&at.to_q, &at.to_q_lora},
                       {&at.to_k, &at.to_k_lora},
                       {&at.to_v, &at.to_v_lora},
                       {&at.to_gate, &at.to_gate_lora}})) {
    aq = ops::rms_norm_modulate_fp8(x_in, &b.norm1, eps, scale_msa, shift_msa, adaln_rows,
                                    ops::projection_act_scaling(at.to_q_scale));
  } else {
    a = norm_modulate(x_in, b.norm1, eps, scale_msa, shift_msa, adaln_rows);
  }
  part("norm + modulate");
  const std::vector<Tensor>& masks = options_.vsa.block_masks;
  const Tensor* mask = block < static_cast<int64_t>(masks.size()) ? &masks[static_cast<size_t>(block)] : nullptr;
  const Tensor attn = attention_layer(a, std::move(aq), b.attn, &layout, sparsity, vt, mask);
  Tensor x, h;
  ops::Fp8Activation hq;
  if (eager_bf16()) {
    x = gated_add(x_in, attn, gate_msa, adaln_rows);
    part("gated residual");
    h = norm_modulate(x, b.norm2, eps, scale_mlp, shift_mlp, adaln_rows);
    part("norm + modulate");
  } else if (fp8_only_reader({{&b.ff.fc_in, &b.ff.fc_in_lora}})) {
    // The residual sum is read back only by the norm: one pass writes it and the feed-forward's
    // input (in E4M3 here), instead of writing the sum and reading it again.
    ops::GatedNormFp8 g = ops::gated_residual_rms_norm_modulate_fp8(
        x_in, attn, gate_msa, adaln_rows, &b.norm2, eps, scale_mlp, shift_mlp,
        ops::projection_act_scaling(b.ff.fc_in_scale));
    x = std::move(g.x);
    hq = std::move(g.modulated);
    part("gated residual + norm + modulate");
  } else {
    ops::GatedNorm g = ops::gated_residual_rms_norm_modulate(x_in, attn, gate_msa, adaln_rows,
                                                             &b.norm2, eps, scale_mlp, shift_mlp);
    x = std::move(g.x);
    h = std::move(g.modulated);
    part("gated residual + norm + modulate");
  }
  const Tensor ff = feed_forward(h, std::move(hq), b.ff);
  x = gated_add(x, ff, gate_mlp, adaln_rows);
  part("gated residual");
  if (trace) trace->block_out.push_back(x);
  return x;
}

DitStepInputs DitModel::prepare_step(const DitTextContext& text, const DitLayout& layout,
                                     const Tensor& video_rows_in, const Tensor& audio_rows_in,
                                     const Tensor& timesteps_in,
                                     const Tensor& timestep_indices_in) const {
  const DitConfig& c = config_;
  const int64_t s = layout.seq_len;
  const int64_t d = c.hidden_size;
  const Device dev = options_.device;
  H3_CHECK(text.embeds.defined() && text.embeds.dim() == 2 && text.embeds.size(1) == d &&
               text.embeds.size(0) == layout.num_text_rows(),
           ErrorCode::kInvalidArgument, "DiT text context ",
           text.embeds.defined() ? text.embeds.desc() : std::string("(none)"), ": expected [",
           layout.num_text_rows(), ", ", d, "] (one row per text index)");

  const Tensor video_rows = drop_batch(video_rows_in, 2, "hidden_states");
  const Tensor audio_rows = drop_batch(audio_rows_in, 2, "audio_hidden_states");
  H3_CHECK(dtype_is_float(video_rows.dtype()) && video_rows.size(0) == layout.num_video_rows() &&
               video_rows.size(1) == c.video_patch_dim(),
           ErrorCode::kInvalidArgument, "DiT input 'hidden_states' ", video_rows.desc(),
           ": expected [", layout.num_video_rows(), ", ", c.video_patch_dim(), "] float");
  H3_CHECK(dtype_is_float(audio_rows.dtype()) && audio_rows.size(0) == layout.num_audio_rows() &&
               audio_rows.size(1) == c.audio_in_channels,
           ErrorCode::kInvalidArgument, "DiT input 'audio_hidden_states' ", audio_rows.desc(),
           ": expected [", layout.num_audio_rows(), ", ", c.audio_in_channels, "] float");

  // Timesteps: distinct float32 values and the per-row index into them (§2.1, §3.3).
  const Tensor ts = on_host(drop_batch(timesteps_in, 1, "timestep"));
  H3_CHECK(dtype_is_float(ts.dtype()) && ts.numel() >= 1, ErrorCode::kInvalidArgument,
           "DiT input 'timestep' ", ts.desc(), ": expected [N_u] float with N_u >= 1");
  const std::vector<float> t_values = ts.to_f32_vector();
  const int64_t n_u = static_cast<int64_t>(t_values.size());
  const std::vector<int64_t> ti =
      host_indices(drop_batch(timestep_indices_in, 1, "timestep_indices"), "timestep_indices");
  H3_CHECK(static_cast<int64_t>(ti.size()) == s, ErrorCode::kInvalidArgument,
           "DiT input 'timestep_indices' has ", ti.size(), " entries, the layout has ", s, " rows");
  std::vector<int64_t> adaln_idx(static_cast<size_t>(s));
  for (int64_t r = 0; r < s; ++r) {
    const int64_t u = ti[static_cast<size_t>(r)];
    H3_CHECK(u >= 0 && u < n_u, ErrorCode::kInvalidArgument, "DiT input 'timestep_indices'[", r,
             "] = ", u, ": expected an index into the ", n_u, " timesteps");
    adaln_idx[static_cast<size_t>(r)] = u * 3 + layout.token_tags[static_cast<size_t>(r)];  // §2.7
  }
  DitStepInputs in;
  in.adaln_rows = Tensor::from_i64(adaln_idx, {s}).to(dev);
  in.t_rows = Tensor::from_i64(ti, {s}).to(dev);
  // §2.6: sinusoid of unscaled t (the float32 MLP runs on the device in run_step).
  in.sinusoid = timestep_sinusoid(t_values, c.freq_dim).to(dev);
  in.video_rows = video_rows.to(dev);
  in.audio_rows = audio_rows.to(dev);
  return in;
}

DitOutputs DitModel::forward(const DitTextContext& text, const DitLayout& layout,
                             const Tensor& video_rows, const Tensor& audio_rows,
                             const Tensor& timesteps, const Tensor& timestep_indices,
                             DitTrace* trace, int64_t step_index) const {
  return run_step(text, layout,
                  prepare_step(text, layout, video_rows, audio_rows, timesteps, timestep_indices),
                  trace, step_index);
}

DitOutputs DitModel::run_step(const DitTextContext& text, const DitLayout& layout,
                              const DitStepInputs& in, DitTrace* trace, int64_t step_index) const {
  const DitConfig& c = config_;
  const int64_t s = layout.seq_len;
  const int64_t d = c.hidden_size;
  const Device dev = options_.device;
  const Tensor& adaln_rows = in.adaln_rows;
  const Tensor& t_rows = in.t_rows;
  const Tensor temb = lora_linear(ops::silu(lora_linear(in.sinusoid, weights_.time_1_w,
                                                        weights_.time_1_lora, &weights_.time_1_b)),
                                  weights_.time_2_w, weights_.time_2_lora, &weights_.time_2_b);
  if (trace) trace->temb = temb;
  // §2.7 / §8 item 4: SiLU on the float32 temb, then one cast to the model dtype.
  const Tensor temb_act = ops::cast(ops::silu(temb), act_);

  // §2.3, §2.5: float32 input projections, rounded into the packed buffer.
  Tensor x = Tensor::empty({s, d}, act_, dev);
  ops::scatter_rows(x, layout.text_indices, text.embeds);
  if (layout.num_video_rows() > 0) {
    const Tensor v32 = ops::cast(ops::copy(in.video_rows), DType::kF32);
    ops::scatter_rows(
        x, layout.video_indices,
        ops::cast(lora_linear(v32, weights_.proj_in_w, weights_.proj_in_lora, &weights_.proj_in_b),
                  act_));
  }
  if (layout.num_audio_rows() > 0) {
    const Tensor a32 = ops::cast(ops::copy(in.audio_rows), DType::kF32);
    ops::scatter_rows(x, layout.audio_indices,
                      ops::cast(lora_linear(a32, weights_.audio_proj_in_w,
                                            weights_.audio_proj_in_lora, &weights_.audio_proj_in_b),
                                act_));
  }
  if (trace) {
    trace->rope_cos = layout.rope_cos;
    trace->rope_sin = layout.rope_sin;
    trace->block_out.clear();
  }

  if (trace) trace->vsa.clear();
  const int64_t num_blocks = static_cast<int64_t>(weights_.blocks.size());
  // Blocks [0, resident_blocks_) run from their device weights. The streamed ones run double
  // buffered (core/layer_stream.h): block i+1 is copied while block i computes, and the last one
  // prefetches the first streamed block of the next forward. begin() brings that first block in
  // (unless the previous forward did) while the resident blocks run.
  if (stream_) stream_->begin(0);
  for (int64_t i = 0; i < num_blocks; ++i) {
    if (i < resident_blocks_) {
      x = run_block_with(weights_.blocks[static_cast<size_t>(i)], i, x, temb_act, adaln_rows,
                         layout, step_index, trace);
      continue;
    }
    const int64_t next = i + 1 < num_blocks ? i + 1 : resident_blocks_;  // wraps
    const DitBlockWeights w = acquire_streamed(i, next);
    x = run_block_with(w, i, x, temb_act, adaln_rows, layout, step_index, trace);
    release_streamed(i);
  }

  // §2.12: final norm modulated per timestep (not per modality), then the float32 heads on the
  // selected rows only (row by row the same as heads over all rows, then selection).
  const Tensor mo =
      lora_linear(temb_act, weights_.norm_out_w, weights_.norm_out_lora, &weights_.norm_out_b);
  const Tensor shift_o = chunk(mo, 0, d), scale_o = chunk(mo, 1, d);
  const Tensor y = modulate_rows(
      ops::rms_norm(x, &weights_.norm_out_norm, static_cast<float>(c.final_norm_eps)), scale_o,
      shift_o, t_rows);
  if (trace) trace->norm_out_out = y;

  DitOutputs out;
  if (layout.num_video_rows() > 0) {
    const Tensor yv = ops::cast(ops::gather_rows(y, layout.video_indices), DType::kF32);
    out.video = lora_linear(yv, weights_.proj_out_w, weights_.proj_out_lora, &weights_.proj_out_b);
  } else {
    out.video = Tensor::empty({0, c.video_patch_dim()}, DType::kF32, dev);
  }
  if (layout.num_audio_rows() > 0) {
    const Tensor ya = ops::cast(ops::gather_rows(y, layout.audio_indices), DType::kF32);
    out.audio = lora_linear(ya, weights_.audio_proj_out_w, weights_.audio_proj_out_lora,
                            &weights_.audio_proj_out_b);
  } else {
    out.audio = Tensor::empty({0, c.audio_in_channels}, DType::kF32, dev);
  }
  return out;
}

DitOutputs DitModel::forward(const DitInputs& in, DitTrace* trace, int64_t step_index) const {
  const DitTextContext text = encode_text(in.encoder_hidden_states, trace);
  const DitLayout layout = make_layout(in.position_ids, in.token_tags, in.video_indices,
                                       in.audio_indices, in.text_indices);
  return forward(text, layout, in.hidden_states, in.audio_hidden_states, in.timestep,
                 in.timestep_indices, trace, step_index);
}

}  // namespace h3::dit
