#include "io/repo.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/status.h"

namespace h3::io {

namespace fs = std::filesystem;

const char* component_kind_name(ComponentKind kind) {
  switch (kind) {
    case ComponentKind::kTransformer:
      return "transformer";
    case ComponentKind::kTextEncoder:
      return "text_encoder";
    case ComponentKind::kTokenizer:
      return "tokenizer";
    case ComponentKind::kProcessor:
      return "processor";
    case ComponentKind::kVideoVae:
      return "video_vae";
    case ComponentKind::kAudioVae:
      return "audio_vae";
    case ComponentKind::kScheduler:
      return "scheduler";
    case ComponentKind::kUnknown:
      return "unknown";
  }
  return "unknown";
}

ComponentKind component_kind_from_class(const std::string& c) {
  if (c == "MiniMaxH3Transformer3DModel") return ComponentKind::kTransformer;
  if (c == "Qwen3VLForConditionalGeneration" || c == "Qwen3VLModel") {
    return ComponentKind::kTextEncoder;
  }
  if (c == "Qwen2TokenizerFast" || c == "Qwen2Tokenizer" || c == "AutoTokenizer") {
    return ComponentKind::kTokenizer;
  }
  if (c == "Qwen3VLProcessor" || c == "AutoProcessor") return ComponentKind::kProcessor;
  if (c == "AutoencoderKLMiniMaxH3") return ComponentKind::kVideoVae;
  if (c == "AutoencoderKLMiniMaxH3Audio" || c == "MiniMaxH3AudioVAE")
    return ComponentKind::kAudioVae;
  if (c == "MiniMaxH3Scheduler") return ComponentKind::kScheduler;
  return ComponentKind::kUnknown;
}

bool component_has_weights(ComponentKind kind) {
  return kind == ComponentKind::kTransformer || kind == ComponentKind::kTextEncoder ||
         kind == ComponentKind::kVideoVae || kind == ComponentKind::kAudioVae;
}

const std::vector<std::string>& required_component_names() {
  static const std::vector<std::string> names = {"text_encoder", "tokenizer",      "processor",
                                                 "vae",          "audio_vae",      "transformer",
                                                 "scheduler",    "audio_scheduler"};
  return names;
}

// ---- JSON and config fields --------------------------------------------------------------------

nlohmann::json read_json_file(const std::string& path) {
  std::error_code ec;
  H3_CHECK(fs::is_regular_file(path, ec), ErrorCode::kNotFound, path, ": file not found");
  std::ifstream in(path, std::ios::binary);
  H3_CHECK(in.good(), ErrorCode::kIo, path, ": cannot open for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  H3_CHECK(!in.bad(), ErrorCode::kIo, path, ": read error");
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidFile, path, ": invalid JSON (", e.what(), ")");
  }
}

