// End-to-end Ref2VA parity against every golden `e2e` run whose meta says workflow ref2va
// (ref2va: image + 32 kHz audio; ref2va_media: a 30 fps video with a 44.1 kHz mono soundtrack,
// 16 kHz audio, an image to resize) on the transformer_ref/ partition: references in order, visual
// ones noised once and held, reference audio clean; every step, the held rows, the final latents,
// frames and waveform within TOLERANCES.md (test_e2e_common.h).
#include "test_e2e_common.h"

namespace h3 {
namespace {

// The stored prompt embeddings and draws injected: each DiT call checked in isolation.
TEST(E2eRef2vaGolden, EveryStepWithStoredDraws) {
  H3_GOLDEN_CASES_OR_SKIP(all, "e2e");
  test::e2e::check_workflow(all, "ref2va", /*from_media=*/false);
}

// From the stored input media alone: frame-rate resample, resizes, audio resampling, presentation,
// conditioner with vision, VAE encodes, the generator's own draws.
TEST(E2eRef2vaGolden, FullRunFromMedia) {
  H3_GOLDEN_CASES_OR_SKIP(all, "e2e");
  test::e2e::check_workflow(all, "ref2va", /*from_media=*/true);
}

}  // namespace
}  // namespace h3
