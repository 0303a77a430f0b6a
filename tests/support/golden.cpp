// Golden-data access for tests (see golden.h): manifest reading, cases by kind, and comparisons
// that print the measured figure next to its bound.
#include "support/golden.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include "core/status.h"

namespace h3::test {

namespace fs = std::filesystem;

std::string golden_dir() {
  const char* env = std::getenv("H3_GOLDEN_DIR");
  if (env && *env) return env;
  return H3_DEFAULT_GOLDEN_DIR;
}

bool golden_required() {
  const char* env = std::getenv("H3_REQUIRE_GOLDEN");
  return env && std::strcmp(env, "1") == 0;
}

const nlohmann::json* vsa_manifest(std::string* why) {
  static nlohmann::json manifest;
  static bool loaded = false, ok = false;
  if (!loaded) {
    loaded = true;
    std::ifstream in(std::filesystem::path(golden_dir()) / "vsa" / "manifest.json");
    if (in) {
      manifest = nlohmann::json::parse(in);
      ok = true;
    }
  }
  if (!ok) *why = "no VSA golden manifest at " + golden_dir() + "/vsa/manifest.json";
  return ok ? &manifest : nullptr;
}

std::string vsa_path(const std::string& rel) { return golden_dir() + "/vsa/" + rel; }

std::shared_ptr<io::SafetensorsFile> GoldenCase::open() const {
  H3_CHECK(path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0,
           ErrorCode::kInvalidArgument, "golden case '", file, "' (kind ", kind,
           ") is not a .safetensors file");
  return io::SafetensorsFile::open(path);
}

const Golden* Golden::get() {
  // Loaded once per process; a broken manifest throws (a test failure naming the file), a
  // missing folder or manifest gives null (the caller skips or fails per H3_REQUIRE_GOLDEN).
  static const std::unique_ptr<Golden> instance = []() -> std::unique_ptr<Golden> {
    const std::string dir = golden_dir();
    const fs::path manifest_path = fs::path(dir) / "manifest.json";
    std::error_code ec;
    if (!fs::is_regular_file(manifest_path, ec)) return nullptr;
    std::ifstream f(manifest_path, std::ios::binary);
    H3_CHECK(f.good(), ErrorCode::kIo, "cannot read ", manifest_path.string());
    auto g = std::make_unique<Golden>();
    g->dir_ = fs::absolute(fs::path(dir), ec).lexically_normal().string();
    if (ec) g->dir_ = dir;
    try {
      g->manifest_ = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorCode::kInvalidFile, manifest_path.string(), ": not valid JSON: ", e.what());
    }
    H3_CHECK(g->manifest_.is_object() && g->manifest_.contains("files") &&
                 g->manifest_["files"].is_array(),
             ErrorCode::kInvalidFile, manifest_path.string(),
             ": expected an object with a 'files' array");
    for (const auto& entry : g->manifest_["files"]) {
      H3_CHECK(entry.is_object() && entry.contains("file") && entry["file"].is_string(),
               ErrorCode::kInvalidFile, manifest_path.string(),
               ": every entry of 'files' needs a string 'file'");
    }
    return g;
  }();
  return instance.get();
}

std::vector<GoldenCase> Golden::cases(const std::string& kind) const {
  std::vector<GoldenCase> out;
  for (const auto& entry : manifest_["files"]) {
    if (!entry.contains("kind") || !entry["kind"].is_string() ||
        entry["kind"].get<std::string>() != kind) {
      continue;
    }
    GoldenCase c;
    c.file = entry["file"].get<std::string>();
    c.path = (fs::path(dir_) / c.file).string();
    c.kind = kind;
    c.entry = entry;
    out.push_back(std::move(c));
  }
  return out;
}

std::string Golden::checkpoint_dir() const {
  H3_CHECK(manifest_.contains("checkpoint") && manifest_["checkpoint"].is_string(),
           ErrorCode::kInvalidFile, dir_, "/manifest.json: no string 'checkpoint' field");
  return (fs::path(dir_) / manifest_["checkpoint"].get<std::string>()).string();
}

// ---- comparisons ------------------------------------------------------------------------------

Metrics compare(const Tensor& got, const Tensor& ref) {
  H3_CHECK(got.numel() == ref.numel(), ErrorCode::kInvalidArgument, "compare: ", got.desc(), " vs ",
           ref.desc(), " have different element counts");
  const std::vector<double> a = got.to_f64_vector();
  const std::vector<double> r = ref.to_f64_vector();
  Metrics m;
  m.count = static_cast<int64_t>(a.size());
  double max_ref = 0, sum_d2 = 0, sum_r2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(r[i])) continue;  // a non-finite reference value carries no magnitude
    if (!std::isfinite(a[i])) {
      ++m.nonfinite;
      continue;
    }
    const double d = std::abs(a[i] - r[i]);
    m.max_abs = std::max(m.max_abs, d);
    max_ref = std::max(max_ref, std::abs(r[i]));
    sum_d2 += d * d;
    sum_r2 += r[i] * r[i];
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  m.rel_max = max_ref > 0 ? m.max_abs / max_ref : (m.max_abs > 0 ? kInf : 0);
  m.rel_l2 = sum_r2 > 0 ? std::sqrt(sum_d2 / sum_r2) : (sum_d2 > 0 ? kInf : 0);
  if (m.nonfinite) {
    // Any NaN/inf where the reference is finite is as wrong as it gets.
    m.max_abs = m.rel_max = m.rel_l2 = kInf;
  }
  return m;
}

