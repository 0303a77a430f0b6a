// Comparing VSA-H3 block masks when a top-k selection may sit on a near tie. A mask is a top-k of
// coarse scores; two implementations whose scores differ by float noise choose differently where
// two tiles' scores are closer than that noise (vsa/README.md: the shipped cases keep every margin
// far above it; a folder of the same format need not). So a mask comparison counts the flips, and
// a flip is accepted only when the noise explains it: with every score within `noise` of the
// reference, choosing tile j over tile l means ref[l] - ref[j] <= 2 * noise. Anything else (a
// wider gap, a different count of selected tiles, a flip in a row without a selection) is a real
// difference. Outputs are then compared with the reference's own mask (ops::VsaOptions::block_mask),
// so a legitimate flip cannot move them.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace h3::test {

struct MaskFlips {
  int64_t entries = 0;      // mask entries compared
  int64_t differing = 0;    // entries that differ
  int64_t near_ties = 0;    // differing entries explained by score noise
  int64_t unexplained = 0;  // differing entries the noise cannot explain
  double max_gap = 0.0;     // largest reference-score gap behind an accepted flip
  std::string first;        // the first unexplained row, described
  bool ok() const { return unexplained == 0; }
};

// got, ref: u8 [H, n, n] masks; ref_scores: f32 [H, n, n], the reference's coarse scores; noise:
// the largest |our score - reference score| measured on the same case (0 for a mask computed from
// the reference scores themselves, where only an exact tie may flip).
MaskFlips classify_mask_flips(const Tensor& got, const Tensor& ref, const Tensor& ref_scores, double noise);

// One line: "N of M entries differ: K near-tie flip(s) (reference gap <= ..., noise ...), U unexplained".
std::string describe(const MaskFlips& f, double noise);

// max |a - b| over two score tensors of equal size (infinity when the sizes differ).
double max_abs_difference(const Tensor& a, const Tensor& b);

}  // namespace h3::test
