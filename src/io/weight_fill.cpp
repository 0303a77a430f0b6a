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

}  // namespace h3::io
