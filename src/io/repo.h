// The MiniMax-H3 repository on disk: a diffusers "modular" pipeline folder.
//
// Layout (h3_dit_spec.md §1.1): the root holds `modular_model_index.json` (or a plain
// `model_index.json`) whose component entries are `[library, class, {type_hint?,
// pretrained_model_name_or_path, subfolder, variant, revision}]`; every other top-level key is
// pipeline configuration (`_class_name`, `canvas_short_edge`, ...) and is kept as is. Each
// component lives in its own folder with its config (`config.json`, `scheduler_config.json`,
// `processor_config.json` or `tokenizer.json`, by kind) and, for the models, one weight checkpoint:
// a single `<stem>.safetensors` or shards listed by `<stem>.safetensors.index.json`.
//
// The repository is opened from a local folder, so component folders are always resolved as
// `<root>/<subfolder>`: `pretrained_model_name_or_path` is a hub id or a path relative to the
// writer's working directory and means nothing here; it is kept for display only.
//
// Opening validates the structure (index, folders, config files, required config fields, weight
// files present) but does not open the weights: `Repository::checkpoint()` does that, so
// `h3 info` can report a corrupt shard per component while the rest is still listed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace h3::io {

// What a component is, from its class name in the index.
enum class ComponentKind {
  kTransformer,  // MiniMaxH3Transformer3DModel (transformer, transformer_ref)
  kTextEncoder,  // Qwen3VLForConditionalGeneration
  kTokenizer,    // Qwen2TokenizerFast / Qwen2Tokenizer
  kProcessor,    // Qwen3VLProcessor
  kVideoVae,     // AutoencoderKLMiniMaxH3
  kAudioVae,     // AutoencoderKLMiniMaxH3Audio
  kScheduler,    // MiniMaxH3Scheduler (scheduler, audio_scheduler)
  kUnknown,      // anything else: listed, its folder checked, otherwise left alone
};
const char* component_kind_name(ComponentKind kind);
ComponentKind component_kind_from_class(const std::string& class_name);
// True for the kinds that carry a weight checkpoint.
bool component_has_weights(ComponentKind kind);

struct Component {
  std::string name;        // key in the index: "transformer", "text_encoder", ...
  std::string library;     // "diffusers" / "transformers"
  std::string class_name;  // "MiniMaxH3Transformer3DModel", ...
  ComponentKind kind = ComponentKind::kUnknown;
  std::string subfolder;    // as in the index (the name when the entry has none)
  std::string pretrained;   // pretrained_model_name_or_path as written (display only)
  std::string variant;      // empty when null
  nlohmann::json spec;      // the entry's third element, verbatim
  std::string folder;       // <root>/<subfolder>
  std::string config_file;  // the config read (empty for kinds without one)
  nlohmann::json config;    // its parsed content
  // The checkpoint path handed to Checkpoint::open: `<stem>.safetensors` or
  // `<stem>.safetensors.index.json`; empty for components without weights.
  std::string weights;
  // Weight files named by `weights` (the single file, or every shard the index lists).
  std::vector<std::string> weight_files;
};

class Repository {
 public:
  // Opens and validates the repository at `root`. Throws h3::Error (kNotFound for a missing
  // index/folder/file, kInvalidFile for bad JSON or missing/invalid fields) naming the file and,
  // where it applies, the field.
  static Repository open(const std::string& root);

  const std::string& root() const { return root_; }
  const std::string& index_file() const { return index_file_; }  // absolute path
  const nlohmann::json& index() const { return index_; }
  // Every top-level key of the index that is not a component entry (pipeline class names and
  // configuration such as `canvas_short_edge`), verbatim.
  const nlohmann::json& pipeline_config() const { return pipeline_config_; }
  const std::string& pipeline_class() const { return pipeline_class_; }
  // Sorted by name (the index is read as a JSON object, whose key order carries no meaning).
  const std::vector<Component>& components() const { return components_; }

  bool has(const std::string& name) const;
  const Component& component(const std::string& name) const;  // throws kNotFound naming it
  // Opens (and fully validates the headers of) a component's checkpoint. Throws kNotFound when
  // the component has no weights, otherwise whatever Checkpoint::open throws, with the
  // component's name as context.
  Checkpoint checkpoint(const std::string& name) const;

 private:
  std::string root_;
  std::string index_file_;
  nlohmann::json index_;
  nlohmann::json pipeline_config_ = nlohmann::json::object();
  std::string pipeline_class_;
  std::vector<Component> components_;
};

// The components the MiniMax-H3 pipeline cannot run without (h3_components_spec.md §4.1);
// `transformer_ref` is optional (only Ref2VA needs it).
const std::vector<std::string>& required_component_names();

// Reads and parses a JSON file; throws kNotFound / kInvalidFile naming `path`.
nlohmann::json read_json_file(const std::string& path);

// Helpers for reading typed config fields with errors that name the file and the field (a dotted
// path such as "text_config.hidden_size"). `file` is only used in messages.
const nlohmann::json& config_field(const nlohmann::json& config, const std::string& field,
                                   const std::string& file);
int64_t config_int(const nlohmann::json& config, const std::string& field, const std::string& file);
double config_number(const nlohmann::json& config, const std::string& field,
                     const std::string& file);
std::vector<int64_t> config_int_list(const nlohmann::json& config, const std::string& field,
                                     const std::string& file);
// As above but returns `fallback` when the field is absent or null.
int64_t config_int_or(const nlohmann::json& config, const std::string& field,
                      const std::string& file, int64_t fallback);
bool config_bool_or(const nlohmann::json& config, const std::string& field, const std::string& file,
                    bool fallback);
// The largest size a component config may give a width, rate, count or kernel (2^20): far above
// any model's, and small enough that the products the configs form of a few of them stay in int64.
inline constexpr int64_t kMaxConfigSize = int64_t{1} << 20;
// Bounded forms for component configs whose absent or null fields take the class's default:
// an integer in [min_value, max_value]; a positive finite number; a non-empty list of integers in
// [min_value, max_value] (the `_value` form reads a list nested inside a field); a list of finite
// numbers as float32 (torch.tensor(list) is float32: the values the reference multiplies with).
int64_t config_int_in_or(const nlohmann::json& config, const std::string& field,
                         const std::string& file, int64_t fallback, int64_t min_value,
                         int64_t max_value);
double config_positive_or(const nlohmann::json& config, const std::string& field,
                          const std::string& file, double fallback);
std::vector<int64_t> config_int_list_in(const nlohmann::json& value, const std::string& field,
                                        const std::string& file, int64_t min_value,
                                        int64_t max_value);
std::vector<int64_t> config_int_list_in_or(const nlohmann::json& config, const std::string& field,
                                           const std::string& file, std::vector<int64_t> fallback,
                                           int64_t min_value, int64_t max_value);
std::vector<float> config_float_list_or(const nlohmann::json& config, const std::string& field,
                                        const std::string& file, std::vector<float> fallback);

}  // namespace h3::io
