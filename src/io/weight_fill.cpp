#include "io/weight_fill.h"

#include <utility>

#include "core/dtype.h"

namespace h3::io {

namespace {
std::shared_ptr<const WeightFill>& installed() {
  static std::shared_ptr<const WeightFill> fill;
  return fill;
}
}  // namespace

void set_weight_fill(std::shared_ptr<const WeightFill> fill) { installed() = std::move(fill); }

const WeightFill* weight_fill() { return installed().get(); }

Tensor apply_weight_fill(const std::string& source, const std::string& name, Tensor t) {
  const WeightFill* f = weight_fill();
  if (!f || !t.defined() || !dtype_is_float(t.dtype())) return t;
  if (!t.is_contiguous() || !t.storage() || !t.storage()->owned()) t = t.clone();
  f->fill(source, name, t);
  return t;
}

void apply_weight_fill(const std::string& source, const std::vector<std::string>& names,
                       std::vector<Tensor>& ts) {
  const WeightFill* f = weight_fill();
  if (!f) return;
  std::vector<std::string> fill_names;
  std::vector<Tensor> fill_ts;
  for (size_t i = 0; i < ts.size(); ++i) {
    Tensor& t = ts[i];
    if (!t.defined() || !dtype_is_float(t.dtype())) continue;
    if (!t.is_contiguous() || !t.storage() || !t.storage()->owned()) t = t.clone();
    fill_names.push_back(names[i]);
    fill_ts.push_back(t);  // a handle on the same storage: filling it fills ts[i]
  }
  if (!fill_ts.empty()) f->fill_many(source, fill_names, fill_ts);
}

}  // namespace h3::io
