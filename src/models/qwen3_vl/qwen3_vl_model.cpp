// Qwen3-VL language model to the tap layer (h3_components_spec.md §1.6, §1.7).
#include "models/qwen3_vl/qwen3_vl_model.h"

#include <cmath>
#include <map>
#include <tuple>

#include "core/layer_stream.h"
#include "core/status.h"
#include "core/log.h"
#include "io/device_loader.h"
#include "models/fp8_checkpoint.h"
#include "ops/fp8.h"
#include "ops/ops.h"

namespace h3::qwen3_vl {
namespace {

// Checks that `name` exists with `shape`.
void check_tensor(const io::Checkpoint& ckpt, const std::string& name, const Shape& shape) {
  H3_CHECK(ckpt.has(name), ErrorCode::kNotFound, ckpt.source(), ": missing tensor '", name,
           "' (Qwen3-VL text encoder)");
  const io::TensorInfo& info = ckpt.info(name);
  H3_CHECK(info.shape == shape, ErrorCode::kInvalidFile, ckpt.source(), ": tensor '", name,
           "' has shape ", shape_str(info.shape), ", expected ", shape_str(shape),
           " from config.json");
}

// Whether the checkpoint stores `name` in FP8 (models/fp8_checkpoint.h): such a projection stays
// E4M3 (its scales are read after it), whatever the compute dtype.
bool stored_fp8(const io::Checkpoint& ckpt, const std::string& name) {
  return ckpt.has(name) && ckpt.info(name).dtype == DType::kF8E4M3;
}

// Reads `name`, checks its shape, converts to the compute dtype (FP8 stays FP8) and moves it to
// the device.
Tensor load_tensor(const io::Checkpoint& ckpt, const std::string& name, const Shape& shape,
                   DType dtype, Device device) {
  check_tensor(ckpt, name, shape);
  if (stored_fp8(ckpt, name)) dtype = DType::kF8E4M3;
  if (device.is_cuda()) return io::load_tensor_to(ckpt, name, device, dtype);  // no CPU copy
  Tensor t = ckpt.tensor(name).to(dtype);
  // Own the bytes: a borrowed view would keep the whole mapping alive after release().
  if (t.storage() && !t.storage()->owned()) t = t.clone();
  return t.to(device);
}

// Streaming goes from host memory to a CUDA device; on the CPU it would be a silent no-op, which
// hides a wrong command line or plan, so it is refused.
void check_stream_device(const Qwen3VlLoadOptions& options, Device device) {
  H3_CHECK(
      !options.fp8 || !options.stream_layers, ErrorCode::kUnsupported,
      "--text-encoder-dtype fp8 keeps the conditioner's decoder layers resident; streaming FP8 "
      "layers from host memory (stream_conditioner) is not implemented");
  H3_CHECK(!options.stream_layers || device.is_cuda(), ErrorCode::kUnsupported,
           "Qwen3-VL option stream_layers (stream_conditioner) needs a CUDA device to stream "
           "decoder layers from pinned host memory; the model runs on ",
           device.str(), ", where the weights already live in host memory");
}

}  // namespace

std::vector<Tensor*> layer_tensor_list(DecoderLayerWeights& w) {
  return {&w.input_norm, &w.q_proj,    &w.k_proj,    &w.v_proj,  &w.o_proj,   &w.q_norm,
          &w.k_norm,     &w.post_norm, &w.gate_proj, &w.up_proj, &w.down_proj};
}

Qwen3VlModel Qwen3VlModel::load(const std::string& dir, DType dtype, Device device,
                                const Qwen3VlLoadOptions& options) {
  check_stream_device(options, device);  // before anything is read
  const Qwen3VlConfig config = Qwen3VlConfig::from_file(dir + "/config.json");
  const io::Checkpoint ckpt = io::Checkpoint::open(dir);
  return load(config, ckpt, dtype, device, options);
}

Qwen3VlModel Qwen3VlModel::load(const Qwen3VlConfig& config, const io::Checkpoint& ckpt,
                                DType dtype, Device device, const Qwen3VlLoadOptions& options) {
  H3_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, ErrorCode::kUnsupported,
           "Qwen3-VL text encoder: compute dtype ", dtype_name(dtype),
           " not supported (float32 or bfloat16)");
  check_stream_device(options, device);
  Qwen3VlModel m;
  m.config_ = config;
  m.dtype_ = dtype;
  m.device_ = device;
  const TextConfig& t = config.text;
  const int64_t hid = t.hidden_size, hd = t.head_dim;
  const int64_t q_out = t.num_attention_heads * hd, kv_out = t.num_key_value_heads * hd;
  const std::string lm = "model.language_model.";
  // On CUDA, every resident tensor is read in one pass in file order: the loader overlaps reads
  // and copies across tensors, which one call per tensor would serialize (about 8 GB/s instead of
  // the page cache's 12+ on the released 47 GiB).
  std::map<std::string, Tensor> batch;
  std::vector<io::LoadItem> items;
  auto want = [&](const std::string& name, const Shape& shape) {
    check_tensor(ckpt, name, shape);
    if (device.is_cuda())
      items.push_back({name, stored_fp8(ckpt, name) ? DType::kF8E4M3 : dtype});
  };
  auto take = [&](const std::string& name, const Shape& shape) {
    if (device.is_cuda()) return batch.at(name);
    return load_tensor(ckpt, name, shape, dtype, device);
  };
  struct LayerShapes {
    const char* name;
    Shape shape;
  };
  const std::vector<LayerShapes> layer_shapes = {
      {"input_layernorm.weight", {hid}},
      {"self_attn.q_proj.weight", {q_out, hid}},
      {"self_attn.k_proj.weight", {kv_out, hid}},
      {"self_attn.v_proj.weight", {kv_out, hid}},
      {"self_attn.o_proj.weight", {hid, q_out}},
      {"self_attn.q_norm.weight", {hd}},
      {"self_attn.k_norm.weight", {hd}},
      {"post_attention_layernorm.weight", {hid}},
      {"mlp.gate_proj.weight", {t.intermediate_size, hid}},
      {"mlp.up_proj.weight", {t.intermediate_size, hid}},
      {"mlp.down_proj.weight", {hid, t.intermediate_size}}};
  // FP8 is read for the seven decoder projections only (what FP8 exports quantize).
  for (const std::string& name : ckpt.names()) {
    if (!stored_fp8(ckpt, name) || name.rfind(lm + "layers.", 0) != 0) continue;
    bool projection = false;
    for (const char* p : {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      const std::string suffix = std::string(".") + p;
      projection = projection || (name.size() > suffix.size() &&
                                  name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
    }
    H3_CHECK(projection, ErrorCode::kUnsupported, ckpt.source(), ": tensor '", name,
             "' is stored as F8_E4M3; FP8 is read for the decoder layers' q, k, v, o, gate, up "
             "and down projections only");
    H3_CHECK(!options.stream_layers, ErrorCode::kUnsupported, ckpt.source(), ": '", name,
             "' is stored as F8_E4M3, and FP8 decoder layers are not streamed from host memory "
             "(stream_conditioner): the layers stay resident");
  }
  for (const char* name : {"embed_tokens.weight"}) {
    H3_CHECK(!stored_fp8(ckpt, lm + name), ErrorCode::kUnsupported, ckpt.source(), ": tensor '",
             lm + name, "' is stored as F8_E4M3; FP8 is read for the decoder projections only");
  }
  want(lm + "embed_tokens.weight", {t.vocab_size, hid});
  if (!options.stream_layers) {
    for (int64_t i = 0; i < config.tap_layers; ++i)
      for (const LayerShapes& ls : layer_shapes)
        want(lm + "layers." + std::to_string(i) + "." + ls.name, ls.shape);
  }
  if (!items.empty()) {
    std::vector<Tensor> ts = io::load_tensors_to(ckpt, items, device);
    for (size_t i = 0; i < items.size(); ++i) batch.emplace(items[i].name, std::move(ts[i]));
  }
  m.embed_tokens_ = take(lm + "embed_tokens.weight", {t.vocab_size, hid});
  // Layers tap..num_hidden_layers-1, the final norm and lm_head are never read (§1.1).
  for (int64_t i = 0; i < config.tap_layers; ++i) {
    const std::string p = lm + "layers." + std::to_string(i) + ".";
    DecoderLayerWeights w;
    auto get = [&](const std::string& n, const Shape& s) {
      // Streamed: the checkpoint's mmap view, converted once by pin_layers() below.
      if (options.stream_layers) {
        check_tensor(ckpt, p + n, s);
        return ckpt.tensor(p + n);
      }
      return take(p + n, s);
    };
    Tensor* dst[] = {&w.input_norm, &w.q_proj,    &w.k_proj,    &w.v_proj,  &w.o_proj,  &w.q_norm,
                     &w.k_norm,     &w.post_norm, &w.gate_proj, &w.up_proj, &w.down_proj};
    for (size_t k = 0; k < layer_shapes.size(); ++k)
      *dst[k] = get(layer_shapes[k].name, layer_shapes[k].shape);
    m.layers_.push_back(std::move(w));
  }
  batch.clear();
  // Projections the checkpoint stores in FP8 get their scales (models/fp8_checkpoint.h).
  int64_t blocks = 0;
  for (size_t i = 0; i < m.layers_.size(); ++i) {
    DecoderLayerWeights& w = m.layers_[i];
    const std::string p = lm + "layers." + std::to_string(i) + ".";
    for (auto [proj, scale, name] : {std::tuple{&w.q_proj, &w.q_scale, "self_attn.q_proj.weight"},
                                     {&w.k_proj, &w.k_scale, "self_attn.k_proj.weight"},
                                     {&w.v_proj, &w.v_scale, "self_attn.v_proj.weight"},
                                     {&w.o_proj, &w.o_scale, "self_attn.o_proj.weight"},
                                     {&w.gate_proj, &w.gate_scale, "mlp.gate_proj.weight"},
                                     {&w.up_proj, &w.up_scale, "mlp.up_proj.weight"},
                                     {&w.down_proj, &w.down_scale, "mlp.down_proj.weight"}}) {
      if (proj->dtype() != DType::kF8E4M3) continue;
      models::Fp8ProjectionNote note;
      ops::Fp8Weight q = models::read_fp8_projection(ckpt, p + name, *proj, &note);
      *proj = std::move(q.data);
      *scale = std::move(q.scale);
      ++m.fp8_from_checkpoint_;
      blocks += q.scaling == ops::Fp8WeightScaling::kPerBlock ? 1 : 0;
    }
  }
  if (m.fp8_from_checkpoint_ > 0) {
    H3_LOG_INFO(ckpt.source(), ": ", m.fp8_from_checkpoint_,
                " decoder projections stored in FP8; they run as FP8 GEMMs",
                blocks ? str_cat(" (", blocks,
                                 " with 128x128 block scales, their activations "
                                 "scaled per token and 128 columns)")
                       : std::string());
  }
  if (options.fp8) {
    // One tensor at a time: each float projection is released before the next is quantized.
    for (DecoderLayerWeights& w : m.layers_) {
      for (auto [proj, scale] : {std::pair{&w.q_proj, &w.q_scale},
                                 {&w.k_proj, &w.k_scale},
                                 {&w.v_proj, &w.v_scale},
                                 {&w.o_proj, &w.o_scale},
                                 {&w.gate_proj, &w.gate_scale},
                                 {&w.up_proj, &w.up_scale},
                                 {&w.down_proj, &w.down_scale}})
        ops::quantize_projection_fp8(*proj, *scale);
    }
  }
  if (options.stream_layers && !m.layers_.empty()) {
    std::vector<std::vector<Tensor*>> lists;
    for (DecoderLayerWeights& w : m.layers_) lists.push_back(layer_tensor_list(w));
    pin_layers(lists, dtype, "Qwen3-VL decoder layer");
    std::vector<std::vector<Tensor>> host;
    for (DecoderLayerWeights& w : m.layers_) {
      std::vector<Tensor> list;
      for (const Tensor* x : layer_tensor_list(w)) list.push_back(*x);
      host.push_back(std::move(list));
    }
    m.stream_ = std::make_shared<LayerStream>(std::move(host), device, "Qwen3-VL decoder layer");
  }
  if (options.vision) m.vision_ = VisionTower::load(config, ckpt, dtype, device);
  m.loaded_ = true;
  return m;
}

void Qwen3VlModel::load_vision(const std::string& dir) {
  check_loaded("load_vision");
  if (vision_.loaded()) return;
  const io::Checkpoint ckpt = io::Checkpoint::open(dir);
  vision_ = VisionTower::load(config_, ckpt, dtype_, device_);
}

uint64_t Qwen3VlModel::layer_bytes(bool on_device) const {
  uint64_t n = 0;
  for (const auto& w : layers_) {
    for (const Tensor* t :
         {&w.input_norm, &w.q_proj, &w.k_proj, &w.v_proj, &w.o_proj, &w.q_norm, &w.k_norm,
          &w.post_norm, &w.gate_proj, &w.up_proj, &w.down_proj, &w.q_scale, &w.k_scale, &w.v_scale,
          &w.o_scale, &w.gate_scale, &w.up_scale, &w.down_scale}) {
      if (t->defined() && t->device().is_cuda() == on_device) n += t->nbytes();
    }
  }
  return n;
}

uint64_t Qwen3VlModel::weight_bytes() const {
  const uint64_t n = embed_tokens_.defined() ? embed_tokens_.nbytes() : 0;
  return n + layer_bytes(false) + layer_bytes(true) + vision_.weight_bytes();
}

uint64_t Qwen3VlModel::stream_slot_bytes() const { return stream_ ? stream_->slot_bytes() : 0; }
uint64_t Qwen3VlModel::stream_host_bytes() const { return stream_ ? stream_->host_bytes() : 0; }

uint64_t Qwen3VlModel::device_bytes() const {
  if (!device_.is_cuda()) return 0;
  const uint64_t n = embed_tokens_.defined() ? embed_tokens_.nbytes() : 0;
  return n + layer_bytes(true) + vision_.weight_bytes() + stream_slot_bytes();
}

void Qwen3VlModel::release() {
  // The stream first: its destructor lets in-flight copies (a prefetch for a pass that never
  // came) land before the pinned layers and the slots go.
  stream_.reset();
  embed_tokens_ = Tensor();
  std::vector<DecoderLayerWeights>().swap(layers_);
  vision_.release();
  loaded_ = false;
}

void Qwen3VlModel::check_loaded(const char* what) const {
  H3_CHECK(loaded_, ErrorCode::kInvalidArgument, "Qwen3-VL text encoder: ", what,
           " called on a model that is not loaded (or was released)");
}

Tensor Qwen3VlModel::embed(const std::vector<int64_t>& ids) const {
  check_loaded("embed");
  H3_CHECK(!ids.empty(), ErrorCode::kInvalidArgument,
           "Qwen3-VL text encoder: empty token sequence");
  for (size_t i = 0; i < ids.size(); ++i) {
    H3_CHECK(ids[i] >= 0 && ids[i] < config_.text.vocab_size, ErrorCode::kInvalidArgument,
             "Qwen3-VL text encoder: token id ", ids[i], " at position ", i,
             " is outside the vocabulary [0, ", config_.text.vocab_size, ")");
  }
  const Tensor idx = Tensor::from_i64(ids, {static_cast<int64_t>(ids.size())}).to(device_);
  return ops::gather_rows(embed_tokens_, idx);
}

Tensor text_position_ids(int64_t length) {
  H3_CHECK(length > 0, ErrorCode::kInvalidArgument, "text_position_ids: length ", length,
           " must be > 0");
  std::vector<int64_t> v(static_cast<size_t>(3 * length));
  for (int64_t a = 0; a < 3; ++a) {
    for (int64_t i = 0; i < length; ++i) v[static_cast<size_t>(a * length + i)] = i;
  }
  return Tensor::from_i64(v, {3, length});
}

void mrope_tables(const TextConfig& text, const Tensor& position_ids, Tensor* cos, Tensor* sin) {
  H3_CHECK(position_ids.dim() == 2 && position_ids.size(0) == 3, ErrorCode::kInvalidArgument,
           "mRoPE: position_ids must be [3, L], got ", shape_str(position_ids.shape()));
  const int64_t len = position_ids.size(1);
  const int64_t half = text.head_dim / 2;
  const std::vector<int64_t> pos = position_ids.to_i64_vector();
  // inv_freq[j] = 1 / theta^(2j/D) in float32, as the reference computes it on the host.
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const float theta = static_cast<float>(text.rope_theta);
  for (int64_t j = 0; j < half; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(text.head_dim);
    inv_freq[static_cast<size_t>(j)] = 1.0f / std::pow(theta, e);
  }
  // Axis of frequency j after interleaving: h on j = 1 mod 3 below 3*s_h, w on j = 2 mod 3
  // below 3*s_w, t elsewhere.
  std::vector<int> axis(static_cast<size_t>(half), 0);
  for (int64_t j = 0; j < half; ++j) {
    if (j % 3 == 1 && j < 3 * text.mrope_section[1]) axis[static_cast<size_t>(j)] = 1;
    if (j % 3 == 2 && j < 3 * text.mrope_section[2]) axis[static_cast<size_t>(j)] = 2;
  }
  std::vector<float> c(static_cast<size_t>(len * text.head_dim));
  std::vector<float> s(c.size());
  for (int64_t i = 0; i < len; ++i) {
    for (int64_t j = 0; j < half; ++j) {
      const int a = axis[static_cast<size_t>(j)];
      const float p = static_cast<float>(pos[static_cast<size_t>(a * len + i)]);
      const float f = p * inv_freq[static_cast<size_t>(j)];
      const float cv = std::cos(f), sv = std::sin(f);
      const size_t o = static_cast<size_t>(i * text.head_dim + j);
      c[o] = cv;
      c[o + static_cast<size_t>(half)] = cv;
      s[o] = sv;
      s[o + static_cast<size_t>(half)] = sv;
    }
  }
  *cos = Tensor::from_f32(c, {len, text.head_dim});
  *sin = Tensor::from_f32(s, {len, text.head_dim});
}

Tensor Qwen3VlModel::forward(const Tensor& embeds, const Tensor& position_ids,
                             std::vector<Tensor>* hidden_states, const Tensor* visual_rows,
                             const std::vector<Tensor>* deepstack) const {
  check_loaded("forward");
  const TextConfig& t = config_.text;
  H3_CHECK(embeds.dim() == 2 && embeds.size(1) == t.hidden_size, ErrorCode::kInvalidArgument,
           "Qwen3-VL text encoder: embeddings must be [L, ", t.hidden_size, "], got ",
           shape_str(embeds.shape()));
  const int64_t len = embeds.size(0);
  H3_CHECK(position_ids.dim() == 2 && position_ids.size(0) == 3 && position_ids.size(1) == len,
           ErrorCode::kInvalidArgument, "Qwen3-VL text encoder: position_ids must be [3, ", len,
           "], got ", shape_str(position_ids.shape()));
  Tensor cos, sin;
  mrope_tables(t, position_ids, &cos, &sin);
  // The reference casts cos/sin to the activation dtype (bf16 in the release, §1.6).
  cos = cos.to(dtype_).to(device_);
  sin = sin.to(dtype_).to(device_);
  const float eps = static_cast<float>(t.rms_norm_eps);
  const int64_t hq = t.num_attention_heads, hkv = t.num_key_value_heads, hd = t.head_dim;
  const int rot = static_cast<int>(hd);
  ops::AttentionParams ap;
  ap.causal = len > 1;

  const Tensor e = embeds.to(device_);
  Tensor x = e.dtype() == dtype_ ? e : ops::cast(e, dtype_);
  if (hidden_states) {
    hidden_states->clear();
    hidden_states->push_back(x);
  }
  // Row indices may come from the host; the gathers run where the activations are.
  const Tensor vrows = visual_rows ? visual_rows->to(device_) : Tensor();
  // Streamed layers run double buffered (core/layer_stream.h): layer i+1 is copied while layer i
  // computes, and the last one prefetches layer 0 for the next forward (begin() then finds it in
  // its slot).
  const int64_t num_layers = static_cast<int64_t>(layers_.size());
  if (stream_) stream_->begin(0);
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    DecoderLayerWeights streamed;
    if (stream_) {
      const std::vector<Tensor> views = stream_->acquire(layer, (layer + 1) % num_layers);
      const std::vector<Tensor*> list = layer_tensor_list(streamed);
      for (size_t k = 0; k < list.size(); ++k) *list[k] = views[k];
    }
    const DecoderLayerWeights& w = stream_ ? streamed : layers_[static_cast<size_t>(layer)];
    const Tensor h = ops::rms_norm(x, &w.input_norm, eps);
    // ops::linear_projection: FP8 weights (Qwen3VlLoadOptions::fp8) run the FP8 GEMM.
    const Tensor q =
        ops::qk_norm_rope(ops::linear_projection(h, w.q_proj, w.q_scale).view({len, hq, hd}),
                          &w.q_norm, eps, cos, sin, rot);
    const Tensor k =
        ops::qk_norm_rope(ops::linear_projection(h, w.k_proj, w.k_scale).view({len, hkv, hd}),
                          &w.k_norm, eps, cos, sin, rot);
    const Tensor v = ops::linear_projection(h, w.v_proj, w.v_scale).view({len, hkv, hd});
    const Tensor a = ops::attention(q, k, v, ap).reshape({len, hq * hd});
    x = ops::add(x, ops::linear_projection(a, w.o_proj, w.o_scale));
    const Tensor h2 = ops::rms_norm(x, &w.post_norm, eps);
    const Tensor g = ops::silu(ops::linear_projection(h2, w.gate_proj, w.gate_scale));
    x = ops::add(
        x, ops::linear_projection(ops::mul(g, ops::linear_projection(h2, w.up_proj, w.up_scale)),
                                  w.down_proj, w.down_scale));
    // hidden_states[i] is the decoder layer's own output, recorded before the DeepStack add (as
    // the reference captures layer outputs); the add is applied to a copy so the record stays.
    if (hidden_states) hidden_states->push_back(x);
    if (stream_) stream_->release(layer);
    if (visual_rows && deepstack && static_cast<size_t>(layer) < deepstack->size()) {
      const Tensor rows = ops::gather_rows(x, vrows);
      x = ops::copy(x);
      ops::scatter_rows(x, vrows,
                        ops::add(rows, (*deepstack)[static_cast<size_t>(layer)].to(device_)));
    }
  }
  return x;
}

Tensor Qwen3VlModel::encode_text(const std::vector<int64_t>& ids,
                                 std::vector<Tensor>* hidden_states) const {
  const Tensor e = embed(ids);
  return forward(e, text_position_ids(static_cast<int64_t>(ids.size())), hidden_states);
}

Tensor Qwen3VlModel::encode(const std::vector<int64_t>& ids, const Tensor& pixel_values,
                            const std::vector<GridThw>& image_grids,
                            const Tensor& pixel_values_videos,
                            const std::vector<GridThw>& video_grids,
                            std::vector<Tensor>* hidden_states) const {
  check_loaded("encode");
  Tensor embeds = embed(ids);
  const Tensor positions = rope_position_ids(ids, image_grids, video_grids, config_);
  // Visual rows in token order per modality: image pads, then video pads.
  std::vector<int64_t> rows;
  std::vector<Tensor> tokens;
  std::vector<std::vector<Tensor>> stacks;
  auto add_modality = [&](int64_t pad, const Tensor& pixels, const std::vector<GridThw>& grids,
                          const char* what) {
    std::vector<int64_t> r;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == pad) r.push_back(static_cast<int64_t>(i));
    }
    if (grids.empty()) {
      H3_CHECK(r.empty(), ErrorCode::kInvalidArgument, "Qwen3-VL text encoder: ", r.size(), " ",
               what, " pad tokens but no ", what, " input");
      return;
    }
    H3_CHECK(pixels.defined(), ErrorCode::kInvalidArgument, "Qwen3-VL text encoder: ", what,
             " grids given without pixel values");
    H3_CHECK(vision_.loaded(), ErrorCode::kInvalidArgument, "Qwen3-VL text encoder: ", what,
             " inputs need the vision tower, which this model was loaded without");
    VisionOutput v = vision_.forward(pixels, grids);
    H3_CHECK(v.tokens.size(0) == static_cast<int64_t>(r.size()), ErrorCode::kInvalidArgument,
             "Qwen3-VL text encoder: ", r.size(), " ", what, " pad tokens but the ", what,
             " features have ", v.tokens.size(0), " rows");
    rows.insert(rows.end(), r.begin(), r.end());
    tokens.push_back(v.tokens);
    stacks.push_back(std::move(v.deepstack));
  };
  add_modality(config_.image_token_id, pixel_values, image_grids, "image");
  add_modality(config_.video_token_id, pixel_values_videos, video_grids, "video");
  if (rows.empty()) return forward(embeds, positions, hidden_states);
  // Built on the host, used on the model's device (scatter and the DeepStack adds).
  const Tensor idx = Tensor::from_i64(rows, {static_cast<int64_t>(rows.size())}).to(device_);
  ops::scatter_rows(embeds, idx, ops::cast(ops::concat(tokens, 0), dtype_));
  std::vector<Tensor> deepstack;
  for (size_t d = 0; d < stacks[0].size(); ++d) {
    std::vector<Tensor> parts;
    for (const auto& s : stacks) parts.push_back(s[d]);
    deepstack.push_back(ops::cast(ops::concat(parts, 0), dtype_));
  }
  return forward(embeds, positions, hidden_states, &idx, &deepstack);
}

}  // namespace h3::qwen3_vl
