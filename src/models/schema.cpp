#include "models/schema.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/status.h"
#include "models/fp8_checkpoint.h"

namespace h3::models {

namespace fs = std::filesystem;

const TensorSpec* Schema::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int64_t Schema::param_count(bool used_only) const {
  int64_t n = 0;
  for (const auto& t : tensors) {
    if (t.optional || (used_only && !t.used)) continue;
    n += t.numel();
  }
  return n;
}

uint64_t Schema::byte_count(bool used_only) const {
  uint64_t n = 0;
  for (const auto& t : tensors) {
    if (t.optional || (used_only && !t.used)) continue;
    n += t.nbytes();
  }
  return n;
}

std::optional<Schema> schema_for(const io::Component& c) {
  switch (c.kind) {
    case io::ComponentKind::kTransformer:
      return dit_schema(c.config, c.config_file);
    case io::ComponentKind::kTextEncoder:
      return qwen3_vl_schema(c.config, c.config_file);
    case io::ComponentKind::kVideoVae:
      return video_vae_schema(c.config, c.config_file);
    case io::ComponentKind::kAudioVae:
      return audio_vae_schema(c.config, c.config_file);
    default:
      return std::nullopt;
  }
}

// ---- the check ---------------------------------------------------------------------------------

namespace {

// The check over the checkpoint's own records (no copies of names or shapes: a released
// component has up to a few thousand tensors and the check runs at every load).
SchemaCheck check_infos(const Schema& schema, const std::vector<const io::TensorInfo*>& tensors) {
  SchemaCheck r;
  std::unordered_map<std::string_view, const io::TensorInfo*> have;
  have.reserve(tensors.size());
  for (const io::TensorInfo* t : tensors) have[t->name] = t;
  std::unordered_set<std::string_view> known;
  known.reserve(schema.tensors.size());
  for (const auto& spec : schema.tensors) {
    known.insert(spec.name);
    auto it = have.find(spec.name);
    if (it == have.end()) {
      if (!spec.optional) r.missing.push_back(spec.name);
      continue;
    }
    const io::TensorInfo& got = *it->second;
    if (got.shape != spec.shape) {
      r.misshapen.push_back({spec.name, spec.shape, got.shape, spec.dtype, got.dtype});
      continue;
    }
    // A projection stored in FP8 with its scale (models/fp8_checkpoint.h) is a published layout
    // the engine reads, not a precision change to warn about.
    auto has_scale = [&]() {
      const std::string& n = spec.name;
      if (n.size() <= 7 || n.compare(n.size() - 7, 7, ".weight") != 0) return false;
      const std::string stem = n.substr(0, n.size() - 7);
      return have.count(stem + ".weight_scale") > 0 || have.count(stem + ".weight_scale_inv") > 0;
    };
    if (got.dtype == DType::kF8E4M3 && dtype_is_float(spec.dtype) && has_scale()) {
      ++r.fp8_weights;
    } else if (got.dtype != spec.dtype) {
      const TensorMismatch m{spec.name, spec.shape, got.shape, spec.dtype, got.dtype};
      // A float stored at another precision still loads (converted); anything else cannot.
      if (dtype_is_float(got.dtype) && dtype_is_float(spec.dtype)) {
        r.dtype_warnings.push_back(m);
      } else {
        r.bad_dtype.push_back(m);
        continue;
      }
    }
    ++r.matched;
    if (!spec.used) ++r.skipped;
  }
  for (const io::TensorInfo* t : tensors) {
    if (known.count(t->name)) continue;
    // The scales of a projection stored in FP8 (models/fp8_checkpoint.h) belong to it.
    std::string weight;
    if (is_fp8_companion(t->name, &weight) && known.count(weight)) {
      auto it = have.find(weight);
      if (it != have.end() && it->second->dtype == DType::kF8E4M3) {
        ++r.fp8_scales;
        continue;
      }
    }
    r.unexpected.push_back(t->name);
  }
  std::sort(r.unexpected.begin(), r.unexpected.end());
  return r;
}

}  // namespace

SchemaCheck check_schema(const Schema& schema, const std::vector<io::TensorInfo>& tensors) {
  std::vector<const io::TensorInfo*> infos;
  infos.reserve(tensors.size());
  for (const auto& t : tensors) infos.push_back(&t);
  return check_infos(schema, infos);
}

SchemaCheck check_schema(const Schema& schema, const io::Checkpoint& checkpoint) {
  std::vector<const io::TensorInfo*> infos;
  for (const auto& file : checkpoint.files())
    for (const io::TensorInfo& t : file->tensors()) infos.push_back(&t);
  return check_infos(schema, infos);
}

std::vector<std::string> SchemaCheck::errors() const {
  std::vector<std::string> out;
  for (const auto& n : missing) out.push_back("missing tensor '" + n + "'");
  for (const auto& n : unexpected) out.push_back("unexpected tensor '" + n + "'");
  for (const auto& m : misshapen) {
    out.push_back(str_cat("tensor '", m.name, "' has shape ", shape_str(m.actual_shape),
                          ", expected ", shape_str(m.expected_shape)));
  }
  for (const auto& m : bad_dtype) {
    out.push_back(str_cat("tensor '", m.name, "' has dtype ", dtype_name(m.actual_dtype),
                          ", expected ", dtype_name(m.expected_dtype)));
  }
  return out;
}

std::vector<std::string> SchemaCheck::warnings() const {
  std::vector<std::string> out;
  for (const auto& m : dtype_warnings) {
    out.push_back(str_cat("tensor '", m.name, "' is stored as ", dtype_name(m.actual_dtype),
                          ", the release stores ", dtype_name(m.expected_dtype),
                          " (converted at load)"));
  }
  return out;
}

// ---- repository inspection ---------------------------------------------------------------------

namespace {

std::string component_summary(const io::Component& c) {
  const nlohmann::json& j = c.config;
  switch (c.kind) {
    case io::ComponentKind::kScheduler:
      return str_cat("shift ", j.value("shift", 0.0));
    case io::ComponentKind::kTokenizer: {
      const size_t vocab = j["model"]["vocab"].size();
      const size_t merges = j["model"]["merges"].size();
      const size_t added =
          j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0;
      return str_cat("byte-level BPE, vocab ", vocab, ", ", merges, " merges, ", added,
                     " added tokens");
    }
    case io::ComponentKind::kProcessor: {
      const nlohmann::json& ip = j.contains("image_processor") ? j["image_processor"] : j;
      return str_cat("patch ", ip.value("patch_size", 0), ", merge ", ip.value("merge_size", 0),
                     ", temporal patch ", ip.value("temporal_patch_size", 0));
    }
    default:
      return "";
  }
}

void inspect_weights(const io::Repository& repo, const io::Component& c, ComponentReport& r) {
  io::Checkpoint ckpt;
  try {
    ckpt = repo.checkpoint(c.name);
  } catch (const Error& e) {
    r.errors.push_back(e.message());
    return;
  }
  r.files = static_cast<int64_t>(ckpt.files().size());
  for (const auto& f : ckpt.files()) r.file_bytes += f->file_size();
  std::map<DType, DTypeTotal> totals;
  std::vector<io::TensorInfo> infos;
  for (const auto& name : ckpt.names()) {
    const io::TensorInfo& info = ckpt.info(name);
    infos.push_back(info);
    DTypeTotal& t = totals[info.dtype];
    t.dtype = info.dtype;
    t.params += shape_numel(info.shape);
    t.bytes += info.nbytes;
    r.params += shape_numel(info.shape);
    r.bytes += info.nbytes;
  }
  r.tensors = static_cast<int64_t>(infos.size());
  for (const auto& [dt, t] : totals) r.by_dtype.push_back(t);

  std::optional<Schema> schema;
  try {
    schema = schema_for(c);
  } catch (const Error& e) {
    r.errors.push_back(e.message());
    return;
  }
  if (!schema) return;
  for (const auto& t : schema->tensors) {
    if (!t.optional) ++r.schema_tensors;
  }
  r.used_params = schema->param_count(true);
  r.check = check_schema(*schema, infos);
  for (const auto& e : r.check->errors()) r.errors.push_back(c.weights + ": " + e);
  for (const auto& w : r.check->warnings()) r.warnings.push_back(c.weights + ": " + w);
}

nlohmann::json report_json(const ComponentReport& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["class"] = r.class_name;
  j["kind"] = r.kind;
  j["folder"] = r.folder;
  j["config_file"] = r.config_file;
  if (!r.summary.empty()) j["summary"] = r.summary;
  if (!r.weights.empty()) {
    j["weights"] = r.weights;
    j["files"] = r.files;
    j["file_bytes"] = r.file_bytes;
    j["tensors"] = r.tensors;
    j["params"] = r.params;
    j["bytes"] = r.bytes;
    j["used_params"] = r.used_params;
    nlohmann::json d = nlohmann::json::object();
    for (const auto& t : r.by_dtype) {
      d[dtype_name(t.dtype)] = {{"params", t.params}, {"bytes", t.bytes}};
    }
    j["by_dtype"] = d;
  }
  if (r.check) {
    const SchemaCheck& c = *r.check;
    nlohmann::json s;
    s["ok"] = c.ok();
    s["expected"] = r.schema_tensors;
    s["matched"] = c.matched;
    s["skipped"] = c.skipped;
    s["fp8_weights"] = c.fp8_weights;
    s["missing"] = c.missing;
    s["unexpected"] = c.unexpected;
    nlohmann::json mis = nlohmann::json::array();
    for (const auto& m : c.misshapen) {
      mis.push_back({{"name", m.name}, {"expected", m.expected_shape}, {"actual", m.actual_shape}});
    }
    s["misshapen"] = mis;
    nlohmann::json dts = nlohmann::json::array();
    for (const auto* list : {&c.bad_dtype, &c.dtype_warnings}) {
      for (const auto& m : *list) {
        dts.push_back({{"name", m.name},
                       {"expected", dtype_name(m.expected_dtype)},
                       {"actual", dtype_name(m.actual_dtype)},
                       {"error", list == &c.bad_dtype}});
      }
    }
    s["dtype_mismatch"] = dts;
    j["schema"] = s;
  }
  j["ok"] = r.ok();
  j["errors"] = r.errors;
  j["warnings"] = r.warnings;
  return j;
}

}  // namespace

bool RepositoryReport::ok() const {
  if (!errors.empty()) return false;
  for (const auto& c : components) {
    if (!c.ok()) return false;
  }
  return true;
}

int64_t RepositoryReport::total_params() const {
  int64_t n = 0;
  for (const auto& c : components) n += c.params;
  return n;
}

uint64_t RepositoryReport::total_bytes() const {
  uint64_t n = 0;
  for (const auto& c : components) n += c.bytes;
  return n;
}

nlohmann::json RepositoryReport::to_json() const {
  nlohmann::json j;
  j["root"] = root;
  j["index_file"] = index_file;
  j["pipeline_class"] = pipeline_class;
  j["pipeline_config"] = pipeline_config;
  nlohmann::json comps = nlohmann::json::array();
  for (const auto& c : components) comps.push_back(report_json(c));
  j["components"] = comps;
  j["total_params"] = total_params();
  j["total_bytes"] = total_bytes();
  j["errors"] = errors;
  j["ok"] = ok();
  return j;
}

RepositoryReport inspect_repository(const std::string& root) {
  RepositoryReport report;
  report.root = root;
  report.pipeline_config = nlohmann::json::object();
  io::Repository repo;
  try {
    repo = io::Repository::open(root);
  } catch (const Error& e) {
    report.errors.push_back(e.message());
    return report;
  }
  report.root = repo.root();
  report.index_file = repo.index_file();
  report.pipeline_class = repo.pipeline_class();
  report.pipeline_config = repo.pipeline_config();
  for (const auto& c : repo.components()) {
    ComponentReport r;
    r.name = c.name;
    r.class_name = c.class_name;
    r.kind = io::component_kind_name(c.kind);
    r.folder = c.folder;
    r.config_file = c.config_file;
    r.weights = c.weights;
    try {
      r.summary = component_summary(c);
    } catch (const std::exception&) {
      r.summary.clear();  // display only; the config was validated on open
    }
    if (c.kind == io::ComponentKind::kUnknown) {
      r.warnings.push_back(str_cat("component '", c.name, "' has class '", c.class_name,
                                   "', which the engine does not use"));
    }
    if (io::component_has_weights(c.kind)) inspect_weights(repo, c, r);
    report.components.push_back(std::move(r));
  }
  return report;
}

}  // namespace h3::models
