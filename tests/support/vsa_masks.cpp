// See vsa_masks.h.
#include "support/vsa_masks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace h3::test {

MaskFlips classify_mask_flips(const Tensor& got_in, const Tensor& ref_in, const Tensor& scores_in, double noise) {
  MaskFlips f;
  const Tensor got = got_in.to(Device::cpu()).contiguous();
  const Tensor ref = ref_in.to(Device::cpu()).contiguous();
  const std::vector<float> s = scores_in.to(Device::cpu()).to(DType::kF32).to_f32_vector();
  if (got.numel() != ref.numel() || ref.dim() != 3 || static_cast<int64_t>(s.size()) != ref.numel()) {
    f.entries = ref.numel();
    f.differing = f.unexplained = std::max(got.numel(), ref.numel());
    f.first = "masks " + got.desc() + " and " + ref.desc() + " with scores of " + std::to_string(s.size()) +
              " values cannot be compared";
    return f;
  }
  const int64_t heads = ref.size(0), n = ref.size(1);
  const uint8_t* a = got.data<uint8_t>();
  const uint8_t* b = ref.data<uint8_t>();
  f.entries = ref.numel();
  std::vector<int64_t> added, dropped;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = (h * n + i) * n;
      added.clear();
      dropped.clear();
      for (int64_t j = 0; j < n; ++j) {
        if ((a[row + j] != 0) == (b[row + j] != 0)) continue;
        (a[row + j] ? added : dropped).push_back(j);
      }
      const int64_t diff = static_cast<int64_t>(added.size() + dropped.size());
      if (diff == 0) continue;
      f.differing += diff;
      // The reference kept each dropped tile l over each added tile j: ref[l] >= ref[j]; our
      // choice of j over l is consistent with scores within `noise` of the reference only when
      // ref[l] - ref[j] <= 2 * noise.
      double gap = added.size() == dropped.size() ? 0.0 : std::numeric_limits<double>::infinity();
      for (int64_t j : added)
        for (int64_t l : dropped)
          gap = std::max(gap, static_cast<double>(s[static_cast<size_t>(row + l)]) -
                                  static_cast<double>(s[static_cast<size_t>(row + j)]));
      if (gap <= 2.0 * noise) {
        f.near_ties += diff;
        f.max_gap = std::max(f.max_gap, gap);
      } else {
        f.unexplained += diff;
        if (f.first.empty()) {
          char buf[200];
          std::snprintf(buf, sizeof(buf),
                        "head %lld query tile %lld: %zu tile(s) added, %zu dropped, reference score gap %.3e "
                        "against noise %.3e",
                        static_cast<long long>(h), static_cast<long long>(i), added.size(), dropped.size(), gap,
                        noise);
          f.first = buf;
        }
      }
    }
  }
  return f;
}

std::string describe(const MaskFlips& f, double noise) {
  char buf[300];
  std::snprintf(buf, sizeof(buf),
                "%lld of %lld entries differ: %lld near-tie flip(s) (largest reference score gap %.3e, "
                "allowed 2 x noise %.3e), %lld unexplained",
                static_cast<long long>(f.differing), static_cast<long long>(f.entries),
                static_cast<long long>(f.near_ties), f.max_gap, 2.0 * noise,
                static_cast<long long>(f.unexplained));
  std::string out = buf;
  if (!f.first.empty()) out += "; first: " + f.first;
  return out;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(Device::cpu()).to(DType::kF32).to_f32_vector();
  const std::vector<float> y = b.to(Device::cpu()).to(DType::kF32).to_f32_vector();
  if (x.size() != y.size()) return std::numeric_limits<double>::infinity();
  double m = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
    m = std::max(m, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return m;
}

}  // namespace h3::test
