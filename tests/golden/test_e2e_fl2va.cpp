// End-to-end FL2VA parity against every golden `e2e` run whose meta says workflow fl2va
// (fl2va_first, fl2va_first_last, fl2va_resize): keyframes stretched / cover-cropped with LANCZOS,
// encoded through the seed-42 posterior, noised once and held; every step, the held condition
// rows, the final latents, frames and waveform within TOLERANCES.md (test_e2e_common.h).
#include "test_e2e_common.h"

namespace h3 {
namespace {

// The stored prompt embeddings and draws injected: each DiT call checked in isolation.
TEST(E2eFl2vaGolden, EveryStepWithStoredDraws) {
  H3_GOLDEN_CASES_OR_SKIP(all, "e2e");
  test::e2e::check_workflow(all, "fl2va", /*from_media=*/false);
}

// From the stored input images alone: resize, presentation, conditioner with vision, VAE encode,
// the generator's own draws.
TEST(E2eFl2vaGolden, FullRunFromMedia) {
  H3_GOLDEN_CASES_OR_SKIP(all, "e2e");
  test::e2e::check_workflow(all, "fl2va", /*from_media=*/true);
}

}  // namespace
}  // namespace h3
