// The flags `h3 generate` and `h3 bench e2e` share: the request, the engine's options and the
// preset overrides. One parser, so that a benchmark runs exactly what a user runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "pipeline/presets.h"

namespace h3::cli {

struct GenerateFlags {
  std::string model_dir;
  std::string out;
  std::string receipt_path;
  std::string latents_path;
  std::string device_text = "cpu";
  std::string first_image_path, last_image_path;
  std::vector<std::string> ref_specs;
  std::vector<h3::dit::LoraSpec> lora_specs;
  bool lora_allow_unmatched = false;
  pipeline::GenerateRequest request;
  pipeline::EngineOptions engine;
  pipeline::SettingOverrides settings;
  bool have_prompt = false;
  bool have_frames = false;
  bool force_progress = false;
  bool stream = true;
  int64_t repeat = 1;
};

// The help text of the shared flags (one line per flag, indented like the commands' own).
const char* generate_flags_help();

// Parses `args` into `flags`. A flag it does not know goes to `extra` when given (the caller's
// own flags; it returns the number of values that flag takes, or -1 if it does not know it
// either); otherwise an unknown flag is refused naming it and `help_hint`.
using ExtraFlag = int (*)(const std::string& flag, const std::string* value, void* ctx);
void parse_generate_flags(const std::vector<std::string>& args, GenerateFlags& flags,
                          const std::string& help_hint, ExtraFlag extra = nullptr,
                          void* ctx = nullptr);

// After parsing: loads media (unreadable files fail before any weight), resolves the workflow,
// FL2VA's 8 s default, the preset against the repository (steps, attention, VSA) and the plan
// request. Returns the resolved settings (for the receipt).
pipeline::ResolvedSettings finish_generate_flags(GenerateFlags& flags);

// "name.mp4" -> "name-seed7.mp4" when `tag` (several generations share one name).
std::string with_seed(const std::string& path, uint64_t seed, bool tag);
// Refuses an output path whose folder does not exist, naming the flag.
void check_out_folder(const std::string& flag, const std::string& path);

}  // namespace h3::cli