std::string format_metrics(const Metrics& m) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "rel_max=%.3e rel_l2=%.3e max_abs=%.3e n=%lld", m.rel_max,
                m.rel_l2, m.max_abs, static_cast<long long>(m.count));
  std::string s = buf;
  if (m.nonfinite) s += " nonfinite=" + std::to_string(m.nonfinite);
  return s;
}

Metrics expect_close(const std::string& name, const Tensor& got, const Tensor& ref,
                     double bound_rel_max, double bound_rel_l2) {
  const Metrics m = compare(got, ref);
  std::printf("[golden] %s: %s (bounds rel_max<=%s rel_l2<=%s)\n", name.c_str(),
              format_metrics(m).c_str(), bound_rel_max >= 0 ? str_cat(bound_rel_max).c_str() : "-",
              bound_rel_l2 >= 0 ? str_cat(bound_rel_l2).c_str() : "-");
  EXPECT_EQ(m.nonfinite, 0) << name << ": non-finite values where the reference is finite";
  if (bound_rel_max >= 0) {
    EXPECT_LE(m.rel_max, bound_rel_max) << name << ": " << format_metrics(m);
  }
  if (bound_rel_l2 >= 0) {
    EXPECT_LE(m.rel_l2, bound_rel_l2) << name << ": " << format_metrics(m);
  }
  return m;
}

Metrics expect_max_abs(const std::string& name, const Tensor& got, const Tensor& ref,
                       double bound) {
  const Metrics m = compare(got, ref);
  std::printf("[golden] %s: max_abs=%.3e (bound %g) %s\n", name.c_str(), m.max_abs, bound,
              format_metrics(m).c_str());
  EXPECT_EQ(m.nonfinite, 0) << name << ": non-finite values where the reference is finite";
  EXPECT_LE(m.max_abs, bound) << name << ": " << format_metrics(m);
  return m;
}

void expect_equal(const std::string& name, const Tensor& got, const Tensor& ref) {
  ASSERT_EQ(got.numel(), ref.numel()) << name << ": " << got.desc() << " vs " << ref.desc();
  const std::vector<double> a = got.to_f64_vector();
  const std::vector<double> r = ref.to_f64_vector();
  int64_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = a[i] == r[i] || (std::isnan(a[i]) && std::isnan(r[i]));
    if (same) continue;
    if (mismatches < 5) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), " [%zu] got %.17g want %.17g;", i, a[i], r[i]);
      first += buf;
    }
    ++mismatches;
  }
  std::printf("[golden] %s: %lld of %zu elements differ (exact)\n", name.c_str(),
              static_cast<long long>(mismatches), a.size());
  EXPECT_EQ(mismatches, 0) << name << ": first mismatches:" << first;
}

int64_t count_bit_mismatches(const Tensor& got, const Tensor& ref, std::string* first) {
  H3_CHECK(got.dtype() == ref.dtype() && got.numel() == ref.numel(), ErrorCode::kInvalidArgument,
           "bit comparison of ", got.desc(), " with ", ref.desc(),
           " needs one dtype and element count");
  const Tensor a = got.to(Device::cpu()).contiguous();
  const Tensor r = ref.to(Device::cpu()).contiguous();
  const size_t es = dtype_size(a.dtype());
  const auto* pa = static_cast<const uint8_t*>(a.raw());
  const auto* pr = static_cast<const uint8_t*>(r.raw());
  int64_t mismatches = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * es, pr + i * es, es) == 0) continue;
    if (first && mismatches < 5) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), " [%lld] got %.17g want %.17g;", static_cast<long long>(i),
                    load_as_double(pa, a.dtype(), static_cast<size_t>(i)),
                    load_as_double(pr, r.dtype(), static_cast<size_t>(i)));
      *first += buf;
    }
    ++mismatches;
  }
  return mismatches;
}

void expect_bits_equal(const std::string& name, const Tensor& got, const Tensor& ref) {
  ASSERT_EQ(got.dtype(), ref.dtype()) << name << ": " << got.desc() << " vs " << ref.desc();
  ASSERT_EQ(got.numel(), ref.numel()) << name << ": " << got.desc() << " vs " << ref.desc();
  std::string first;
  const int64_t mismatches = count_bit_mismatches(got, ref, &first);
  std::printf("[golden] %s: %lld of %lld elements differ in bits\n", name.c_str(),
              static_cast<long long>(mismatches), static_cast<long long>(got.numel()));
  EXPECT_EQ(mismatches, 0) << name << ": first mismatches:" << first;
}

}  // namespace h3::test
