#include "models/h3_dit/dit_weights.h"

#include <map>
#include <set>

#include "core/layer_stream.h"
#include "core/status.h"
#include "core/log.h"
#include "io/device_loader.h"
#include "models/fp8_checkpoint.h"
#include "ops/fp8.h"

namespace h3::dit {
namespace {

std::string block_prefix(int64_t i) { return "transformer_blocks." + std::to_string(i) + "."; }
std::string refiner_prefix(int64_t j) {
  return "token_refiner.refiner_blocks." + std::to_string(j) + ".";
}

void add_attention_specs(std::vector<DitTensorSpec>& out, const std::string& p, const DitConfig& c) {
  const int64_t h = c.hidden_size, inner = c.inner_dim(), hd = c.attention_head_dim;
  out.push_back({p + "attn.to_q.weight", {inner, h}});
  out.push_back({p + "attn.to_k.weight", {inner, h}});
  out.push_back({p + "attn.to_v.weight", {inner, h}});
  out.push_back({p + "attn.norm_q.weight", {hd}});
  out.push_back({p + "attn.norm_k.weight", {hd}});
  out.push_back({p + "attn.to_out.0.weight", {h, inner}});
}

void add_block_common_specs(std::vector<DitTensorSpec>& out, const std::string& p,
                            const DitConfig& c) {
  const int64_t h = c.hidden_size;
  out.push_back({p + "norm1.weight", {h}});
  add_attention_specs(out, p, c);
  out.push_back({p + "norm2.weight", {h}});
  out.push_back({p + "ff.net.0.proj.weight", {2 * c.ffn_dim, h}});
  out.push_back({p + "ff.net.2.weight", {h, c.ffn_dim}});
}

// The main block a tensor name belongs to, or -1 (not a main block tensor).
int64_t main_block_of(const std::string& name) {
  static const std::string kPrefix = "transformer_blocks.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  int64_t i = 0;
  size_t k = kPrefix.size();
  if (k >= name.size() || name[k] < '0' || name[k] > '9') return -1;
  for (; k < name.size() && name[k] >= '0' && name[k] <= '9'; ++k) i = i * 10 + (name[k] - '0');
  return i;
}

// The projections a checkpoint may store in FP8 (models/fp8_checkpoint.h): the attention and
// feed-forward weights of every block and the main blocks' AdaLN, what --dit-dtype fp8 quantizes.
bool fp8_capable(const std::string& name) {
  static const char* const kSuffixes[] = {
      "attn.to_q.weight",     "attn.to_k.weight",        "attn.to_v.weight",
      "attn.to_out.0.weight", "attn.to_gate_compress.weight", "ff.net.0.proj.weight",
      "ff.net.2.weight",      "adaln_proj.linear.weight"};
  for (const char* suffix : kSuffixes) {
    const std::string_view v(suffix);
    if (name.size() > v.size() && name.compare(name.size() - v.size(), v.size(), v) == 0 &&
        name[name.size() - v.size() - 1] == '.')
      return true;
  }
  return false;
}

}  // namespace

std::vector<Tensor*> block_tensor_list(DitBlockWeights& b) {
  std::vector<Tensor*> v = {&b.norm1,     &b.norm2,       &b.attn.to_q,   &b.attn.to_k,
                            &b.attn.to_v, &b.attn.norm_q, &b.attn.norm_k, &b.attn.to_out,
                            &b.ff.fc_in,  &b.ff.fc_out,   &b.adaln_w,     &b.adaln_b};
  if (b.attn.to_gate.defined()) v.push_back(&b.attn.to_gate);
  return v;
}

namespace {

uint64_t quantize_attention_fp8(DitAttentionWeights& a, DitFeedForwardWeights& f,
                                ops::Fp8WeightScaling scaling) {
  const std::pair<Tensor*, Tensor*> linears[] = {
      {&a.to_q, &a.to_q_scale},     {&a.to_k, &a.to_k_scale},       {&a.to_v, &a.to_v_scale},
      {&a.to_out, &a.to_out_scale}, {&a.to_gate, &a.to_gate_scale}, {&f.fc_in, &f.fc_in_scale},
      {&f.fc_out, &f.fc_out_scale}};
  uint64_t bytes = 0;
  for (auto [w, scale] : linears) {
    ops::quantize_projection_fp8(*w, *scale, scaling);
    if (w->defined()) bytes += w->nbytes() + (scale->defined() ? scale->nbytes() : 0);
  }
  return bytes;
}

}  // namespace

uint64_t quantize_block_linears_fp8(DitWeights& w, ops::Fp8WeightScaling scaling) {
  uint64_t bytes = 0;
  for (DitBlockWeights& b : w.blocks) {
    bytes += quantize_attention_fp8(b.attn, b.ff, scaling);
    ops::quantize_projection_fp8(b.adaln_w, b.adaln_scale, scaling);
    if (b.adaln_scale.defined()) bytes += b.adaln_w.nbytes() + b.adaln_scale.nbytes();
  }
  for (DitRefinerBlockWeights& b : w.refiner)
    bytes += quantize_attention_fp8(b.attn, b.ff, scaling);
  return bytes;
}

void pin_blocks(std::vector<DitBlockWeights>& blocks, DType dtype, size_t first) {
  std::vector<std::vector<Tensor*>> lists;
  for (size_t i = first; i < blocks.size(); ++i) lists.push_back(block_tensor_list(blocks[i]));
  pin_layers(lists, dtype, "DiT block", static_cast<int64_t>(first));
}

std::vector<DitTensorSpec> dit_tensor_specs(const DitConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<DitTensorSpec> s;
  s.push_back({"proj_in.weight", {h, c.video_patch_dim()}, true});
  s.push_back({"proj_in.bias", {h}, true});
  s.push_back({"audio_proj_in.weight", {h, c.audio_in_channels}, true});
  s.push_back({"audio_proj_in.bias", {h}, true});
  s.push_back({"context_embedder.weight", {h, c.text_dim}});
  s.push_back({"context_embedder.bias", {h}});
  s.push_back({"time_embedder.linear_1.weight", {c.time_embed_hidden_dim, c.freq_dim}, true});
  s.push_back({"time_embedder.linear_1.bias", {c.time_embed_hidden_dim}, true});
  s.push_back({"time_embedder.linear_2.weight", {c.time_embed_dim, c.time_embed_hidden_dim}, true});
  s.push_back({"time_embedder.linear_2.bias", {c.time_embed_dim}, true});
  for (int64_t j = 0; j < c.num_refiner_layers; ++j) add_block_common_specs(s, refiner_prefix(j), c);
  s.push_back({"token_refiner.final_norm.weight", {h}});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    add_block_common_specs(s, block_prefix(i), c);
    s.push_back({block_prefix(i) + "adaln_proj.linear.weight", {c.adaln_width(), c.time_embed_dim}});
    s.push_back({block_prefix(i) + "adaln_proj.linear.bias", {c.adaln_width()}});
  }
  s.push_back({"norm_out.norm.weight", {h}});
  s.push_back({"norm_out.linear.weight", {2 * h, c.time_embed_dim}});
  s.push_back({"norm_out.linear.bias", {2 * h}});
  s.push_back({"proj_out.weight", {c.video_patch_dim(), h}, true});
  s.push_back({"proj_out.bias", {c.video_patch_dim()}, true});
  s.push_back({"audio_proj_out.weight", {c.audio_in_channels, h}, true});
  s.push_back({"audio_proj_out.bias", {c.audio_in_channels}, true});
  return s;
}

