// Backend-ops cases: gather_rows, scatter_rows, concat and copy (exact byte moves; scatter also
// converts src to the destination dtype).
#include <string>

#include "backend_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

std::string shape_tag(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += "x";
    out += std::to_string(s[i]);
  }
  return out;
}

void exact(OpCase& c) {
  c.cpu_bounds = Bounds{0, 0};
  c.device_bounds = Bounds{0, 0};
}

void add_gather(const Shape& x, int64_t n, DType t, bool i32) {
  OpCase c;
  c.op = "gather_rows";
  c.name = "gather_rows_" + dtype_tag(t) + "_" + shape_tag(x) + "_n" + std::to_string(n) + (i32 ? "_i32" : "");
  c.dtype = t;
  exact(c);
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor(x, t), r.indices(n, x[0], false, i32)};
  };
  c.run = [](const std::vector<Tensor>& in) { return h3::ops::gather_rows(in[0], in[1]); };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> v = f64(in[0]);
    const std::vector<int64_t> idx = in[1].to_i64_vector();
    const int64_t row = in[0].numel() / x[0];
    std::vector<double> y;
    for (int64_t i : idx)
      for (int64_t j = 0; j < row; ++j) y.push_back(v[i * row + j]);
    return y;
  };
  register_case(std::move(c));
}

void add_scatter(const Shape& dst, int64_t n, DType t, DType src_t) {
  OpCase c;
  c.op = "scatter_rows";
  c.name = "scatter_rows_" + dtype_tag(t) + "_from_" + dtype_tag(src_t) + "_" + shape_tag(dst) + "_n" +
           std::to_string(n);
  c.dtype = t;
  exact(c);
  Shape src = dst;
  src[0] = n;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor(dst, t), r.indices(n, dst[0], /*distinct=*/true),
                               r.normal_tensor(src, src_t)};
  };
  c.run = [](const std::vector<Tensor>& in) {
    Tensor d = h3::ops::copy(in[0]);  // the op works in place: never on the case's inputs
    h3::ops::scatter_rows(d, in[1], in[2]);
    return d;
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> y = f64(in[0]);
    // src rounded to the destination dtype, as the op stores it.
    const std::vector<double> s = f64(in[2].to(t));
    const std::vector<int64_t> idx = in[1].to_i64_vector();
    const int64_t row = in[0].numel() / dst[0];
    for (size_t i = 0; i < idx.size(); ++i)
      for (int64_t j = 0; j < row; ++j) y[idx[i] * row + j] = s[i * row + j];
    return y;
  };
  register_case(std::move(c));
}

void add_concat(const std::vector<Shape>& parts, int dim, DType t) {
  OpCase c;
  c.op = "concat";
  c.name = "concat_" + dtype_tag(t) + "_dim";
  if (dim < 0) c.name += "m";
  c.name += std::to_string(dim < 0 ? -dim : dim);
  for (const Shape& s : parts) {
    c.name += "_";
    c.name += shape_tag(s);
  }
  c.dtype = t;
  exact(c);
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in;
    for (const Shape& s : parts) in.push_back(r.normal_tensor(s, t));
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) { return h3::ops::concat(in, dim); };
  c.reference = [=](const std::vector<Tensor>& in) {
    const int nd = static_cast<int>(parts[0].size());
    const int d = dim < 0 ? dim + nd : dim;
    int64_t outer = 1;
    for (int i = 0; i < d; ++i) outer *= parts[0][i];
    std::vector<std::vector<double>> vals;
    for (const Tensor& x : in) vals.push_back(f64(x));
    std::vector<double> y;
    for (int64_t o = 0; o < outer; ++o)
      for (const std::vector<double>& v : vals) {
        const int64_t inner = static_cast<int64_t>(v.size()) / outer;
        y.insert(y.end(), v.begin() + o * inner, v.begin() + (o + 1) * inner);
      }
    return y;
  };
  register_case(std::move(c));
}

void add_copy(const Shape& shape, std::vector<int> perm, DType t) {
  OpCase c;
  c.op = "copy";
  std::string ps;
  for (int p : perm) ps += std::to_string(p);
  c.name = "copy_" + dtype_tag(t) + "_" + shape_tag(shape) + "_perm" + ps;
  c.dtype = t;
  exact(c);
  c.make_inputs = [=](Rng& r) { return std::vector<Tensor>{r.normal_tensor(shape, t)}; };
  // A strided view (permute, on any device) made contiguous by the op.
  c.run = [=](const std::vector<Tensor>& in) { return h3::ops::copy(in[0].permute(perm)); };
  c.reference = [=](const std::vector<Tensor>& in) { return f64(in[0].permute(perm).contiguous()); };
  register_case(std::move(c));
}

// copy_into: the same byte moves into a buffer that exists before the call.
void add_copy_into(const Shape& shape, std::vector<int> perm, DType t) {
  OpCase c;
  c.op = "copy_into";
  std::string ps;
  for (int p : perm) ps += std::to_string(p);
  c.name = "copy_into_" + dtype_tag(t) + "_" + shape_tag(shape) + "_perm" + ps;
  c.dtype = t;
  exact(c);
  c.make_inputs = [=](Rng& r) { return std::vector<Tensor>{r.normal_tensor(shape, t)}; };
  c.run = [=](const std::vector<Tensor>& in) {
    const Tensor src = in[0].permute(perm);
    Tensor dst = Tensor::empty(src.shape(), t, src.device());
    h3::ops::copy_into(dst, src);
    return dst;
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    return f64(in[0].permute(perm).contiguous());
  };
  register_case(std::move(c));
}

void add_cases() {
  for (DType t : {DType::kF32, DType::kBF16}) {
    add_gather({17, 24}, 9, t, false);
    add_gather({5, 3, 4}, 12, t, true);
    add_scatter({20, 96}, 13, t, t);
    add_concat({{3, 5}, {4, 5}, {1, 5}}, 0, t);
    add_concat({{2, 3, 4}, {2, 1, 4}}, 1, t);
    add_concat({{2, 3, 4}, {2, 3, 7}}, -1, t);
    add_copy({4, 5, 6}, {2, 0, 1}, t);
    add_copy({3, 8}, {1, 0}, t);
    add_copy_into({4, 5, 6}, {0, 1, 2}, t);
    add_copy_into({4, 5, 6}, {2, 0, 1}, t);
  }
  add_scatter({20, 96}, 7, DType::kBF16, DType::kF32);  // fp32 projections into the bf16 buffer
  add_gather({10, 4}, 6, DType::kI64, false);           // integer payloads (positions, tags)
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
