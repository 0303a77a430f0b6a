// The backend-ops harness (in the spirit of llama.cpp's test-backend-ops): a table of op cases,
// each declared once and run on every backend.
//
//   * On the CPU a case runs the op and compares it with an independent, naive float64 reference
//     written in the test (the `reference` function), so the CPU oracle itself is verified.
//   * On CUDA (when a device is present) the same inputs run on the device and are compared with the
//     CPU result; without a device the CUDA variant is a visible GTEST_SKIP. An op that a backend
//     reports as ErrorCode::kUnsupported is a skip that names the op, like llama.cpp's "not supported".
//
// Every comparison prints "rel_l2=.. rel_max=.. (bounds ..)" with rel_l2 = ||a-ref||/||ref|| and
// rel_max = max|a-ref| / max|ref|. Bounds default by output dtype (f32 1e-5; f16 2e-3 / 4e-3;
// bf16 1e-2 / 2e-2) and a case may override them. Cases marked `large` only run with
// H3_OPS_LARGE=1 (the GPU machine); CI keeps to the small shapes.
//
// Adding cases from another file (e.g. tests/ops/test_cuda_specific.cpp):
//
//   static void add_my_cases() {
//     using namespace h3::test::ops;
//     OpCase c;
//     c.op = "attention";
//     c.name = "attention_fa_bf16_s1000_h4_d128";
//     c.dtype = h3::DType::kBF16;
//     c.large = true;
//     c.make_inputs = [](Rng& r) { return std::vector<h3::Tensor>{...}; };
//     c.run = [](const std::vector<h3::Tensor>& in) { return h3::ops::attention(in[0], in[1], in[2]); };
//     register_case(std::move(c));
//   }
//   H3_OPS_CASES(add_my_cases);
//
// A case without `reference` runs only the cross-backend comparison.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::test::ops {

// Deterministic inputs: a case's generator is seeded from its name, so a case's data never
// depends on which other cases exist.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  std::vector<float> uniform(int64_t n, float lo = -1.0f, float hi = 1.0f);
  std::vector<float> normal(int64_t n, float mean = 0.0f, float stddev = 1.0f);
  // Uniform [lo, hi) values rounded to dtype.
  Tensor uniform_tensor(const Shape& shape, DType dtype, float lo = -1.0f, float hi = 1.0f);
  Tensor normal_tensor(const Shape& shape, DType dtype, float mean = 0.0f, float stddev = 1.0f);
  // n indices in [0, bound) (int64, or int32 when `i32`); a permutation prefix when `distinct`.
  Tensor indices(int64_t n, int64_t bound, bool distinct = false, bool i32 = false);
  std::mt19937_64& engine() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

struct Bounds {
  double rel_l2 = 1e-5;
  double rel_max = 1e-5;
};
// The default bounds for an output dtype (exact ops set {0, 0}).
Bounds default_bounds(DType output);

struct OpCase {
  std::string op;    // the ops:: function, e.g. "linear"
  std::string name;  // unique; letters, digits and '_' (it becomes the gtest parameter name)
  DType dtype = DType::kF32;  // output dtype, which picks the default bounds
  bool large = false;         // only with H3_OPS_LARGE=1
  // The inputs, on the CPU. Index tensors and parameters travel with them.
  std::function<std::vector<Tensor>(Rng&)> make_inputs;
  // Runs the op on inputs already moved to the backend's device; returns its output there.
  std::function<Tensor(const std::vector<Tensor>&)> run;
  // Naive float64 reference computed from the CPU inputs (unset: no CPU self-check).
  std::function<std::vector<double>(const std::vector<Tensor>&)> reference;
  std::optional<Bounds> cpu_bounds;     // CPU vs the float64 reference
  std::optional<Bounds> device_bounds;  // another backend vs the CPU
};

void register_case(OpCase c);
const std::vector<OpCase>& all_cases();

struct Metrics {
  double rel_l2 = 0;
  double rel_max = 0;
  double max_abs = 0;
  int64_t nonfinite = 0;  // elements that are NaN/inf in `got` but finite in `ref`
  int64_t count = 0;
};
Metrics measure(const std::vector<double>& got, const std::vector<double>& ref);

// Runs `fn` during static initialization; fn calls register_case.
struct CaseRegistrar {
  explicit CaseRegistrar(void (*fn)()) { fn(); }
};
#define H3_OPS_CASES_CAT2(a, b) a##b
#define H3_OPS_CASES_CAT(a, b) H3_OPS_CASES_CAT2(a, b)
#define H3_OPS_CASES(fn) \
  static const ::h3::test::ops::CaseRegistrar H3_OPS_CASES_CAT(h3_ops_registrar_, __LINE__)(fn)

// Small helpers for case files.
std::string dtype_tag(DType t);   // "f32", "bf16", "f16"
bool large_enabled();             // H3_OPS_LARGE=1
std::vector<double> f64(const Tensor& t);  // CPU tensor values, widened

}  // namespace h3::test::ops