namespace {

// Walks a dotted path; returns null when any part is missing.
const nlohmann::json* find_field(const nlohmann::json& config, const std::string& field) {
  const nlohmann::json* cur = &config;
  size_t pos = 0;
  while (pos <= field.size()) {
    const size_t dot = field.find('.', pos);
    const std::string part =
        field.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

int64_t as_int(const nlohmann::json& v, const std::string& field, const std::string& file) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  fail(ErrorCode::kInvalidFile, file, ": field '", field, "' must be an integer, got ", v.dump());
}

}  // namespace

const nlohmann::json& config_field(const nlohmann::json& config, const std::string& field,
                                   const std::string& file) {
  const nlohmann::json* v = find_field(config, field);
  H3_CHECK(v != nullptr && !v->is_null(), ErrorCode::kInvalidFile, file,
           ": missing required field '", field, "'");
  return *v;
}

int64_t config_int(const nlohmann::json& config, const std::string& field,
                   const std::string& file) {
  return as_int(config_field(config, field, file), field, file);
}

double config_number(const nlohmann::json& config, const std::string& field,
                     const std::string& file) {
  const nlohmann::json& v = config_field(config, field, file);
  H3_CHECK(v.is_number(), ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be a number, got ", v.dump());
  return v.get<double>();
}

std::vector<int64_t> config_int_list(const nlohmann::json& config, const std::string& field,
                                     const std::string& file) {
  const nlohmann::json& v = config_field(config, field, file);
  H3_CHECK(v.is_array(), ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be a list of integers, got ", v.dump());
  std::vector<int64_t> out;
  for (const auto& e : v) out.push_back(as_int(e, field, file));
  return out;
}

int64_t config_int_or(const nlohmann::json& config, const std::string& field,
                      const std::string& file, int64_t fallback) {
  const nlohmann::json* v = find_field(config, field);
  if (v == nullptr || v->is_null()) return fallback;
  return as_int(*v, field, file);
}

bool config_bool_or(const nlohmann::json& config, const std::string& field, const std::string& file,
                    bool fallback) {
  const nlohmann::json* v = find_field(config, field);
  if (v == nullptr || v->is_null()) return fallback;
  H3_CHECK(v->is_boolean(), ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be true or false, got ", v->dump());
  return v->get<bool>();
}

int64_t config_int_in_or(const nlohmann::json& config, const std::string& field,
                         const std::string& file, int64_t fallback, int64_t min_value,
                         int64_t max_value) {
  const nlohmann::json* v = find_field(config, field);
  if (v == nullptr || v->is_null()) return fallback;
  const int64_t x = as_int(*v, field, file);
  H3_CHECK(x >= min_value && x <= max_value, ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be an integer in [", min_value, ", ", max_value, "], got ", x);
  return x;
}

double config_positive_or(const nlohmann::json& config, const std::string& field,
                          const std::string& file, double fallback) {
  const nlohmann::json* v = find_field(config, field);
  if (v == nullptr || v->is_null()) return fallback;
  H3_CHECK(v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() > 0,
           ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be a positive finite number, got ", v->dump());
  return v->get<double>();
}

std::vector<int64_t> config_int_list_in(const nlohmann::json& value, const std::string& field,
                                        const std::string& file, int64_t min_value,
                                        int64_t max_value) {
  H3_CHECK(value.is_array() && !value.empty(), ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be a non-empty list of integers, got ", value.dump());
  std::vector<int64_t> out;
  for (const auto& e : value) {
    const int64_t x = as_int(e, field, file);
    H3_CHECK(x >= min_value && x <= max_value, ErrorCode::kInvalidFile, file, ": field '", field,
             "' must hold integers in [", min_value, ", ", max_value, "], got ", value.dump());
    out.push_back(x);
  }
  return out;
}

std::vector<int64_t> config_int_list_in_or(const nlohmann::json& config, const std::string& field,
                                           const std::string& file, std::vector<int64_t> fallback,
                                           int64_t min_value, int64_t max_value) {
  const nlohmann::json* v = find_field(config, field);
  if (v == nullptr || v->is_null()) return fallback;
  return config_int_list_in(*v, field, file, min_value, max_value);
}

std::vector<float> config_float_list_or(const nlohmann::json& config, const std::string& field,
                                        const std::string& file, std::vector<float> fallback) {
  const nlohmann::json* v = find_field(config, field);
  if (v == nullptr || v->is_null()) return fallback;
  H3_CHECK(v->is_array(), ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be a list of numbers or null, got ", v->dump());
  std::vector<float> out;
  for (const auto& e : *v) {
    H3_CHECK(e.is_number() && std::isfinite(e.get<double>()), ErrorCode::kInvalidFile, file,
             ": field '", field, "' must hold finite numbers");
    out.push_back(static_cast<float>(e.get<double>()));
  }
  return out;
}

// ---- per-kind validation -----------------------------------------------------------------------

namespace {

void require_ints(const nlohmann::json& c, const std::string& file,
                  const std::vector<std::string>& fields) {
  for (const auto& f : fields) {
    const int64_t v = config_int(c, f, file);
    H3_CHECK(v >= 0, ErrorCode::kInvalidFile, file, ": field '", f, "' must be >= 0, got ", v);
  }
}

void require_lists(const nlohmann::json& c, const std::string& file,
                   const std::vector<std::string>& fields) {
  for (const auto& f : fields) (void)config_int_list(c, f, file);
}

void require_numbers(const nlohmann::json& c, const std::string& file,
                     const std::vector<std::string>& fields) {
  for (const auto& f : fields) (void)config_number(c, f, file);
}

void require_float_list(const nlohmann::json& c, const std::string& field, const std::string& file,
                        size_t expected) {
  const nlohmann::json& v = config_field(c, field, file);
  H3_CHECK(v.is_array() && v.size() == expected, ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be a list of ", expected, " numbers");
  for (const auto& e : v) {
    H3_CHECK(e.is_number(), ErrorCode::kInvalidFile, file, ": field '", field,
             "' must hold numbers, got ", e.dump());
  }
}

// Fields that fix tensor shapes or that the engine cannot guess (specs cited per kind).
void validate_config(const Component& c, const std::string& file) {
  const nlohmann::json& j = c.config;
  H3_CHECK(j.is_object(), ErrorCode::kInvalidFile, file, ": expected a JSON object");
  switch (c.kind) {
    case ComponentKind::kTransformer:  // h3_dit_spec.md §1.2
      require_ints(j, file,
                   {"num_attention_heads", "attention_head_dim", "hidden_size", "num_layers",
                    "num_refiner_layers", "ffn_dim", "in_channels", "audio_in_channels", "text_dim",
                    "freq_dim", "time_embed_hidden_dim", "time_embed_dim", "rope_freq_dim"});
      require_numbers(j, file, {"rope_theta", "norm_eps", "qk_norm_eps", "final_norm_eps"});
      H3_CHECK(config_int_list(j, "patch_size", file).size() == 3, ErrorCode::kInvalidFile, file,
               ": field 'patch_size' must have 3 entries (t, h, w)");
      break;
    case ComponentKind::kTextEncoder:  // h3_components_spec.md §1.2
      require_ints(
          j, file,
          {"text_config.vocab_size", "text_config.hidden_size", "text_config.intermediate_size",
           "text_config.num_hidden_layers", "text_config.num_attention_heads",
           "text_config.num_key_value_heads", "text_config.head_dim", "vision_config.depth",
           "vision_config.hidden_size", "vision_config.intermediate_size",
           "vision_config.num_heads", "vision_config.in_channels", "vision_config.patch_size",
           "vision_config.spatial_merge_size", "vision_config.temporal_patch_size",
           "vision_config.out_hidden_size", "vision_config.num_position_embeddings"});
      require_lists(j, file, {"vision_config.deepstack_visual_indexes"});
      require_numbers(j, file, {"text_config.rms_norm_eps"});
      break;
    case ComponentKind::kVideoVae: {  // h3_components_spec.md §2.1
      require_ints(
          j, file,
          {"in_channels", "out_channels", "latent_channels", "layers_per_block",
           "decoder_num_layers", "decoder_num_attention_heads", "decoder_attention_head_dim",
           "decoder_num_register_tokens", "decoder_ffn_mult"});
      const auto boc = config_int_list(j, "block_out_channels", file);
      const auto sdf = config_int_list(j, "spatial_downsample_factors", file);
      const auto tdf = config_int_list(j, "temporal_downsample_factors", file);
      H3_CHECK(!boc.empty() && sdf.size() == boc.size() && tdf.size() == boc.size(),
               ErrorCode::kInvalidFile, file,
               ": 'block_out_channels', 'spatial_downsample_factors' and "
               "'temporal_downsample_factors' must be non-empty lists of equal length");
      const auto latent = static_cast<size_t>(config_int(j, "latent_channels", file));
      // The DiT works on normalized latents; without the release's statistics decode is wrong.
      require_float_list(j, "latents_mean", file, latent);
      require_float_list(j, "latents_std", file, latent);
      break;
    }
    case ComponentKind::kAudioVae: {  // h3_components_spec.md §3.1
      require_ints(j, file,
                   {"encoder_dim", "latent_dim", "latent_channels", "num_attention_heads",
                    "decoder_dim", "sampling_rate"});
      require_lists(
          j, file,
          {"encoder_rates", "decoder_rates", "decoder_kernel_sizes", "resblock_kernel_sizes"});
      const auto rates = config_int_list(j, "decoder_rates", file);
      const auto kernels = config_int_list(j, "decoder_kernel_sizes", file);
      H3_CHECK(rates.size() == kernels.size(), ErrorCode::kInvalidFile, file,
               ": 'decoder_rates' and 'decoder_kernel_sizes' must have equal length");
      const nlohmann::json& dil = config_field(j, "resblock_dilation_sizes", file);
      H3_CHECK(
          dil.is_array() && dil.size() == config_int_list(j, "resblock_kernel_sizes", file).size(),
          ErrorCode::kInvalidFile, file,
          ": 'resblock_dilation_sizes' must hold one list per resblock kernel size");
      const auto latent = static_cast<size_t>(config_int(j, "latent_channels", file));
      for (const char* f : {"latents_mean", "latents_std"}) {
        const nlohmann::json* v = find_field(j, f);
        if (v != nullptr && !v->is_null()) require_float_list(j, f, file, latent);
      }
      break;
    }
    case ComponentKind::kScheduler: {  // h3_dit_spec.md §1.1: shifts are fixed per modality
      const double shift = config_number(j, "shift", file);
      const double want = c.name == "audio_scheduler" ? 3.0 : c.name == "scheduler" ? 12.0 : shift;
      H3_CHECK(shift == want, ErrorCode::kInvalidFile, file, ": field 'shift' of ", c.name,
               " must be ", want, " (the pipeline's fixed value), got ", shift);
      break;
    }
    case ComponentKind::kTokenizer: {
      const nlohmann::json& model = config_field(j, "model", file);
      H3_CHECK(model.is_object(), ErrorCode::kInvalidFile, file,
               ": field 'model' must be an object");
      const nlohmann::json& vocab = config_field(j, "model.vocab", file);
      H3_CHECK(vocab.is_object(), ErrorCode::kInvalidFile, file,
               ": field 'model.vocab' must be an object");
      H3_CHECK(config_field(j, "model.merges", file).is_array(), ErrorCode::kInvalidFile, file,
               ": field 'model.merges' must be a list");
      break;
    }
    case ComponentKind::kProcessor: {
      // processor_config.json nests the image processor; preprocessor_config.json is flat.
      const std::string base = j.contains("image_processor") ? "image_processor." : "";
      require_ints(j, file,
                   {base + "patch_size", base + "merge_size", base + "temporal_patch_size"});
      break;
    }
    case ComponentKind::kUnknown:
      break;
  }
}

std::string first_existing(const std::string& folder, const std::vector<std::string>& names) {
  std::error_code ec;
  for (const auto& n : names) {
    const std::string p = (fs::path(folder) / n).string();
    if (fs::is_regular_file(p, ec)) return p;
  }
  return "";
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? " or " : "") + names[i];
  return out;
}

void resolve_config(Component& c) {
  std::vector<std::string> names;
  switch (c.kind) {
    case ComponentKind::kScheduler:
      names = {"scheduler_config.json"};
      break;
    case ComponentKind::kTokenizer:
      names = {"tokenizer.json"};
      break;
    case ComponentKind::kProcessor:
      names = {"processor_config.json", "preprocessor_config.json"};
      break;
    case ComponentKind::kUnknown:
      return;  // nothing known to read
    default:
      names = {"config.json"};
      break;
  }
  c.config_file = first_existing(c.folder, names);
  H3_CHECK(!c.config_file.empty(), ErrorCode::kNotFound, (fs::path(c.folder) / names[0]).string(),
           ": file not found (component '", c.name, "' needs ", join_names(names), ")");
  c.config = read_json_file(c.config_file);
  validate_config(c, c.config_file);
}

void resolve_weights(Component& c) {
  if (!component_has_weights(c.kind)) return;
  const std::string suffix = c.variant.empty() ? "" : "." + c.variant;
  const std::vector<std::string> stems =
      c.kind == ComponentKind::kTextEncoder
          ? std::vector<std::string>{"model", "diffusion_pytorch_model"}
          : std::vector<std::string>{"diffusion_pytorch_model", "model"};
  std::vector<std::string> tried;
  for (const auto& stem : stems) {
    const std::string single = (fs::path(c.folder) / (stem + suffix + ".safetensors")).string();
    const std::string index = single + ".index.json";
    tried.push_back(fs::path(single).filename().string());
    tried.push_back(fs::path(index).filename().string());
    std::error_code ec;
    if (fs::is_regular_file(index, ec)) {
      // The shard list, so that a missing shard is named before anything is mapped.
      const nlohmann::json j = read_json_file(index);
      const nlohmann::json* map = find_field(j, "weight_map");
      H3_CHECK(map != nullptr && map->is_object(), ErrorCode::kInvalidFile, index,
               ": missing required field 'weight_map' (an object tensor -> shard file)");
      std::set<std::string> shards;
      for (const auto& [tensor, shard] : map->items()) {
        H3_CHECK(shard.is_string(), ErrorCode::kInvalidFile, index, ": weight_map entry '", tensor,
                 "' must name a shard file");
        shards.insert(shard.get<std::string>());
      }
      for (const auto& s : shards) {
        const std::string p = (fs::path(c.folder) / s).string();
        H3_CHECK(fs::is_regular_file(p, ec), ErrorCode::kNotFound, p, ": shard listed by ", index,
                 " not found");
        c.weight_files.push_back(p);
      }
      c.weights = index;
      return;
    }
    if (fs::is_regular_file(single, ec)) {
      c.weights = single;
      c.weight_files = {single};
      return;
    }
  }
  fail(ErrorCode::kNotFound, c.folder, ": no weights for component '", c.name, "' (looked for ",
       join_names(tried), ")");
}

std::string json_string_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace

// ---- Repository --------------------------------------------------------------------------------

Repository Repository::open(const std::string& root_in) {
  std::error_code ec;
  H3_CHECK(fs::is_directory(root_in, ec), ErrorCode::kNotFound, root_in,
           ": repository folder not found");
  Repository r;
  r.root_ = fs::absolute(root_in, ec).lexically_normal().string();
  if (!r.root_.empty() && r.root_.size() > 1 && r.root_.back() == '/') r.root_.pop_back();
  r.index_file_ = first_existing(r.root_, {"modular_model_index.json", "model_index.json"});
  H3_CHECK(!r.index_file_.empty(), ErrorCode::kNotFound,
           (fs::path(r.root_) / "modular_model_index.json").string(),
           ": file not found (a MiniMax-H3 repository has modular_model_index.json or "
           "model_index.json at its root)");
  r.index_ = read_json_file(r.index_file_);
  const std::string& ifile = r.index_file_;
  H3_CHECK(r.index_.is_object(), ErrorCode::kInvalidFile, ifile, ": expected a JSON object");

  // A component entry is a list [library, class, spec?]; anything else is pipeline config.
  for (const auto& [key, value] : r.index_.items()) {
    if (!value.is_array()) {
      r.pipeline_config_[key] = value;
      continue;
    }
    H3_CHECK(value.size() >= 2 && value.size() <= 3 && value[0].is_string() && value[1].is_string(),
             ErrorCode::kInvalidFile, ifile, ": component '", key,
             "' must be [library, class, {subfolder, ...}], got ", value.dump());
    Component c;
    c.name = key;
    c.library = value[0].get<std::string>();
    c.class_name = value[1].get<std::string>();
    c.spec = value.size() == 3 ? value[2] : nlohmann::json::object();
    H3_CHECK(c.spec.is_object(), ErrorCode::kInvalidFile, ifile, ": component '", key,
             "': third element must be an object, got ", c.spec.dump());
    c.kind = component_kind_from_class(c.class_name);
    c.subfolder = json_string_or(c.spec, "subfolder", key);
    c.pretrained = json_string_or(c.spec, "pretrained_model_name_or_path", "");
    c.variant = json_string_or(c.spec, "variant", "");
    H3_CHECK(!c.subfolder.empty() && fs::path(c.subfolder).is_relative() &&
                 c.subfolder.find("..") == std::string::npos,
             ErrorCode::kInvalidFile, ifile, ": component '", key,
             "': subfolder must be a relative folder name inside the repository, got '",
             c.subfolder, "'");
    c.folder = (fs::path(r.root_) / c.subfolder).string();
    r.components_.push_back(std::move(c));
  }
  r.pipeline_class_ = json_string_or(r.pipeline_config_, "_class_name", "");

  for (const auto& name : required_component_names()) {
    H3_CHECK(r.has(name), ErrorCode::kInvalidFile, ifile, ": missing required component '", name,
             "'");
  }
  for (auto& c : r.components_) {
    H3_CHECK(fs::is_directory(c.folder, ec), ErrorCode::kNotFound, c.folder,
             ": component folder not found (component '", c.name, "' in ", ifile, ")");
    resolve_config(c);
    resolve_weights(c);
  }
  return r;
}

bool Repository::has(const std::string& name) const {
  for (const auto& c : components_) {
    if (c.name == name) return true;
  }
  return false;
}

const Component& Repository::component(const std::string& name) const {
  for (const auto& c : components_) {
    if (c.name == name) return c;
  }
  fail(ErrorCode::kNotFound, index_file_, ": no component '", name, "'");
}

Checkpoint Repository::checkpoint(const std::string& name) const {
  const Component& c = component(name);
  H3_CHECK(!c.weights.empty(), ErrorCode::kNotFound, "component '", name, "' (", c.class_name,
           ") has no weights");
  try {
    return Checkpoint::open(c.weights);
  } catch (const Error& e) {
    throw e.with_context("component '" + name + "'");
  }
}

}  // namespace h3::io
