#include "models/h3_dit/dit_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/status.h"

namespace h3::dit {
namespace {

const nlohmann::json& field(const nlohmann::json& j, const char* name, const std::string& label) {
  auto it = j.find(name);
  H3_CHECK(it != j.end(), ErrorCode::kInvalidFile, label, ": missing field '", name, "'");
  return *it;
}

int64_t positive_int(const nlohmann::json& j, const char* name, const std::string& label) {
  const nlohmann::json& v = field(j, name, label);
  H3_CHECK(v.is_number_integer(), ErrorCode::kInvalidFile, label, ": field '", name,
           "' must be an integer, got ", v.dump());
  const int64_t x = v.get<int64_t>();
  H3_CHECK(x > 0 && x <= (int64_t{1} << 31), ErrorCode::kInvalidFile, label, ": field '", name,
           "' must be a positive integer below 2^31, got ", x);
  return x;
}

int64_t non_negative_int(const nlohmann::json& j, const char* name, const std::string& label) {
  const nlohmann::json& v = field(j, name, label);
  H3_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 100000,
           ErrorCode::kInvalidFile, label, ": field '", name,
           "' must be a non-negative integer, got ", v.dump());
  return v.get<int64_t>();
}

double positive_number(const nlohmann::json& j, const char* name, const std::string& label) {
  const nlohmann::json& v = field(j, name, label);
  H3_CHECK(v.is_number(), ErrorCode::kInvalidFile, label, ": field '", name,
           "' must be a number, got ", v.dump());
  const double x = v.get<double>();
  H3_CHECK(std::isfinite(x) && x > 0, ErrorCode::kInvalidFile, label, ": field '", name,
           "' must be a positive finite number, got ", v.dump());
  return x;
}

}  // namespace

DitConfig DitConfig::from_json(const nlohmann::json& j, const std::string& label) {
  H3_CHECK(j.is_object(), ErrorCode::kInvalidFile, label, ": expected a JSON object");
  if (auto it = j.find("_class_name"); it != j.end()) {
    H3_CHECK(it->is_string() && it->get<std::string>() == "MiniMaxH3Transformer3DModel",
             ErrorCode::kInvalidFile, label,
             ": _class_name must be \"MiniMaxH3Transformer3DModel\", got ", it->dump());
  }
  // Rank-reduced exports (§1.6) change the AdaLN path (basis after silu, fp16 tables).
  if (auto it = j.find("adaln_rank"); it != j.end() && !it->is_null()) {
    fail(ErrorCode::kUnsupported, label, ": adaln_rank=", it->dump(),
         " (rank-reduced AdaLN export) is not supported; use the full-rank checkpoint");
  }
  DitConfig c;
  c.num_attention_heads = positive_int(j, "num_attention_heads", label);
  c.attention_head_dim = positive_int(j, "attention_head_dim", label);
  c.hidden_size = positive_int(j, "hidden_size", label);
  c.num_layers = positive_int(j, "num_layers", label);
  c.num_refiner_layers = non_negative_int(j, "num_refiner_layers", label);
  c.ffn_dim = positive_int(j, "ffn_dim", label);
  c.in_channels = positive_int(j, "in_channels", label);
  c.audio_in_channels = positive_int(j, "audio_in_channels", label);
  c.text_dim = positive_int(j, "text_dim", label);
  c.freq_dim = positive_int(j, "freq_dim", label);
  c.time_embed_hidden_dim = positive_int(j, "time_embed_hidden_dim", label);
  c.time_embed_dim = positive_int(j, "time_embed_dim", label);
  c.rope_freq_dim = positive_int(j, "rope_freq_dim", label);
  c.rope_theta = positive_number(j, "rope_theta", label);
  c.norm_eps = positive_number(j, "norm_eps", label);
  c.qk_norm_eps = positive_number(j, "qk_norm_eps", label);
  c.final_norm_eps = positive_number(j, "final_norm_eps", label);

  const nlohmann::json& patch = field(j, "patch_size", label);
  H3_CHECK(patch.is_array() && patch.size() == 3, ErrorCode::kInvalidFile, label,
           ": field 'patch_size' must be a list of 3 integers (t, h, w), got ", patch.dump());
  for (size_t i = 0; i < 3; ++i) {
    H3_CHECK(patch[i].is_number_integer() && patch[i].get<int64_t>() > 0 &&
                 patch[i].get<int64_t>() <= 64,
             ErrorCode::kInvalidFile, label, ": field 'patch_size' must hold positive integers, got ",
             patch.dump());
    c.patch_size[i] = patch[i].get<int64_t>();
  }
  c.validate(label);
  return c;
}

void DitConfig::validate(const std::string& label) const {
  // §1.2: the rotary width 6F must be even and fit in a head; the rotation pairs channel j with
  // j + 3F, so 6F even is what makes the two halves equal.
  H3_CHECK(rotary_dim() % 2 == 0 && rotary_dim() <= attention_head_dim, ErrorCode::kInvalidFile,
           label, ": rotary width 6*rope_freq_dim = ", rotary_dim(),
           " must be even and at most attention_head_dim = ", attention_head_dim);
  // §2.6: the sinusoid is [cos(half) | sin(half)].
  H3_CHECK(freq_dim % 2 == 0, ErrorCode::kInvalidFile, label, ": freq_dim must be even, got ",
           freq_dim);
  H3_CHECK(patch_size[0] == 1, ErrorCode::kUnsupported, label,
           ": only a temporal patch of 1 is supported (released patch_size [1, 2, 2]), got ",
           patch_size[0]);
  H3_CHECK(hidden_size * 18 < (int64_t{1} << 31) && inner_dim() < (int64_t{1} << 31),
           ErrorCode::kInvalidFile, label, ": sizes too large (hidden_size ", hidden_size,
           ", heads x head_dim ", inner_dim(), ")");
}

DitConfig DitConfig::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "config.json").string();
  std::ifstream in(file, std::ios::binary);
  H3_CHECK(in.good(), ErrorCode::kNotFound, file, ": cannot open the transformer config");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  H3_CHECK(!j.is_discarded(), ErrorCode::kInvalidFile, file, ": not valid JSON");
  return from_json(j, file);
}

}  // namespace h3::dit
