// The backend-ops harness: the case registry, the metric, and the two parameterized tests that run
// every registered case on the CPU (against its float64 reference) and on CUDA (against the CPU).
#include "backend_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <set>
#include <string>

#include "core/device.h"
#include "core/status.h"

namespace h3::test::ops {

// ---- inputs -------------------------------------------------------------------------------------

std::vector<float> Rng::uniform(int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen_);
  return v;
}

std::vector<float> Rng::normal(int64_t n, float mean, float stddev) {
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen_);
  return v;
}

Tensor Rng::uniform_tensor(const Shape& shape, DType dtype, float lo, float hi) {
  return Tensor::from_f32(uniform(shape_numel(shape), lo, hi), shape, dtype);
}

Tensor Rng::normal_tensor(const Shape& shape, DType dtype, float mean, float stddev) {
  return Tensor::from_f32(normal(shape_numel(shape), mean, stddev), shape, dtype);
}

Tensor Rng::indices(int64_t n, int64_t bound, bool distinct, bool i32) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (distinct) {
    std::vector<int64_t> perm(static_cast<size_t>(bound));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), gen_);
    std::copy_n(perm.begin(), n, v.begin());
  } else {
    std::uniform_int_distribution<int64_t> d(0, bound - 1);
    for (int64_t& x : v) x = d(gen_);
  }
  Tensor t = Tensor::from_i64(v, {n});
  return i32 ? t.to(DType::kI32) : t;
}

Bounds default_bounds(DType output) {
  switch (output) {
    case DType::kBF16:
      return {1e-2, 2e-2};
    case DType::kF16:
      return {2e-3, 4e-3};
    default:
      return {1e-5, 1e-5};
  }
}

// ---- registry -------------------------------------------------------------------------------------

namespace {
std::vector<OpCase>& registry() {
  static std::vector<OpCase> cases;
  return cases;
}

uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across platforms, unlike std::hash
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

void register_case(OpCase c) {
  for (char ch : c.name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') {
      std::fprintf(stderr, "backend_ops: case name '%s' has a character other than [A-Za-z0-9_]\n",
                   c.name.c_str());
      std::abort();
    }
  }
  for (const OpCase& o : registry()) {
    if (o.name == c.name) {
      std::fprintf(stderr, "backend_ops: case name '%s' registered twice\n", c.name.c_str());
      std::abort();
    }
  }
  registry().push_back(std::move(c));
}

const std::vector<OpCase>& all_cases() { return registry(); }

bool large_enabled() {
  const char* v = std::getenv("H3_OPS_LARGE");
  return v && std::string(v) == "1";
}

std::string dtype_tag(DType t) { return dtype_name(t); }

std::vector<double> f64(const Tensor& t) { return t.to_f64_vector(); }

Metrics measure(const std::vector<double>& got, const std::vector<double>& ref) {
  Metrics m;
  m.count = static_cast<int64_t>(ref.size());
  double err2 = 0, ref2 = 0, ref_max = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && std::isfinite(ref[i])) {
      ++m.nonfinite;
      continue;
    }
    if (!std::isfinite(ref[i])) continue;  // equal non-finite values carry no error
    const double e = std::fabs(got[i] - ref[i]);
    err2 += e * e;
    ref2 += ref[i] * ref[i];
    m.max_abs = std::max(m.max_abs, e);
    ref_max = std::max(ref_max, std::fabs(ref[i]));
  }
  // An all-zero reference makes the relative figures absolute ones.
  m.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  m.rel_max = ref_max > 0 ? m.max_abs / ref_max : m.max_abs;
  return m;
}

namespace {

std::string format(const Metrics& m, const Bounds& b) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "rel_l2=%.3e rel_max=%.3e max_abs=%.3e n=%lld (bounds %.1e / %.1e)",
                m.rel_l2, m.rel_max, m.max_abs, static_cast<long long>(m.count), b.rel_l2,
                b.rel_max);
  return buf;
}

void expect_within(const char* backend, const OpCase& c, const std::vector<double>& got,
                   const std::vector<double>& ref, const Bounds& b) {
  ASSERT_EQ(got.size(), ref.size()) << c.name << ": output has " << got.size()
                                    << " elements, the reference " << ref.size();
  const Metrics m = measure(got, ref);
  std::printf("[%s] %s: %s\n", backend, c.name.c_str(), format(m, b).c_str());
  EXPECT_EQ(m.nonfinite, 0) << c.name << ": " << m.nonfinite << " non-finite outputs";
  EXPECT_LE(m.rel_l2, b.rel_l2) << c.name << " rel_l2";
  EXPECT_LE(m.rel_max, b.rel_max) << c.name << " rel_max";
}