DitTensorSpec dit_gate_spec(const DitConfig& c, int64_t block) {
  return {block_prefix(block) + "attn.to_gate_compress.weight", {c.inner_dim(), c.hidden_size}};
}

DitWeights load_dit_weights(const DitConfig& config, const io::Checkpoint& ckpt,
                            const DitWeightPolicy& policy) {
  H3_CHECK(dtype_is_float(policy.body_dtype), ErrorCode::kInvalidArgument,
           "DiT weight policy: body dtype must be a float type, got ", dtype_name(policy.body_dtype));
  const std::vector<DitTensorSpec> specs = dit_tensor_specs(config);
  const std::string& src = ckpt.source();

  // Names the model does not know are an error: silently ignoring a tensor would run a different
  // model than the checkpoint describes.
  std::set<std::string> known;
  for (const DitTensorSpec& s : specs) known.insert(s.name);
  std::set<std::string> gate_names;
  for (int64_t i = 0; i < config.num_layers; ++i) gate_names.insert(dit_gate_spec(config, i).name);
  std::vector<std::string> unknown;
  int64_t gates_present = 0;
  for (const std::string& name : ckpt.names()) {
    if (known.count(name)) continue;
    if (gate_names.count(name)) {
      ++gates_present;
      continue;
    }
    std::string of;
    if (models::is_fp8_companion(name, &of) && fp8_capable(of) &&
        (known.count(of) || gate_names.count(of))) {
      H3_CHECK(ckpt.has(of) && ckpt.info(of).dtype == DType::kF8E4M3, ErrorCode::kInvalidFile,
               src, ": tensor '", name, "' is an FP8 scale, but '", of,
               "' is not stored as F8_E4M3");
      continue;  // read with its weight below
    }
    H3_CHECK(name.find("to_gate_compress") == std::string::npos, ErrorCode::kInvalidFile, src,
             ": tensor '", name, "' is a VSA compression gate outside the ", config.num_layers,
             " main blocks (FastH3 gates only the main blocks' attention, §5.6)");
    H3_CHECK(name.find("adaln_basis") == std::string::npos, ErrorCode::kUnsupported, src,
             ": tensor '", name, "' belongs to a rank-reduced AdaLN export, which is not supported");
    unknown.push_back(name);
  }
  if (!unknown.empty()) {
    std::string list;
    for (size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", " : "") + unknown[i];
    if (unknown.size() > 5) list += str_cat(", ... (", unknown.size(), " in all)");
    fail(ErrorCode::kInvalidFile, src, ": tensors not part of a MiniMax-H3 transformer with ",
         config.num_layers, " blocks and ", config.num_refiner_layers, " refiner blocks: ", list);
  }

  // §5.6: a FastH3 checkpoint gates every main block; a partial set is not a model we know.
  H3_CHECK(gates_present == 0 || gates_present == config.num_layers, ErrorCode::kUnsupported, src,
           ": ", gates_present, " of ", config.num_layers,
           " blocks have a VSA compression gate (attn.to_gate_compress); expected all or none");
  std::vector<DitTensorSpec> all_specs = specs;
  if (gates_present > 0) {
    for (int64_t i = 0; i < config.num_layers; ++i) all_specs.push_back(dit_gate_spec(config, i));
  }

  std::map<std::string, Tensor> loaded;
  std::vector<io::LoadItem> to_device;  // CUDA: streamed file -> device in one pass (below)
  std::vector<std::string> fp8_names;   // stored as F8_E4M3: kept so, scales read below
  for (const DitTensorSpec& s : all_specs) {
    H3_CHECK(ckpt.has(s.name), ErrorCode::kNotFound, src, ": missing tensor '", s.name,
             "' (expected shape ", shape_str(s.shape), ")");
    const io::TensorInfo& info = ckpt.info(s.name);
    H3_CHECK(info.shape == s.shape, ErrorCode::kInvalidFile, src, ": tensor '", s.name,
             "' has shape ", shape_str(info.shape), ", the config implies ", shape_str(s.shape));
    H3_CHECK(dtype_is_float(info.dtype), ErrorCode::kInvalidFile, src, ": tensor '", s.name,
             "' has dtype ", dtype_name(info.dtype), ", expected a float type");
    const bool streamed =
        policy.resident_blocks >= 0 && main_block_of(s.name) >= policy.resident_blocks;
    if (info.dtype == DType::kF8E4M3) {
      H3_CHECK(fp8_capable(s.name), ErrorCode::kUnsupported, src, ": tensor '", s.name,
               "' is stored as F8_E4M3; FP8 is read for the blocks' projections only (q, k, v, "
               "out, gate, FFN and AdaLN weights)");
      H3_CHECK(!streamed, ErrorCode::kUnsupported, src, ": block weight '", s.name,
               "' is stored as F8_E4M3, and FP8 blocks are not streamed from host memory "
               "(--cpu-offload, or a plan that streams blocks): every block stays resident");
      fp8_names.push_back(s.name);
    }
    const DType want = info.dtype == DType::kF8E4M3 ? DType::kF8E4M3
                       : s.fp32_island              ? DType::kF32
                                                    : policy.body_dtype;
    if (streamed) {
      // The mmap view, converted once by pin_blocks() below into the pinned buffer.
      loaded.emplace(s.name, ckpt.tensor(s.name));
      continue;
    }
    if (policy.device.is_cuda()) {
      to_device.push_back({s.name, want});
      continue;
    }
    Tensor t = ckpt.tensor(s.name);
    if (t.dtype() != want) t = t.to(want);  // widening is exact; narrowing rounds to nearest even
    if (policy.device != Device::cpu()) t = t.to(policy.device);
    loaded.emplace(s.name, std::move(t));
  }
  if (!to_device.empty()) {
    std::vector<Tensor> ts = io::load_tensors_to(ckpt, to_device, policy.device);
    for (size_t i = 0; i < ts.size(); ++i) loaded.emplace(to_device[i].name, std::move(ts[i]));
  }
  // FP8 weights get their scales, per output channel or per 128 x 128 block
  // (models/fp8_checkpoint.h).
  std::map<std::string, Tensor> scales;
  bool input_scales = false;
  std::set<std::string> layouts;
  for (const std::string& name : fp8_names) {
    models::Fp8ProjectionNote note;
    ops::Fp8Weight q = models::read_fp8_projection(ckpt, name, loaded.at(name), &note);
    loaded[name] = std::move(q.data);
    scales[name] = std::move(q.scale);
    input_scales = input_scales || note.static_input_scale;
    layouts.insert(note.layout);
  }
  if (!fp8_names.empty()) {
    std::string list;
    for (const std::string& l : layouts) list += (list.empty() ? "" : ", ") + l;
    H3_LOG_INFO(src, ": ", fp8_names.size(), " projections stored in FP8 (scales: ", list,
                "); they run as FP8 GEMMs",
                input_scales ? "; static input scales not used (activations are scaled per token "
                               "or per token and 128 columns)"
                             : "");
  }
  auto take = [&](const std::string& name) { return loaded.at(name); };
  auto scale_of = [&](const std::string& name) {
    auto it = scales.find(name);
    return it == scales.end() ? Tensor() : it->second;
  };
  auto attention = [&](const std::string& p) {
    DitAttentionWeights a;
    a.to_q = take(p + "attn.to_q.weight");
    a.to_k = take(p + "attn.to_k.weight");
    a.to_v = take(p + "attn.to_v.weight");
    a.norm_q = take(p + "attn.norm_q.weight");
    a.norm_k = take(p + "attn.norm_k.weight");
    a.to_out = take(p + "attn.to_out.0.weight");
    a.to_q_scale = scale_of(p + "attn.to_q.weight");
    a.to_k_scale = scale_of(p + "attn.to_k.weight");
    a.to_v_scale = scale_of(p + "attn.to_v.weight");
    a.to_out_scale = scale_of(p + "attn.to_out.0.weight");
    return a;
  };
  auto feed_forward = [&](const std::string& p) {
    DitFeedForwardWeights ff;
    ff.fc_in = take(p + "ff.net.0.proj.weight");
    ff.fc_out = take(p + "ff.net.2.weight");
    ff.fc_in_scale = scale_of(p + "ff.net.0.proj.weight");
    ff.fc_out_scale = scale_of(p + "ff.net.2.weight");
    return ff;
  };

  DitWeights w;
  w.proj_in_w = take("proj_in.weight");
  w.proj_in_b = take("proj_in.bias");
  w.audio_proj_in_w = take("audio_proj_in.weight");
  w.audio_proj_in_b = take("audio_proj_in.bias");
  w.context_w = take("context_embedder.weight");
  w.context_b = take("context_embedder.bias");
  w.time_1_w = take("time_embedder.linear_1.weight");
  w.time_1_b = take("time_embedder.linear_1.bias");
  w.time_2_w = take("time_embedder.linear_2.weight");
  w.time_2_b = take("time_embedder.linear_2.bias");
  for (int64_t j = 0; j < config.num_refiner_layers; ++j) {
    const std::string p = refiner_prefix(j);
    DitRefinerBlockWeights b;
    b.norm1 = take(p + "norm1.weight");
    b.norm2 = take(p + "norm2.weight");
    b.attn = attention(p);
    b.ff = feed_forward(p);
    w.refiner.push_back(std::move(b));
  }
  w.refiner_final_norm = take("token_refiner.final_norm.weight");
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = block_prefix(i);
    DitBlockWeights b;
    b.norm1 = take(p + "norm1.weight");
    b.norm2 = take(p + "norm2.weight");
    b.attn = attention(p);
    b.ff = feed_forward(p);
    b.adaln_w = take(p + "adaln_proj.linear.weight");
    b.adaln_b = take(p + "adaln_proj.linear.bias");
    b.adaln_scale = scale_of(p + "adaln_proj.linear.weight");
    if (gates_present > 0) {
      b.attn.to_gate = take(dit_gate_spec(config, i).name);
      b.attn.to_gate_scale = scale_of(dit_gate_spec(config, i).name);
    }
    w.blocks.push_back(std::move(b));
  }
  w.norm_out_norm = take("norm_out.norm.weight");
  w.norm_out_w = take("norm_out.linear.weight");
  w.norm_out_b = take("norm_out.linear.bias");
  w.proj_out_w = take("proj_out.weight");
  w.proj_out_b = take("proj_out.bias");
  w.audio_proj_out_w = take("audio_proj_out.weight");
  w.audio_proj_out_b = take("audio_proj_out.bias");
  w.has_vsa_gates = gates_present > 0;
  w.fp8_from_checkpoint = static_cast<int64_t>(fp8_names.size());
  // The streamed blocks' mmap views are replaced by pinned copies (the views go with `loaded`).
  if (policy.resident_blocks >= 0 && policy.resident_blocks < config.num_layers) {
    pin_blocks(w.blocks, policy.body_dtype, static_cast<size_t>(policy.resident_blocks));
  }
  return w;
}

}  // namespace h3::dit

