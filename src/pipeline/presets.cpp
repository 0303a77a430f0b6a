#include "pipeline/presets.h"

#include <filesystem>
#include <sstream>

#include "core/status.h"
#include "io/repo.h"
#include "pipeline/scheduler.h"

namespace h3::pipeline {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kDenseSteps = 50;  // §4.2 presets: 50 sigma points = 49 forwards
constexpr double kFastH3Sparsity = 0.9;
constexpr int kFastH3Tile = 64;
constexpr const char* kInferenceFile = "fastvideo_inference.json";

bool has_vsa_gates(const io::Repository& repo, const std::string& component) {
  const io::Checkpoint ck = repo.checkpoint(component);
  for (const std::string& name : ck.names())
    if (name.find(".attn.to_gate_compress.") != std::string::npos) return true;
  return false;
}

void read_inference_file(const std::string& path, DeclaredPreset* d) {
  const nlohmann::json j = io::read_json_file(path);
  H3_CHECK(j.is_object(), ErrorCode::kInvalidFile, path, ": expected a JSON object");
  if (j.contains("dmd_denoising_steps")) {
    const nlohmann::json& s = j.at("dmd_denoising_steps");
    H3_CHECK(s.is_array() && !s.empty(), ErrorCode::kInvalidFile, path,
             ": dmd_denoising_steps must be a non-empty list of timesteps");
    for (const nlohmann::json& t : s)
      H3_CHECK(t.is_number(), ErrorCode::kInvalidFile, path,
               ": dmd_denoising_steps must hold numbers, got ", t.dump());
    d->steps = static_cast<int64_t>(s.size()) + 1;  // N forwards = N + 1 sigma points
  }
  if (j.contains("num_inference_steps")) {
    const nlohmann::json& n = j.at("num_inference_steps");
    H3_CHECK(n.is_number_integer() && n.get<int64_t>() >= 2, ErrorCode::kInvalidFile, path,
             ": num_inference_steps must be an integer >= 2, got ", n.dump());
    H3_CHECK(!d->steps || *d->steps == n.get<int64_t>(), ErrorCode::kInvalidFile, path,
             ": num_inference_steps ", n.get<int64_t>(), " disagrees with dmd_denoising_steps (",
             *d->steps - 1, " forwards = ", *d->steps, " points)");
    d->steps = n.get<int64_t>();
  }
  for (const char* key : {"vsa_sparsity", "VSA_sparsity"}) {
    if (!j.contains(key)) continue;
    const nlohmann::json& v = j.at(key);
    H3_CHECK(v.is_number() && v.get<double>() >= 0.0 && v.get<double>() < 1.0,
             ErrorCode::kInvalidFile, path, ": ", key, " must be a number in [0, 1), got ",
             v.dump());
    d->vsa_sparsity = v.get<double>();
  }
}

}  // namespace

DeclaredPreset declared_preset(const io::Repository& repo, const std::string& workflow) {
  DeclaredPreset d;
  const std::string component = workflow == "ref2va" ? "transformer_ref" : "transformer";
  if (!repo.has(component)) return d;
  for (const std::string& dir : {repo.component(component).folder, repo.root()}) {
    const std::string path = (fs::path(dir) / kInferenceFile).string();
    if (!fs::is_regular_file(path)) continue;
    read_inference_file(path, &d);
    d.name = "fasth3";
    d.source = kInferenceFile;
    return d;
  }
  if (has_vsa_gates(repo, component)) {
    d.name = "fasth3";
    d.source = "checkpoint gates";
  }
  return d;
}

ResolvedSettings resolve_settings(const io::Repository& repo, const std::string& workflow,
                                  const SettingOverrides& o) {
  ResolvedSettings r;
  DeclaredPreset declared = declared_preset(repo, workflow);
  if (declared.name == "dense" && o.adapter_gates) {
    declared.name = "fasth3";
    declared.source = "adapter gates (" + *o.adapter_gates + ")";
  }
  if (o.preset) {
    H3_CHECK(*o.preset == "dense" || *o.preset == "fasth3", ErrorCode::kInvalidArgument,
             "--preset must be dense or fasth3, got '", *o.preset, "'");
    r.preset = *o.preset;
    r.source["preset"] = "flag";
  } else {
    r.preset = declared.name;
    r.source["preset"] = declared.source;
  }
  const std::string from_preset = "preset " + r.preset;
  const bool fast = r.preset == "fasth3";
  // The checkpoint's own file refines the preset it declares, not one a flag chose instead.
  const bool declared_values = fast && declared.name == "fasth3";
  r.steps = fast ? kFastH3GridPoints : kDenseSteps;
  r.source["steps"] = from_preset;
  if (declared_values && declared.steps) {
    r.steps = *declared.steps;
    r.source["steps"] = declared.source;
  }
  r.attention = fast ? dit::DitAttentionBackend::kVsa : dit::DitAttentionBackend::kDense;
  r.source["attention"] = from_preset;
  r.vsa_sparsity = fast ? kFastH3Sparsity : -1.0;
  r.source["vsa_sparsity"] = fast ? from_preset : "model default";
  if (declared_values && declared.vsa_sparsity) {
    r.vsa_sparsity = *declared.vsa_sparsity;
    r.source["vsa_sparsity"] = declared.source;
  }
  r.vsa_tile_size = kFastH3Tile;
  r.source["vsa_tile_size"] = fast ? from_preset : "default";
  if (o.steps) {
    r.steps = *o.steps;
    r.source["steps"] = "flag";
  }
  if (o.attention) {
    r.attention = *o.attention;
    r.source["attention"] = "flag";
  }
  if (o.vsa_sparsity) {
    r.vsa_sparsity = *o.vsa_sparsity;
    r.source["vsa_sparsity"] = "flag";
  }
  if (o.vsa_tile_size) {
    r.vsa_tile_size = *o.vsa_tile_size;
    r.source["vsa_tile_size"] = "flag";
  }
  return r;
}

std::string ResolvedSettings::describe() const {
  std::ostringstream os;
  auto item = [&](const char* key, const std::string& value) {
    const auto it = source.find(key);
    os << (os.tellp() > 0 ? ", " : "") << key << "=" << value << " ("
       << (it == source.end() ? "default" : it->second) << ")";
  };
  item("preset", preset);
  item("steps", std::to_string(steps));
  item("attention", dit::attention_backend_name(attention));
  if (attention == dit::DitAttentionBackend::kVsa) {
    std::ostringstream sp;
    if (vsa_sparsity < 0) sp << "model default"; else sp << vsa_sparsity;
    item("vsa_sparsity", sp.str());
    item("vsa_tile_size", std::to_string(vsa_tile_size));
  }
  return os.str();
}

}  // namespace h3::pipeline
