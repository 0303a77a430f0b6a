#include "models/fp8_checkpoint.h"

#include <vector>

#include "core/status.h"

namespace h3::models {
namespace {

constexpr const char* kSuffixes[] = {".weight_scale_inv", ".weight_scale", ".input_scale"};

bool ends_with(const std::string& s, const char* suffix, size_t* stem) {
  const std::string_view v(suffix);
  if (s.size() <= v.size() || s.compare(s.size() - v.size(), v.size(), v) != 0) return false;
  *stem = s.size() - v.size();
  return true;
}

// A float scale tensor of `ckpt` as float32 values on the CPU.
std::vector<float> scale_values(const io::Checkpoint& ckpt, const std::string& name) {
  const io::TensorInfo& info = ckpt.info(name);
  H3_CHECK(info.dtype == DType::kF32 || info.dtype == DType::kBF16 || info.dtype == DType::kF16,
           ErrorCode::kInvalidFile, ckpt.source(), ": FP8 scale '", name, "' has dtype ",
           dtype_name(info.dtype), ", expected F32, BF16 or F16");
  return ckpt.tensor(name).to(DType::kF32).to_f32_vector();
}

}  // namespace

bool is_fp8_companion(const std::string& name, std::string* weight) {
  for (const char* suffix : kSuffixes) {
    size_t stem = 0;
    if (ends_with(name, suffix, &stem)) {
      *weight = name.substr(0, stem) + ".weight";
      return true;
    }
  }
  return false;
}

ops::Fp8Weight read_fp8_projection(const io::Checkpoint& ckpt, const std::string& weight,
                                   const Tensor& data, Fp8ProjectionNote* note) {
  const std::string& src = ckpt.source();
  H3_CHECK(data.dtype() == DType::kF8E4M3 && data.dim() == 2, ErrorCode::kInvalidFile, src,
           ": FP8 weight '", weight, "' ", data.desc(), ": expected F8_E4M3 [N, K]");
  const int64_t n = data.size(0), k = data.size(1);
  const std::string stem = weight.substr(0, weight.size() - std::string(".weight").size());
  const std::string per_name = stem + ".weight_scale", block_name = stem + ".weight_scale_inv",
                    input_name = stem + ".input_scale";
  const bool per = ckpt.has(per_name), block = ckpt.has(block_name);
  const int64_t nb = (n + ops::kFp8BlockSize - 1) / ops::kFp8BlockSize;
  const int64_t kb = (k + ops::kFp8BlockSize - 1) / ops::kFp8BlockSize;
  H3_CHECK(per || block, ErrorCode::kInvalidFile, src, ": FP8 weight '", weight,
           "' has no scale: expected '", per_name, "' ([] or [1] per tensor, [", n, "] or [", n,
           ", 1] per channel) or '", block_name, "' ([", nb, ", ", kb, "], 128 x 128 blocks)");
  H3_CHECK(!(per && block), ErrorCode::kInvalidFile, src, ": FP8 weight '", weight, "' has both '",
           per_name, "' and '", block_name, "': one kind of scale is expected");
  Fp8ProjectionNote local;
  Fp8ProjectionNote& out = note ? *note : local;
  if (ckpt.has(input_name)) {
    const Shape& s = ckpt.info(input_name).shape;
    int64_t count = 1;
    for (int64_t d : s) count *= d;
    H3_CHECK(count == 1, ErrorCode::kInvalidFile, src, ": '", input_name, "' has shape ",
             shape_str(s), ", expected one static activation scale ([] or [1])");
    out.static_input_scale = true;
  }

  ops::Fp8Weight w;
  w.data = data;
  const std::string& scale_name = per ? per_name : block_name;
  const Shape& shape = ckpt.info(scale_name).shape;
  std::vector<float> v = scale_values(ckpt, scale_name);
  if (per) {
    const bool one = v.size() == 1 && (shape.empty() || shape == Shape{1} || shape == Shape{1, 1});
    const bool channel = shape == Shape{n} || shape == Shape{n, 1};
    H3_CHECK(one || channel, ErrorCode::kInvalidFile, src, ": FP8 scale '", scale_name,
             "' has shape ", shape_str(shape), ", expected [] or [1] (per tensor) or [", n,
             "] or [", n, ", 1] (per channel) for '", weight, "' [", n, ", ", k, "]");
    if (one) v.assign(static_cast<size_t>(n), v[0]);
    w.scaling = ops::Fp8WeightScaling::kPerChannel;
    w.scale = Tensor::from_f32(v, {n});
    out.layout = one ? "per tensor" : "per channel";
  } else {
    H3_CHECK(shape == (Shape{nb, kb}), ErrorCode::kInvalidFile, src, ": FP8 scale '", scale_name,
             "' has shape ", shape_str(shape), ", expected [", nb, ", ", kb,
             "] (128 x 128 blocks of '", weight, "' [", n, ", ", k, "])");
    w.scaling = ops::Fp8WeightScaling::kPerBlock;
    w.scale = Tensor::from_f32(v, {nb, kb});
    out.layout = "128x128 blocks";
  }
  if (!data.device().is_cpu()) w.scale = w.scale.to(data.device());
  try {
    ops::check_fp8_weight(w, src + ": '" + weight + "'");
  } catch (const Error& e) {
    fail(ErrorCode::kInvalidFile, e.what());  // a bad file, not a bad argument
  }
  // Block scales stay as published: the engine's GEMMs pair them with activations per token and
  // 128 columns (ops::projection_fp8 tells them by the scale's rank), no second rounding.
  return w;
}

}  // namespace h3::models
