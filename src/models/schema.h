// Tensor schemas: for each weight-bearing component, the list of tensors (name, shape, dtype) that
// its config.json implies in the released layout, and the check of a checkpoint against it.
//
// One builder per component family, each in its model's folder:
//   dit_schema        models/h3_dit/dit_schema.cpp           h3_dit_spec.md §1.2-§1.7
//   qwen3_vl_schema   models/qwen3_vl/qwen3_vl_schema.cpp    h3_components_spec.md §1.1-§1.7
//   video_vae_schema  models/video_vae/video_vae_schema.cpp  h3_components_spec.md §2.1-§2.6
//   audio_vae_schema  models/audio_vae/audio_vae_schema.cpp  h3_components_spec.md §3.1-§3.4
// Names and nesting were confirmed against the golden tiny-h3 checkpoint headers.
//
// The check reports missing, unexpected and misshapen tensors as errors. A dtype that differs from
// the release is a warning when both are floating point (the loaders convert; the release itself
// mixes bf16 and fp32 in the DiT) and an error otherwise.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/repo.h"
#include "io/safetensors.h"

namespace h3::models {

struct TensorSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  // False for tensors that the release stores but the engine skips (the text encoder's layers
  // after the tap, its final norm and LM head).
  bool used = true;
  // True for tensors that a variant may add and the base release lacks (FastH3's VSA gates):
  // neither their presence nor their absence is an error.
  bool optional = false;
  int64_t numel() const { return shape_numel(shape); }
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
};

struct Schema {
  std::string family;               // "h3_dit", "qwen3_vl", "video_vae", "audio_vae"
  std::vector<TensorSpec> tensors;  // in the release's module order
  const TensorSpec* find(const std::string& name) const;
  // Totals over non-optional tensors; `used_only` counts only what the engine loads.
  int64_t param_count(bool used_only = false) const;
  uint64_t byte_count(bool used_only = false) const;
};

// Builders: `file` names the config in error messages. They throw kInvalidFile naming the file
// and field when a field is missing or impossible (e.g. a rotary width wider than a head).
Schema dit_schema(const nlohmann::json& config, const std::string& file = "config.json");
// The layer whose output H3 reads (hidden_states[50]): layers [0, kQwen3VlTapLayers) are used.
inline constexpr int64_t kQwen3VlTapLayers = 50;
Schema qwen3_vl_schema(const nlohmann::json& config, const std::string& file = "config.json");
Schema video_vae_schema(const nlohmann::json& config, const std::string& file = "config.json");
Schema audio_vae_schema(const nlohmann::json& config, const std::string& file = "config.json");

// The schema of a repository component; nullopt for components without weights.
std::optional<Schema> schema_for(const io::Component& component);

struct TensorMismatch {
  std::string name;
  Shape expected_shape;
  Shape actual_shape;
  DType expected_dtype = DType::kF32;
  DType actual_dtype = DType::kF32;
};

struct SchemaCheck {
  std::vector<std::string> missing;            // in the schema, not in the checkpoint
  std::vector<std::string> unexpected;         // in the checkpoint, not in the schema
  std::vector<TensorMismatch> misshapen;       // shape differs
  std::vector<TensorMismatch> bad_dtype;       // dtype differs and is not a float->float change
  std::vector<TensorMismatch> dtype_warnings;  // float dtype differs from the release's
  int64_t matched = 0;                         // tensors present with the expected shape
  int64_t skipped = 0;                         // matched tensors the engine does not load
  int64_t fp8_weights = 0;  // matched weights stored in FP8 with their scales
  int64_t fp8_scales = 0;   // scales beside FP8 weights (models/fp8_checkpoint.h), not unexpected
  bool ok() const {
    return missing.empty() && unexpected.empty() && misshapen.empty() && bad_dtype.empty();
  }
  // One line per problem ("missing tensor 'x' [3, 4] bf16", ...), errors first.
  std::vector<std::string> errors() const;
  std::vector<std::string> warnings() const;
};

SchemaCheck check_schema(const Schema& schema, const std::vector<io::TensorInfo>& tensors);
SchemaCheck check_schema(const Schema& schema, const io::Checkpoint& checkpoint);

// ---- whole-repository inspection (what `h3 info` prints) ---------------------------------------

struct DTypeTotal {
  DType dtype = DType::kF32;
  int64_t params = 0;
  uint64_t bytes = 0;
};

struct ComponentReport {
  std::string name;
  std::string class_name;
  std::string kind;
  std::string folder;
  std::string config_file;
  std::string weights;      // checkpoint path (empty without weights)
  std::string summary;      // a few facts for components without weights (vocab, shift)
  int64_t files = 0;        // weight files opened and validated
  uint64_t file_bytes = 0;  // their total size on disk (logical)
  int64_t tensors = 0;
  int64_t params = 0;
  uint64_t bytes = 0;  // tensor data bytes
  std::vector<DTypeTotal> by_dtype;
  int64_t schema_tensors = 0;  // tensors the schema expects (non-optional)
  int64_t used_params = 0;     // parameters the engine loads (schema `used`)
  std::optional<SchemaCheck> check;
  std::vector<std::string> errors;  // anything that makes the component unusable
  std::vector<std::string> warnings;
  bool ok() const { return errors.empty(); }
};

struct RepositoryReport {
  std::string root;
  std::string index_file;
  std::string pipeline_class;
  nlohmann::json pipeline_config;
  std::vector<ComponentReport> components;
  std::vector<std::string> errors;  // repository-level (cannot open the index, ...)
  bool ok() const;
  int64_t total_params() const;
  uint64_t total_bytes() const;
  nlohmann::json to_json() const;
};

// Opens the repository and checks every component: headers of every weight file, the schema.
// Never throws for a problem of the repository itself: it is recorded in the report (an error
// opening the repository leaves `components` empty and one entry in `errors`).
RepositoryReport inspect_repository(const std::string& root);

}  // namespace h3::models
