// Qwen3-VL vision tower (h3_components_spec.md §1.5), float32 reference semantics of
// transformers 5.17 (position interpolation with fp32 weights, golden data).
#include "models/qwen3_vl/qwen3_vl_vision.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "ops/ops.h"

namespace h3::qwen3_vl {
namespace {

Tensor get(const io::Checkpoint& ckpt, const std::string& name, const Shape& shape, DType dtype,
           Device device) {
  H3_CHECK(ckpt.has(name), ErrorCode::kNotFound, ckpt.source(), ": missing tensor '", name,
           "' (Qwen3-VL vision tower)");
  H3_CHECK(ckpt.info(name).shape == shape, ErrorCode::kInvalidFile, ckpt.source(), ": tensor '",
           name, "' has shape ", shape_str(ckpt.info(name).shape), ", expected ", shape_str(shape));
  Tensor t = ckpt.tensor(name).to(dtype);
  if (t.storage() && !t.storage()->owned()) t = t.clone();
  return t.to(device);
}

MergerWeights get_merger(const io::Checkpoint& ckpt, const std::string& p, int64_t norm_dim,
                         int64_t merged, int64_t out, DType dtype, Device device) {
  MergerWeights m;
  m.norm_w = get(ckpt, p + "norm.weight", {norm_dim}, dtype, device);
  m.norm_b = get(ckpt, p + "norm.bias", {norm_dim}, dtype, device);
  m.fc1_w = get(ckpt, p + "linear_fc1.weight", {merged, merged}, dtype, device);
  m.fc1_b = get(ckpt, p + "linear_fc1.bias", {merged}, dtype, device);
  m.fc2_w = get(ckpt, p + "linear_fc2.weight", {out, merged}, dtype, device);
  m.fc2_b = get(ckpt, p + "linear_fc2.bias", {out}, dtype, device);
  return m;
}

// Merger: LayerNorm before (final merger, per token) or after (DeepStack) the 2x2 shuffle, then
// Linear -> GELU(erf) -> Linear (§1.5 steps 5-6).
Tensor run_merger(const MergerWeights& m, const Tensor& x, int64_t merged,
                  bool norm_after_shuffle) {
  const int64_t rows = x.numel() / merged;
  Tensor h = norm_after_shuffle
                 ? ops::layer_norm(x.reshape({rows, merged}), &m.norm_w, &m.norm_b, 1e-6f)
                 : ops::layer_norm(x, &m.norm_w, &m.norm_b, 1e-6f).reshape({rows, merged});
  h = ops::gelu(ops::linear(h, m.fc1_w, &m.fc1_b), false);
  return ops::linear(h, m.fc2_w, &m.fc2_b);
}

}  // namespace

VisionTower VisionTower::load(const Qwen3VlConfig& config, const io::Checkpoint& ckpt,
                              DType dtype, Device device) {
  const VisionConfig& v = config.vision;
  VisionTower t;
  t.config_ = config;
  t.dtype_ = dtype;
  t.device_ = device;
  const std::string p = "model.visual.";
  const int64_t patch_in = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size;
  t.patch_w =
      get(ckpt, p + "patch_embed.proj.weight",
          {v.hidden_size, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size}, dtype,
          device)
          .view({v.hidden_size, patch_in});
  t.patch_b = get(ckpt, p + "patch_embed.proj.bias", {v.hidden_size}, dtype, device);
  // Host copy: the interpolation reads it on the CPU (§1.5 step 2).
  t.pos_embed = get(ckpt, p + "pos_embed.weight", {v.num_position_embeddings, v.hidden_size},
                    dtype, Device::cpu());
  const int64_t hid = v.hidden_size;
  for (int64_t i = 0; i < v.depth; ++i) {
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    VisionBlockWeights w;
    w.norm1_w = get(ckpt, b + "norm1.weight", {hid}, dtype, device);
    w.norm1_b = get(ckpt, b + "norm1.bias", {hid}, dtype, device);
    w.qkv_w = get(ckpt, b + "attn.qkv.weight", {3 * hid, hid}, dtype, device);
    w.qkv_b = get(ckpt, b + "attn.qkv.bias", {3 * hid}, dtype, device);
    w.proj_w = get(ckpt, b + "attn.proj.weight", {hid, hid}, dtype, device);
    w.proj_b = get(ckpt, b + "attn.proj.bias", {hid}, dtype, device);
    w.norm2_w = get(ckpt, b + "norm2.weight", {hid}, dtype, device);
    w.norm2_b = get(ckpt, b + "norm2.bias", {hid}, dtype, device);
    w.fc1_w = get(ckpt, b + "mlp.linear_fc1.weight", {v.intermediate_size, hid}, dtype, device);
    w.fc1_b = get(ckpt, b + "mlp.linear_fc1.bias", {v.intermediate_size}, dtype, device);
    w.fc2_w = get(ckpt, b + "mlp.linear_fc2.weight", {hid, v.intermediate_size}, dtype, device);
    w.fc2_b = get(ckpt, b + "mlp.linear_fc2.bias", {hid}, dtype, device);
    t.blocks_.push_back(std::move(w));
  }
  const int64_t merged = hid * v.spatial_merge_size * v.spatial_merge_size;
  t.merger_ = get_merger(ckpt, p + "merger.", hid, merged, v.out_hidden_size, dtype, device);
  for (size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k) {
    t.deepstack_.push_back(get_merger(ckpt, p + "deepstack_merger_list." + std::to_string(k) + ".",
                                      merged, merged, v.out_hidden_size, dtype, device));
  }
  t.loaded_ = true;
  return t;
}

uint64_t VisionTower::weight_bytes() const {
  uint64_t n = 0;
  auto add = [&n](const Tensor& t) { n += t.defined() ? t.nbytes() : 0; };
  add(patch_w), add(patch_b), add(pos_embed);
  for (const auto& w : blocks_) {
    for (const Tensor* t : {&w.norm1_w, &w.norm1_b, &w.qkv_w, &w.qkv_b, &w.proj_w, &w.proj_b,
                            &w.norm2_w, &w.norm2_b, &w.fc1_w, &w.fc1_b, &w.fc2_w, &w.fc2_b})
      add(*t);
  }
  auto add_m = [&add](const MergerWeights& m) {
    add(m.norm_w), add(m.norm_b), add(m.fc1_w), add(m.fc1_b), add(m.fc2_w), add(m.fc2_b);
  };
  add_m(merger_);
  for (const auto& m : deepstack_) add_m(m);
  return n;
}

void VisionTower::release() {
  patch_w = patch_b = pos_embed = Tensor();
  std::vector<VisionBlockWeights>().swap(blocks_);
  merger_ = MergerWeights();
  std::vector<MergerWeights>().swap(deepstack_);
  loaded_ = false;
}

VisionOutput VisionTower::forward(const Tensor& pixel_values, const std::vector<GridThw>& grids,
                                  bool keep_hidden) const {
  H3_CHECK(loaded_, ErrorCode::kInvalidArgument,
           "Qwen3-VL vision tower: forward on a model that is not loaded (or was released)");
  const VisionConfig& v = config_.vision;
  const int64_t hid = v.hidden_size, heads = v.num_heads, hd = hid / heads;
  const int64_t m = v.spatial_merge_size;
  const int64_t side =
      static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(v.num_position_embeddings))));
  int64_t n = 0;
  for (const GridThw& g : grids) {
    H3_CHECK(g.t > 0 && g.h > 0 && g.w > 0 && g.h % m == 0 && g.w % m == 0,
             ErrorCode::kInvalidArgument, "Qwen3-VL vision tower: bad grid (", g.t, ", ", g.h, ", ",
             g.w, ")");
    n += g.t * g.h * g.w;
  }
  H3_CHECK(pixel_values.dim() == 2 && pixel_values.size(0) == n &&
               pixel_values.size(1) == patch_w.size(1),
           ErrorCode::kInvalidArgument, "Qwen3-VL vision tower: pixel_values must be [", n, ", ",
           patch_w.size(1), "] for the given grids, got ", shape_str(pixel_values.shape()));

  // Per patch, in merge-block order: (row, col) for the position table and the 2-D rotary.
  std::vector<float> pos(static_cast<size_t>(n * hid), 0.0f);
  const int64_t half = hd / 2;  // rotary dims per axis pair: [row freqs | col freqs], doubled
  const int64_t nfreq = half / 2;
  std::vector<float> inv(static_cast<size_t>(nfreq));
  for (int64_t k = 0; k < nfreq; ++k)
    inv[static_cast<size_t>(k)] =
        1.0f / std::pow(10000.0f, static_cast<float>(2 * k) / static_cast<float>(half));
  std::vector<float> cosv(static_cast<size_t>(n * hd)), sinv(cosv.size());
  const std::vector<float> table = pos_embed.to_f32_vector();
  std::vector<int64_t> cu{0};
  int64_t row_i = 0;
  for (const GridThw& g : grids) {
    for (int64_t t = 0; t < g.t; ++t) {
      for (int64_t br = 0; br < g.h / m; ++br) {
        for (int64_t bc = 0; bc < g.w / m; ++bc) {
          for (int64_t ir = 0; ir < m; ++ir) {
            for (int64_t ic = 0; ic < m; ++ic, ++row_i) {
              const int64_t r = br * m + ir, c = bc * m + ic;
              // Bilinear interpolation of the side x side table (fp32 weights and sums).
              const float pr = static_cast<float>(r) * static_cast<float>(side - 1) /
                               static_cast<float>(std::max<int64_t>(g.h - 1, 1));
              const float pc = static_cast<float>(c) * static_cast<float>(side - 1) /
                               static_cast<float>(std::max<int64_t>(g.w - 1, 1));
              const int64_t r0 = static_cast<int64_t>(std::floor(pr));
              const int64_t c0 = static_cast<int64_t>(std::floor(pc));
              float* dst = &pos[static_cast<size_t>(row_i * hid)];
              for (int64_t dr = 0; dr < 2; ++dr) {
                const int64_t tr = std::min(std::max<int64_t>(r0 + dr, 0), side - 1);
                const float wr = std::max(0.0f, 1.0f - std::fabs(pr - static_cast<float>(r0 + dr)));
                for (int64_t dc = 0; dc < 2; ++dc) {
                  const int64_t tc = std::min(std::max<int64_t>(c0 + dc, 0), side - 1);
                  const float wc =
                      std::max(0.0f, 1.0f - std::fabs(pc - static_cast<float>(c0 + dc)));
                  const float wgt = wr * wc;
                  const float* src = &table[static_cast<size_t>((tr * side + tc) * hid)];
                  for (int64_t k = 0; k < hid; ++k) dst[k] += wgt * src[k];
                }
              }
              float* cr = &cosv[static_cast<size_t>(row_i * hd)];
              float* sr = &sinv[static_cast<size_t>(row_i * hd)];
              for (int64_t k = 0; k < nfreq; ++k) {
                const float ar = static_cast<float>(r) * inv[static_cast<size_t>(k)];
                const float ac = static_cast<float>(c) * inv[static_cast<size_t>(k)];
                for (int64_t rep = 0; rep < 2; ++rep) {
                  cr[rep * half + k] = std::cos(ar);
                  sr[rep * half + k] = std::sin(ar);
                  cr[rep * half + nfreq + k] = std::cos(ac);
                  sr[rep * half + nfreq + k] = std::sin(ac);
                }
              }
            }
          }
        }
      }
      cu.push_back(cu.back() + g.h * g.w);
    }
  }
  // Tables built on the host, uploaded once per forward (cos/sin stay float32: the reference
  // applies the ViT rotary in float32, §1.5 step 3).
  const Tensor cos = Tensor::from_f32(cosv, {n, hd}).to(device_);
  const Tensor sin = Tensor::from_f32(sinv, {n, hd}).to(device_);
  // The reference rotates q and k in float32 and casts back to the activation dtype (§1.5 step
  // 4): one rounding per element, unlike the text rotary whose products round in bf16.
  auto rotate = [&](const Tensor& t) {
    if (dtype_ == DType::kF32) return ops::rope(t, cos, sin, static_cast<int>(hd));
    return ops::cast(ops::rope(ops::cast(t, DType::kF32), cos, sin, static_cast<int>(hd)), dtype_);
  };

  // The patch embedding casts its input to the weight dtype (§1.5 step 1).
  const Tensor px = pixel_values.to(device_);
  Tensor x = ops::linear(px.dtype() == dtype_ ? px : ops::cast(px, dtype_), patch_w, &patch_b);
  x = ops::add(x, Tensor::from_f32(pos, {n, hid}, dtype_).to(device_));
  VisionOutput out;
  if (keep_hidden) out.hidden.push_back(x);
  ops::AttentionParams ap;
  ap.cu_seqlens = cu;
  const int64_t merged = hid * m * m;
  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const VisionBlockWeights& w = blocks_[bi];
    const Tensor h = ops::layer_norm(x, &w.norm1_w, &w.norm1_b, 1e-6f);
    const Tensor qkv = ops::linear(h, w.qkv_w, &w.qkv_b).view({n, 3, heads, hd});
    // ops::copy makes the strided q/k/v slices contiguous on any device.
    const Tensor q = rotate(ops::copy(qkv.select(1, 0)));
    const Tensor k = rotate(ops::copy(qkv.select(1, 1)));
    const Tensor vv = ops::copy(qkv.select(1, 2));
    const Tensor a = ops::attention(q, k, vv, ap).reshape({n, hid});
    x = ops::add(x, ops::linear(a, w.proj_w, &w.proj_b));
    const Tensor h2 = ops::layer_norm(x, &w.norm2_w, &w.norm2_b, 1e-6f);
    x = ops::add(
        x, ops::linear(ops::gelu(ops::linear(h2, w.fc1_w, &w.fc1_b), true), w.fc2_w, &w.fc2_b));
    if (keep_hidden) out.hidden.push_back(x);
    for (size_t d = 0; d < v.deepstack_visual_indexes.size(); ++d) {
      if (v.deepstack_visual_indexes[d] == static_cast<int64_t>(bi))
        out.deepstack.push_back(run_merger(deepstack_[d], x, merged, true));
    }
  }
  out.tokens = run_merger(merger_, x, merged, false);
  return out;
}

}  // namespace h3::qwen3_vl
