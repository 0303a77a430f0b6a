// What a golden folder's cases can be compared against: whether its stored outputs were made by the
// checkpoint it ships (a folder of the same format may hold another model size, or a copy whose
// checkpoint was changed after the outputs were made), and which tensors a case lacks (every tensor
// beyond a test's inputs may be absent in another folder).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/h3_dit/dit_model.h"
#include "support/golden.h"

namespace h3::test {

// Whether the stored outputs that depend on checkpoint component `component` (transformer,
// transformer_ref, text_encoder, vae, audio_vae) were made by the checkpoint in the golden folder:
// the model configuration recorded in generation_info.json (its `config.dit`, `te_text`,
// `te_vision`, `vae`, `avae` sections) against the component's config.json, key by key. False, with
// the first difference in *why, when they disagree (e.g. the DiT trimmed to fewer blocks than the
// outputs were made with); true when the folder records no configuration to compare with (the
// manifest's checkpoint is then taken to be the one the outputs came from).
bool golden_outputs_match_checkpoint(const std::string& component, std::string* why);

// The same for several components at once (an end-to-end run depends on all of them).
bool golden_outputs_match_checkpoint(const std::vector<std::string>& components, std::string* why);

// Bounds for a float32 comparison whose reference carries float32 noise of the size of the table's
// bound. tolerances.json records, under `floor_key`, how far the float32 reference lies from a
// float64 re-run of the same modules (`max_rel_to_ref_max`, `rms_rel`). A second float32
// implementation has noise of its own of about that size, so the two can be up to about twice the
// floor apart however faithful it is: each bound is the table's, or twice the recorded floor where
// that is larger (the audio VAE decoder measures 8.3e-6 against a table bound of 1e-5). `why` says
// which applied; a folder without the record keeps the table's bounds.
struct NoiseFloorBounds {
  double rel_max = 0.0, rel_l2 = 0.0;
  std::string why;
};
NoiseFloorBounds noise_floor_bounds(const std::string& floor_key, double table_rel_max,
                                    double table_rel_l2);

// The names in `names` that `f` lacks, comma separated ("" when it has them all).
std::string missing_tensors(const io::SafetensorsFile& f, const std::vector<std::string>& names);

// The number of references an e2e case stores tensors for: 1 + the largest k of any
// `input_reference_{k}_*` or `normalized_reference_{k}_*` tensor (0 when none), so that a loop over
// references neither stops at a fixed count nor assumes which kind comes first.
int reference_count(const io::SafetensorsFile& f);

// The DiT partition a `dit` case was made with: its meta's `transformer` ("transformer" when the
// manifest does not say).
std::string dit_partition_of(const GoldenCase& c);

// A DiT case's inputs in the reference's argument form: tensors `<prefix>hidden_states`, ... (the
// golden `dit` cases use "in.", the VSA cases none).
dit::DitInputs read_dit_inputs(const io::SafetensorsFile& f, const std::string& prefix = "in.");

// Whether two tensors (any devices) have the same shape, dtype and bytes.
bool same_bytes(const Tensor& a, const Tensor& b);

}  // namespace h3::test

// Skips the test visibly when the stored outputs of the checkpoint components do not come from the
// folder's checkpoint (golden_outputs_match_checkpoint): a comparison with them would not apply.
#define H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP(...)                                                 \
  do {                                                                                       \
    std::string h3_outputs_why;                                                              \
    if (!::h3::test::golden_outputs_match_checkpoint(std::vector<std::string>{__VA_ARGS__},  \
                                                     &h3_outputs_why)) {                     \
      GTEST_SKIP() << "stored outputs do not apply to this checkpoint: " << h3_outputs_why;   \
    }                                                                                        \
  } while (0)
