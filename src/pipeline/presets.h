// Generation presets (h3_components_spec.md §4.2; h3_dit_spec.md §3.5, §5.6) and how a checkpoint
// declares which one it is:
//   dense   the base model: 50 sigma points (49 forwards), dense attention;
//   fasth3  the few-step DMD students: 5 sigma points (4 forwards), VSA-H3 at sparsity 0.9 with
//           64-token tiles (the geometry they were trained with).
// A transformer whose main blocks carry the trained VSA gates (`attn.to_gate_compress`) is a FastH3
// student and runs as one unless flags say otherwise. Later releases also ship
// `fastvideo_inference.json` (at the repository root or in the transformer's folder) whose
// `dmd_denoising_steps` list fixes the forwards (N forwards = N + 1 sigma points) and may name the
// sparsity the student was distilled at (`vsa_sparsity`; the 8-step students run at 0.8); its
// values win over the preset's. Flags win over both, and every value records where it came from
// so that a receipt can say it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "io/repo.h"
#include "models/h3_dit/dit_model.h"

namespace h3::pipeline {

// Values a caller sets explicitly (flags, an API request); unset ones come from the preset.
struct SettingOverrides {
  std::optional<std::string> preset;  // "dense" or "fasth3"
  std::optional<int64_t> steps;       // sigma-grid points
  std::optional<dit::DitAttentionBackend> attention;
  std::optional<double> vsa_sparsity;
  std::optional<int> vsa_tile_size;
  // Not a flag: the file of an applied LoRA adapter that gives every block its FastH3 gate (a
  // student's adapter, dit_lora.h). A base checkpoint with it then declares the fasth3 preset.
  std::optional<std::string> adapter_gates;
};

struct ResolvedSettings {
  std::string preset;  // the preset in force
  int64_t steps = 50;
  dit::DitAttentionBackend attention = dit::DitAttentionBackend::kDense;
  double vsa_sparsity = -1.0;  // < 0: the model's default
  int vsa_tile_size = 64;
  // Setting name ("preset", "steps", "attention", "vsa_sparsity", "vsa_tile_size") -> where its
  // value came from: "flag", "checkpoint gates", "fastvideo_inference.json", "preset fasth3", ...
  std::map<std::string, std::string> source;
  // "preset=fasth3 (checkpoint gates), steps=5 (preset fasth3), ..." for logs and receipts.
  std::string describe() const;
};

// What the repository declares for the transformer a workflow uses (transformer_ref/ for ref2va):
// "fasth3" with its source, or "dense". Reads headers and small JSON files only. A malformed
// fastvideo_inference.json is refused naming the file and field.
struct DeclaredPreset {
  std::string name = "dense";
  std::string source = "default";
  std::optional<int64_t> steps;         // from dmd_denoising_steps
  std::optional<double> vsa_sparsity;   // from vsa_sparsity
};
DeclaredPreset declared_preset(const io::Repository& repo, const std::string& workflow);

// Throws kInvalidArgument for an unknown preset name.
ResolvedSettings resolve_settings(const io::Repository& repo, const std::string& workflow,
                                  const SettingOverrides& overrides);

}  // namespace h3::pipeline
