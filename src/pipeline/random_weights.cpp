#include "pipeline/random_weights.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/status.h"
#include "io/weight_fill.h"
#include "ops/ops.h"
#include "ops/random_fill.h"

namespace h3::pipeline {

namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class RandomWeightFill final : public io::WeightFill {
 public:
  explicit RandomWeightFill(uint64_t seed) : seed_(seed) {}
  void fill(const std::string&, const std::string& name, Tensor& t) const override {
    const FillRange r = random_weight_range(name, t.shape());
    ops::fill_random(t, ops::mix64(seed_ ^ fnv1a(name)), r.center, r.half_width);
  }
  // One pass for the whole load (one kernel on CUDA), the same values as fill() on each. The
  // largest tensors keep a launch of their own: they fill at the memory's speed either way, and
  // a block-to-tensor search per block buys them nothing.
  void fill_many(const std::string& source, const std::vector<std::string>& names,
                 std::vector<Tensor>& ts) const override {
    constexpr int64_t kOwnLaunch = int64_t{1} << 24;
    std::vector<Tensor> small;
    std::vector<ops::RandomFill> fills;
    for (size_t i = 0; i < ts.size(); ++i) {
      if (ts[i].numel() >= kOwnLaunch) {
        fill(source, names[i], ts[i]);
        continue;
      }
      const FillRange r = random_weight_range(names[i], ts[i].shape());
      small.push_back(ts[i]);
      fills.push_back({ops::mix64(seed_ ^ fnv1a(names[i])), r.center, r.half_width});
    }
    ops::fill_random_many(small, fills);
  }

 private:
  uint64_t seed_;
};

}  // namespace

FillRange random_weight_range(const std::string& name, const Shape& shape) {
  if (shape.size() >= 2 && shape[0] > 0) {
    const int64_t fan_in = std::max<int64_t>(shape_numel(shape) / shape[0], 1);
    return {0.0f, static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)))};
  }
  // Layer scales of the video VAE's transformer decoder start small (0.1), as its init does.
  if (ends_with(name, "scale1") || ends_with(name, "scale2")) return {0.1f, 0.0f};
  if (contains(name, "alpha") || contains(name, "beta"))
    return {contains(name, "log") ? 0.0f : 1.0f, 0.05f};
  if (contains(name, "norm") || contains(name, "scale") || contains(name, "gamma") ||
      ends_with(name, ".weight"))
    return {1.0f, 0.05f};
  return {0.0f, 0.02f};
}

RandomWeightsScope::RandomWeightsScope(uint64_t seed) {
  H3_CHECK(io::weight_fill() == nullptr, ErrorCode::kInternal,
           "random weights: a weight fill is already installed");
  io::set_weight_fill(std::make_shared<RandomWeightFill>(seed));
}

RandomWeightsScope::~RandomWeightsScope() { io::set_weight_fill(nullptr); }

}  // namespace h3::pipeline