std::vector<size_t> selected_cases() {
  std::vector<size_t> ids;
  const bool large = large_enabled();
  for (size_t i = 0; i < all_cases().size(); ++i) {
    if (!all_cases()[i].large || large) ids.push_back(i);
  }
  return ids;
}

class BackendOps : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& c() const { return all_cases()[GetParam()]; }
  std::vector<Tensor> inputs() const {
    Rng rng(name_seed(c().name));
    return c().make_inputs(rng);
  }
};

TEST_P(BackendOps, Cpu) {
  const OpCase& oc = c();
  if (!oc.reference) GTEST_SKIP() << oc.name << ": no float64 reference (cross-backend case only)";
  const std::vector<Tensor> in = inputs();
  Tensor out;
  try {
    out = oc.run(in);
  } catch (const Error& e) {
    FAIL() << oc.name << ": the CPU op threw " << error_code_name(e.code()) << ": " << e.message();
  }
  ASSERT_TRUE(out.defined());
  EXPECT_EQ(out.dtype(), oc.dtype) << oc.name << ": output " << out.desc();
  expect_within("cpu", oc, f64(out), oc.reference(in), oc.cpu_bounds.value_or(default_bounds(oc.dtype)));
}

TEST_P(BackendOps, Cuda) {
  const OpCase& oc = c();
  if (!cuda_available()) {
    GTEST_SKIP() << "no CUDA device in this "
#ifdef H3_WITH_CUDA
                 << "CUDA build"
#else
                 << "CPU-only build"
#endif
                 << ": " << oc.name << " runs on the CPU only";
  }
  const std::vector<Tensor> in = inputs();
  const Tensor expect = oc.run(in);
  std::vector<Tensor> dev_in;
  for (const Tensor& t : in) dev_in.push_back(t.defined() ? t.to(Device::cuda()) : t);
  Tensor got;
  try {
    got = oc.run(dev_in);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kUnsupported) {
      GTEST_SKIP() << oc.op << " not supported on cuda: " << e.message();
    }
    FAIL() << oc.name << ": the CUDA op threw " << error_code_name(e.code()) << ": " << e.message();
  }
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(got.device().is_cuda()) << oc.name << ": output " << got.desc();
  EXPECT_EQ(got.dtype(), expect.dtype()) << oc.name;
  EXPECT_EQ(got.shape(), expect.shape()) << oc.name << ": " << got.desc() << " vs " << expect.desc();
  const Tensor host = got.to(Device::cpu());
  expect_within("cuda", oc, f64(host), f64(expect),
                oc.device_bounds.value_or(default_bounds(oc.dtype)));
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOps, ::testing::ValuesIn(selected_cases()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return all_cases()[info.param].name;
                         });

// The table itself: names unique, every case complete, and each op of ops.h covered.
TEST(BackendOpsTable, CasesAreWellFormed) {
  std::set<std::string> ops;
  for (const OpCase& oc : all_cases()) {
    EXPECT_TRUE(oc.make_inputs && oc.run) << oc.name << " lacks make_inputs or run";
    EXPECT_FALSE(oc.op.empty()) << oc.name;
    ops.insert(oc.op);
  }
  const char* required[] = {"linear",
                            "matmul",
                            "attention",
                            "rms_norm",
                            "layer_norm",
                            "group_norm",
                            "rope",
                            "modulate",
                            "gated_residual",
                            "swiglu",
                            "silu",
                            "gelu",
                            "snake",
                            "snake_beta",
                            "add",
                            "mul",
                            "scale",
                            "cast",
                            "conv1d",
                            "conv_transpose1d",
                            "conv3d",
                            "pad3d",
                            "gather_rows",
                            "scatter_rows",
                            "concat",
                            "copy",
                            "copy_into",
                            "rms_norm_modulate",
                            "rms_norm_modulate_fp8",
                            "gated_residual_rms_norm_modulate",
                            "swiglu_fp8",
                            "qk_norm_rope",
                            "linear_residual",
                            "anti_aliased_snake_beta"};
  for (const char* op : required) EXPECT_TRUE(ops.count(op)) << "no backend-ops case for ops::" << op;
  for (const char* op : {"weight_norm", "weight_norm_into"})
    EXPECT_TRUE(ops.count(op)) << "no backend-ops case for ops::" << op;
  std::printf("[table] %zu cases (%zu selected; H3_OPS_LARGE=%d) over %zu ops\n", all_cases().size(),
              selected_cases().size(), large_enabled() ? 1 : 0, ops.size());
}

}  // namespace
}  // namespace h3::test::ops
