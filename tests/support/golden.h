// Golden-data access for tests: the folder, the manifest, cases by kind, and comparisons that
// print the measured figure next to the bound (TOLERANCES.md: rel_max = max|a-ref|/max|ref|,
// rel_l2 = ||a-ref||_2/||ref||_2).
//
// The folder is $H3_GOLDEN_DIR, else the `shared/golden` folder beside the source tree (compile
// definition H3_DEFAULT_GOLDEN_DIR). When it is missing, tests skip visibly, unless
// H3_REQUIRE_GOLDEN=1 (CI), where a missing folder fails.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace h3::test {

struct GoldenCase {
  std::string file;       // path relative to the golden folder, as in the manifest
  std::string path;       // absolute path
  std::string kind;
  nlohmann::json entry;   // the manifest entry (what, meta, tensors, ...)
  // Opens the case's safetensors file (throws for non-safetensors cases).
  std::shared_ptr<io::SafetensorsFile> open() const;
};

class Golden {
 public:
  // Null when the folder or its manifest.json is missing.
  static const Golden* get();
  const std::string& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_; }
  std::vector<GoldenCase> cases(const std::string& kind) const;
  std::string checkpoint_dir() const;  // absolute path of the manifest's `checkpoint` folder

 private:
  std::string dir_;
  nlohmann::json manifest_;
};

std::string golden_dir();
bool golden_required();  // H3_REQUIRE_GOLDEN=1

// The VSA golden folder ($H3_GOLDEN_DIR/vsa, its own manifest): the parsed manifest, or null with
// the reason in *why when absent; and a path inside the folder.
const nlohmann::json* vsa_manifest(std::string* why);
std::string vsa_path(const std::string& rel);

struct Metrics {
  double max_abs = 0;
  double rel_max = 0;  // max|a-ref| / max|ref|
  double rel_l2 = 0;   // ||a-ref|| / ||ref||
  int64_t count = 0;
  int64_t nonfinite = 0;  // elements where got is NaN/inf and ref is not
};
// Compares element-wise in float64 after widening both (shapes must have equal numel).
Metrics compare(const Tensor& got, const Tensor& ref);
std::string format_metrics(const Metrics& m);

// EXPECTs rel_max <= bound_rel_max and rel_l2 <= bound_rel_l2 (negative bound: not checked), and
// prints "name: rel_max=.. rel_l2=.. max_abs=.. (bounds ..)". Returns the metrics.
Metrics expect_close(const std::string& name, const Tensor& got, const Tensor& ref,
                     double bound_rel_max, double bound_rel_l2);
// EXPECTs max_abs <= bound.
Metrics expect_max_abs(const std::string& name, const Tensor& got, const Tensor& ref, double bound);
// EXPECTs exact equality of values (any dtypes, compared as float64), printing the first mismatches.
void expect_equal(const std::string& name, const Tensor& got, const Tensor& ref);
// Element-wise bit comparison (same dtype and element count; -0 != +0, NaN payloads count):
// returns how many elements differ and, when `first` is given, appends the first few.
int64_t count_bit_mismatches(const Tensor& got, const Tensor& ref, std::string* first = nullptr);
// EXPECTs identical bits (e.g. random draws: "equal bits" in TOLERANCES.md).
void expect_bits_equal(const std::string& name, const Tensor& got, const Tensor& ref);

}  // namespace h3::test

// Fetches the cases of `kind` into `var`; when the folder is missing, fails under
// H3_REQUIRE_GOLDEN=1 and otherwise skips with a message; when the folder has no case of that kind,
// skips with a message naming the kind (a visible skip, never a silent pass).
#define H3_GOLDEN_CASES_OR_SKIP(var, kind)                                                     \
  const ::h3::test::Golden* var##_golden = ::h3::test::Golden::get();                          \
  if (!var##_golden) {                                                                         \
    if (::h3::test::golden_required()) {                                                       \
      FAIL() << "golden folder missing: " << ::h3::test::golden_dir()                          \
             << " (H3_REQUIRE_GOLDEN=1)";                                                       \
    }                                                                                          \
    GTEST_SKIP() << "golden folder not found at " << ::h3::test::golden_dir()                  \
                 << " (set H3_GOLDEN_DIR)";                                                    \
  }                                                                                            \
  const std::vector<::h3::test::GoldenCase> var = var##_golden->cases(kind);                   \
  if (var.empty()) GTEST_SKIP() << "golden folder has no case of kind '" << (kind) << "'";    \
  std::printf("[golden] kind '%s': %zu case(s)\n", std::string(kind).c_str(), var.size())

// Fetches the VSA manifest into `var`. The vsa/ subfolder is an optional part of a golden folder
// (another folder of the same format may lack it): without it the test skips with the reason; it
// fails only under H3_REQUIRE_GOLDEN=1 when the golden folder itself is missing.
#define H3_VSA_MANIFEST_OR_SKIP(var)                                                    \
  std::string var##_why;                                                                \
  const nlohmann::json* var = ::h3::test::vsa_manifest(&var##_why);                     \
  if (!var) {                                                                           \
    if (::h3::test::golden_required() && !::h3::test::Golden::get()) FAIL() << var##_why; \
    GTEST_SKIP() << var##_why;                                                          \
  }

// Fetches the golden folder into `var` (for tests that need its checkpoint, not its cases): fails
// under H3_REQUIRE_GOLDEN=1 when it is missing, otherwise skips with a message.
#define H3_GOLDEN_FOLDER_OR_SKIP(var)                                                          \
  const ::h3::test::Golden* var = ::h3::test::Golden::get();                                  \
  if (!var) {                                                                                  \
    if (::h3::test::golden_required()) {                                                       \
      FAIL() << "golden folder missing: " << ::h3::test::golden_dir() << " (H3_REQUIRE_GOLDEN=1)"; \
    }                                                                                          \
    GTEST_SKIP() << "golden folder not found at " << ::h3::test::golden_dir() << " (set H3_GOLDEN_DIR)"; \
  }
