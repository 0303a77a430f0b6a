// See golden_checks.h.
#include "support/golden_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace h3::test {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Reads a JSON file; null when absent or unreadable.
json read_json_or_null(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return nullptr;
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json(nullptr) : j;
}

bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-12 * std::max(std::fabs(x), std::fabs(y));
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_value(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

// Every key of the recorded section that the checkpoint config also has must agree.
bool compare_section(const json& recorded, const json& config, const std::string& label, std::string* why) {
  if (!recorded.is_object() || !config.is_object()) return true;
  for (const auto& [key, value] : recorded.items()) {
    if (!config.contains(key)) continue;
    if (!same_value(value, config[key])) {
      *why = label + "." + key + " is " + config[key].dump() + " in the checkpoint, " + value.dump() +
             " in generation_info.json (the configuration the stored outputs were made with)";
      return false;
    }
  }
  return true;
}

}  // namespace

bool golden_outputs_match_checkpoint(const std::string& component, std::string* why) {
  const Golden* g = Golden::get();
  if (!g) return true;
  const json info = read_json_or_null(fs::path(g->dir()) / "generation_info.json");
  if (!info.is_object() || !info.contains("config") || !info["config"].is_object()) return true;
  const json& rec = info["config"];
  const json cfg = read_json_or_null(fs::path(g->checkpoint_dir()) / component / "config.json");
  if (cfg.is_null()) return true;  // no config to compare: the model loader reports what is missing
  const std::string label = component + "/config.json";
  if (component == "transformer" || component == "transformer_ref") {
    return !rec.contains("dit") || compare_section(rec["dit"], cfg, label, why);
  }
  if (component == "text_encoder") {
    const bool text = !rec.contains("te_text") || !cfg.contains("text_config") ||
                      compare_section(rec["te_text"], cfg["text_config"], label + " text_config", why);
    return text && (!rec.contains("te_vision") || !cfg.contains("vision_config") ||
                    compare_section(rec["te_vision"], cfg["vision_config"], label + " vision_config", why));
  }
  if (component == "vae") return !rec.contains("vae") || compare_section(rec["vae"], cfg, label, why);
  if (component == "audio_vae") return !rec.contains("avae") || compare_section(rec["avae"], cfg, label, why);
  return true;
}

bool golden_outputs_match_checkpoint(const std::vector<std::string>& components, std::string* why) {
  for (const std::string& c : components)
    if (!golden_outputs_match_checkpoint(c, why)) return false;
  return true;
}

NoiseFloorBounds noise_floor_bounds(const std::string& floor_key, double table_rel_max,
                                    double table_rel_l2) {
  NoiseFloorBounds b{table_rel_max, table_rel_l2, "the table's bounds (no float64 floor recorded)"};
  const Golden* g = Golden::get();
  if (!g) return b;
  const json floors = read_json_or_null(fs::path(g->dir()) / "tolerances.json");
  if (!floors.is_object() || !floors.contains(floor_key) || !floors[floor_key].is_object())
    return b;
  const json& f = floors[floor_key];
  const auto twice = [&](const char* name, double table) {
    return f.contains(name) && f[name].is_number() ? std::max(table, 2.0 * f[name].get<double>())
                                                   : table;
  };
  b.rel_max = twice("max_rel_to_ref_max", table_rel_max);
  b.rel_l2 = twice("rms_rel", table_rel_l2);
  char buf[240];
  std::snprintf(
      buf, sizeof buf,
      "the reference is %.3g (rel_max) / %.3g (rel_l2) from float64 (tolerances.json %s): bounds "
      "max(table, 2 x floor) = %.3g / %.3g",
      f.value("max_rel_to_ref_max", 0.0), f.value("rms_rel", 0.0), floor_key.c_str(), b.rel_max,
      b.rel_l2);
  b.why = buf;
  return b;
}

std::string missing_tensors(const io::SafetensorsFile& f, const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (f.has(n)) continue;
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

int reference_count(const io::SafetensorsFile& f) {
  int count = 0;
  for (const io::TensorInfo& t : f.tensors()) {
    for (const std::string prefix : {"input_reference_", "normalized_reference_"}) {
      if (t.name.rfind(prefix, 0) != 0) continue;
      const std::string rest = t.name.substr(prefix.size());
      const size_t us = rest.find('_');
      if (us == 0 || us == std::string::npos) continue;
      bool digits = true;
      for (size_t i = 0; i < us; ++i) digits = digits && rest[i] >= '0' && rest[i] <= '9';
      if (digits) count = std::max(count, std::stoi(rest.substr(0, us)) + 1);
    }
  }
  return count;
}

std::string dit_partition_of(const GoldenCase& c) {
  const auto& meta = c.entry.contains("meta") ? c.entry["meta"] : nlohmann::json::object();
  if (meta.is_object() && meta.contains("transformer") && meta["transformer"].is_string()) {
    return meta["transformer"].get<std::string>();
  }
  return "transformer";
}

dit::DitInputs read_dit_inputs(const io::SafetensorsFile& f, const std::string& prefix) {
  dit::DitInputs in;
  in.hidden_states = f.tensor(prefix + "hidden_states");
  in.audio_hidden_states = f.tensor(prefix + "audio_hidden_states");
  in.encoder_hidden_states = f.tensor(prefix + "encoder_hidden_states");
  in.timestep = f.tensor(prefix + "timestep");
  in.timestep_indices = f.tensor(prefix + "timestep_indices");
  in.token_tags = f.tensor(prefix + "token_tags");
  in.position_ids = f.tensor(prefix + "position_ids");
  in.video_indices = f.tensor(prefix + "video_indices");
  in.audio_indices = f.tensor(prefix + "audio_indices");
  in.text_indices = f.tensor(prefix + "text_indices");
  return in;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

}  // namespace h3::test