namespace h3::dit {
namespace {

// The index after `prefix` in `name` ("transformer_blocks.12.x" -> 12, rest "x"), or -1.
int64_t indexed(const std::string& name, const std::string& prefix, std::string* rest) {
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t k = prefix.size();
  int64_t i = 0;
  const size_t digits_start = k;
  for (; k < name.size() && name[k] >= '0' && name[k] <= '9' && k - digits_start < 9; ++k)
    i = i * 10 + (name[k] - '0');
  if (k == digits_start || k >= name.size() || name[k] != '.') return -1;
  // "01" is not a module index a writer produces; refusing it keeps one spelling per tensor.
  if (name[digits_start] == '0' && k - digits_start > 1) return -1;
  *rest = name.substr(k + 1);
  return i;
}

template <typename Body>
bool body_ref(Body& b, const DitConfig& c, const std::string& rest, DitTensorRef& r) {
  const int64_t h = c.hidden_size, inner = c.inner_dim(), hd = c.attention_head_dim;
  auto set = [&](Tensor* t, RuntimeLora* l, Shape s) {
    r.tensor = t;
    r.lora = l;
    r.shape = std::move(s);
    return true;
  };
  if (rest == "norm1.weight") return set(&b.norm1, nullptr, {h});
  if (rest == "norm2.weight") return set(&b.norm2, nullptr, {h});
  if (rest == "attn.to_q.weight") return set(&b.attn.to_q, &b.attn.to_q_lora, {inner, h});
  if (rest == "attn.to_k.weight") return set(&b.attn.to_k, &b.attn.to_k_lora, {inner, h});
  if (rest == "attn.to_v.weight") return set(&b.attn.to_v, &b.attn.to_v_lora, {inner, h});
  if (rest == "attn.norm_q.weight") return set(&b.attn.norm_q, nullptr, {hd});
  if (rest == "attn.norm_k.weight") return set(&b.attn.norm_k, nullptr, {hd});
  if (rest == "attn.to_out.0.weight") return set(&b.attn.to_out, &b.attn.to_out_lora, {h, inner});
  if (rest == "ff.net.0.proj.weight") return set(&b.ff.fc_in, &b.ff.fc_in_lora, {2 * c.ffn_dim, h});
  if (rest == "ff.net.2.weight") return set(&b.ff.fc_out, &b.ff.fc_out_lora, {h, c.ffn_dim});
  return false;
}

}  // namespace

DitTensorRef dit_tensor_ref(DitWeights& w, const DitConfig& c, const std::string& name) {
  DitTensorRef r;
  std::string rest;
  if (const int64_t i = indexed(name, "transformer_blocks.", &rest); i >= 0) {
    if (i >= static_cast<int64_t>(w.blocks.size())) return r;
    DitBlockWeights& b = w.blocks[static_cast<size_t>(i)];
    if (body_ref(b, c, rest, r)) return r;
    if (rest == "adaln_proj.linear.weight") {
      r = {&b.adaln_w, &b.adaln_lora, false, {c.adaln_width(), c.time_embed_dim}};
    } else if (rest == "adaln_proj.linear.bias") {
      r = {&b.adaln_b, nullptr, false, {c.adaln_width()}};
    } else if (rest == "attn.to_gate_compress.weight") {
      r = {&b.attn.to_gate, &b.attn.to_gate_lora, false, {c.inner_dim(), c.hidden_size}};
    }
    return r;
  }
  if (const int64_t j = indexed(name, "token_refiner.refiner_blocks.", &rest); j >= 0) {
    if (j < static_cast<int64_t>(w.refiner.size()))
      body_ref(w.refiner[static_cast<size_t>(j)], c, rest, r);
    return r;
  }
  const int64_t h = c.hidden_size;
  struct Global {
    const char* name;
    Tensor* tensor;
    RuntimeLora* lora;
    bool island;
    Shape shape;
  };
  const Global globals[] = {
      {"proj_in.weight", &w.proj_in_w, &w.proj_in_lora, true, {h, c.video_patch_dim()}},
      {"proj_in.bias", &w.proj_in_b, nullptr, true, {h}},
      {"audio_proj_in.weight",
       &w.audio_proj_in_w,
       &w.audio_proj_in_lora,
       true,
       {h, c.audio_in_channels}},
      {"audio_proj_in.bias", &w.audio_proj_in_b, nullptr, true, {h}},
      {"context_embedder.weight", &w.context_w, &w.context_lora, false, {h, c.text_dim}},
      {"context_embedder.bias", &w.context_b, nullptr, false, {h}},
      {"time_embedder.linear_1.weight",
       &w.time_1_w,
       &w.time_1_lora,
       true,
       {c.time_embed_hidden_dim, c.freq_dim}},
      {"time_embedder.linear_1.bias", &w.time_1_b, nullptr, true, {c.time_embed_hidden_dim}},
      {"time_embedder.linear_2.weight",
       &w.time_2_w,
       &w.time_2_lora,
       true,
       {c.time_embed_dim, c.time_embed_hidden_dim}},
      {"time_embedder.linear_2.bias", &w.time_2_b, nullptr, true, {c.time_embed_dim}},
      {"token_refiner.final_norm.weight", &w.refiner_final_norm, nullptr, false, {h}},
      {"norm_out.norm.weight", &w.norm_out_norm, nullptr, false, {h}},
      {"norm_out.linear.weight", &w.norm_out_w, &w.norm_out_lora, false, {2 * h, c.time_embed_dim}},
      {"norm_out.linear.bias", &w.norm_out_b, nullptr, false, {2 * h}},
      {"proj_out.weight", &w.proj_out_w, &w.proj_out_lora, true, {c.video_patch_dim(), h}},
      {"proj_out.bias", &w.proj_out_b, nullptr, true, {c.video_patch_dim()}},
      {"audio_proj_out.weight",
       &w.audio_proj_out_w,
       &w.audio_proj_out_lora,
       true,
       {c.audio_in_channels, h}},
      {"audio_proj_out.bias", &w.audio_proj_out_b, nullptr, true, {c.audio_in_channels}},
  };
  for (const Global& g : globals) {
    if (name == g.name) return {g.tensor, g.lora, g.island, g.shape};
  }
  return r;
}

}  // namespace h3::dit
