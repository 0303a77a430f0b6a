#include "models/h3_dit/dit_lora.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/log.h"
#include "core/status.h"
#include "io/safetensors.h"
#include "io/strict_json.h"
#include "models/h3_dit/dit_model.h"
#include "models/h3_dit/dit_weights.h"
#include "ops/ops.h"

namespace h3::dit {

LoraSpec parse_lora_spec(const std::string& arg) {
  LoraSpec spec;
  spec.file = arg;
  const size_t colon = arg.rfind(':');
  if (colon != std::string::npos && colon + 1 < arg.size()) {
    const std::string tail = arg.substr(colon + 1);
    char* end = nullptr;
    const double v = std::strtod(tail.c_str(), &end);
    // Only a whole number after the last colon is a scale: "C:/adapters/x.safetensors" keeps its
    // colon, "x.safetensors:0.8" is scaled.
    if (end && *end == '\0' && end != tail.c_str()) {
      H3_CHECK(std::isfinite(v), ErrorCode::kInvalidArgument, "--lora ", arg,
               ": the scale after ':' must be a finite number");
      spec.file = arg.substr(0, colon);
      spec.scale = static_cast<float>(v);
    }
  }
  H3_CHECK(!spec.file.empty(), ErrorCode::kInvalidArgument, "--lora '", arg,
           "': expected FILE[:SCALE] with a file name");
  return spec;
}

const char* lora_update_kind_name(LoraUpdateKind k) {
  switch (k) {
    case LoraUpdateKind::kLowRank:
      return "low-rank";
    case LoraUpdateKind::kDiff:
      return "diff";
    case LoraUpdateKind::kSet:
      return "set";
  }
  return "?";
}

const char* lora_mode_name(LoraMode m) { return m == LoraMode::kFused ? "fused" : "runtime"; }

LoraMode parse_lora_mode(const std::string& text) {
  if (text == "fused") return LoraMode::kFused;
  if (text == "runtime") return LoraMode::kRuntime;
  fail(ErrorCode::kInvalidArgument, "LoRA mode '", text, "': expected fused or runtime");
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// How a module of the file becomes modules of the model.
enum class Transform {
  kNone,
  kQkv,             // fused [q_all; k_all; v_all] rows -> to_q, to_k, to_v
  kQkvInterleaved,  // fused [head0: q k v, head1: ...] rows (DiffSynth) -> to_q, to_k, to_v
  kSwapHalves,      // SwiGLU fc1 [gate; value] rows -> ff.net.0.proj [value; gate]
};

struct Mapped {
  std::string module;  // the model's module name (diffusers), e.g. "transformer_blocks.3.attn"
  Transform transform = Transform::kNone;
};

// The released checkpoint's module names (h3_dit_spec.md §1.5) onto the model's. `ok` false when
// `m` is not in that naming.
Mapped from_original(const std::string& m, bool interleaved_qkv, bool* ok) {
  *ok = true;
  static const std::pair<const char*, const char*> kGlobals[] = {
      {"video_patch_proj", "proj_in"},
      {"audio_patch_proj", "audio_proj_in"},
      {"condition_proj", "context_embedder"},
      {"time_embedder.proj_in", "time_embedder.linear_1"},
      {"time_embedder.proj_out", "time_embedder.linear_2"},
      {"final_layer.norm", "norm_out.norm"},
      {"final_layer.adaln_proj.linear", "norm_out.linear"},
      {"final_layer.video_out", "proj_out"},
      {"final_layer.audio_out", "audio_proj_out"},
  };
  for (const auto& [from, to] : kGlobals)
    if (m == from) return {to, Transform::kNone};
  std::string head, rest;
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"blocks.", "transformer_blocks."},
        {"token_refiner.blocks.", "token_refiner.refiner_blocks."}}) {
    if (!starts_with(m, from)) continue;
    const size_t dot = m.find('.', from.size());
    if (dot == std::string::npos) break;
    head = to + m.substr(from.size(), dot - from.size()) + ".";
    rest = m.substr(dot + 1);
  }
  if (head.empty()) {
    *ok = false;
    return {};
  }
  if (rest == "attn.qkv_proj")
    return {head + "attn.qkv", interleaved_qkv ? Transform::kQkvInterleaved : Transform::kQkv};
  if (rest == "mlp.fc1") return {head + "ff.net.0.proj", Transform::kSwapHalves};
  static const std::pair<const char*, const char*> kBody[] = {
      {"attn.out_proj", "attn.to_out.0"},
      {"attn.q_norm", "attn.norm_q"},
      {"attn.k_norm", "attn.norm_k"},
      {"mlp.fc2", "ff.net.2"},
  };
  for (const auto& [from, to] : kBody)
    if (rest == from) return {head + to, Transform::kNone};
  return {head + rest, Transform::kNone};  // norm1, norm2, adaln_proj.linear, attn.to_gate_compress
}

bool is_original_name(const std::string& m) {
  for (const char* p : {"blocks.", "token_refiner.blocks.", "final_layer.", "video_patch_proj",
                        "audio_patch_proj", "condition_proj", "time_embedder.proj_"})
    if (starts_with(m, p)) return true;
  return false;
}

// Every module name of both namings with its dots flattened to underscores (musubi-tuner's
// `lora_unet_` keys). H3's own names contain underscores, so the dotted path is found by looking
// the whole flattened name up rather than by splitting it.
std::map<std::string, std::string> flattened_vocabulary(const DitConfig& c) {
  std::vector<std::string> modules;
  for (const DitTensorSpec& s : dit_tensor_specs(c)) {
    const size_t dot = s.name.rfind('.');
    modules.push_back(s.name.substr(0, dot));
  }
  for (int64_t i = 0; i < c.num_layers; ++i)
    modules.push_back("transformer_blocks." + std::to_string(i) + ".attn.to_gate_compress");
  auto add_original_body = [&](const std::string& p, bool main) {
    for (const char* r : {"attn.qkv_proj", "attn.out_proj", "attn.q_norm", "attn.k_norm", "mlp.fc1",
                          "mlp.fc2", "norm1", "norm2"})
      modules.push_back(p + r);
    if (main) {
      modules.push_back(p + "adaln_proj.linear");
      modules.push_back(p + "attn.to_gate_compress");
    }
  };
  for (int64_t i = 0; i < c.num_layers; ++i)
    add_original_body("blocks." + std::to_string(i) + ".", true);
  for (int64_t j = 0; j < c.num_refiner_layers; ++j)
    add_original_body("token_refiner.blocks." + std::to_string(j) + ".", false);
  for (const char* g :
       {"video_patch_proj", "audio_patch_proj", "condition_proj", "time_embedder.proj_in",
        "time_embedder.proj_out", "final_layer.norm", "final_layer.adaln_proj.linear",
        "final_layer.video_out", "final_layer.audio_out"})
    modules.push_back(g);
  std::map<std::string, std::string> out;
  for (const std::string& m : modules) {
    std::string f = m;
    for (char& ch : f)
      if (ch == '.') ch = '_';
    out.emplace(f, m);  // the first spelling wins; both namings never flatten alike
  }
  return out;
}

// The parts of one adapter key.
struct KeyParts {
  std::string module;     // in the file's naming, container prefixes removed
  std::string suffix;     // "lora_A", "lora_B", "alpha", "diff", "diff_b", "set_weight"
  std::string partition;  // "transformer" / "transformer_ref" when prefixed
  bool peft_default = false;
  bool kohya = false;
  bool flattened = false;
};

bool split_key(const std::string& key, KeyParts* p) {
  std::string k = key;
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const char* prefix : {"diffusion_model.", "model.diffusion_model.", "base_model.model."}) {
      if (starts_with(k, prefix)) {
        k = k.substr(std::string(prefix).size());
        stripped = true;
      }
    }
    for (const char* part : {"transformer_ref.", "transformer."}) {
      if (starts_with(k, part)) {
        p->partition = std::string(part).substr(0, std::string(part).size() - 1);
        k = k.substr(std::string(part).size());
        stripped = true;
      }
    }
  }
  static const std::pair<const char*, const char*> kSuffixes[] = {
      {".lora_A.default.weight", "lora_A"},
      {".lora_B.default.weight", "lora_B"},
      {".lora_A.weight", "lora_A"},
      {".lora_B.weight", "lora_B"},
      {".lora_down.weight", "lora_A"},
      {".lora_up.weight", "lora_B"},
      {".alpha", "alpha"},
      {".diff_b", "diff_b"},
      {".diff", "diff"},
      {".set_weight", "set_weight"},
  };
  for (const auto& [suffix, name] : kSuffixes) {
    if (!ends_with(k, suffix)) continue;
    p->module = k.substr(0, k.size() - std::string(suffix).size());
    p->suffix = name;
    p->peft_default = std::string(suffix).find(".default.") != std::string::npos;
    p->kohya = std::string(suffix).find("lora_down") != std::string::npos ||
               std::string(suffix).find("lora_up") != std::string::npos;
    if (starts_with(p->module, "lora_unet_")) {
      p->module = p->module.substr(10);
      p->flattened = true;
    }
    return !p->module.empty();
  }
  return false;
}

// Keys of adapter kinds the engine does not apply: refused by name rather than reported as
// unmatched, because the user's file is fine, only not a plain LoRA.
void refuse_other_adapter_kinds(const std::string& file, const std::string& key) {
  const auto has = [&](const char* s) { return key.find(s) != std::string::npos; };
  H3_CHECK(!has("lokr_w"), ErrorCode::kUnsupported, file, ": tensor '", key,
           "' is a LoKr factor; only LoRA (lora_A/lora_B, lora_down/lora_up) and whole-tensor "
           "updates (.diff, .diff_b, .set_weight) are supported");
  H3_CHECK(!has("hada_w") && !has("hada_t"), ErrorCode::kUnsupported, file, ": tensor '", key,
           "' is a LoHa factor; only LoRA (lora_A/lora_B, lora_down/lora_up) and whole-tensor "
           "updates (.diff, .diff_b, .set_weight) are supported");
  H3_CHECK(!has("dora_scale"), ErrorCode::kUnsupported, file, ": tensor '", key,
           "' is a DoRA magnitude; DoRA adapters are not supported (applying the rest as plain "
           "LoRA would run a different model)");
}

// A tensor of the file in float32, refused when it holds NaN or Inf.
Tensor finite_f32(const io::SafetensorsFile& f, const std::string& file, const std::string& key) {
  const io::TensorInfo& info = f.info(key);
  H3_CHECK(dtype_is_float(info.dtype), ErrorCode::kInvalidFile, file, ": tensor '", key,
           "' has dtype ", dtype_name(info.dtype), ", expected a float type");
  const Tensor raw = f.tensor(key);
  // Owned float32: the mapping is read-only and may go before the adapter does.
  Tensor t = raw.dtype() == DType::kF32 ? raw.clone() : raw.to(DType::kF32);
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    H3_CHECK(std::isfinite(p[i]), ErrorCode::kInvalidFile, file, ": tensor '", key, "' holds ",
             std::isnan(p[i]) ? "NaN" : "Inf", " (element ", i, ")");
  }
  return t;
}

// Rows [a, b) of a CPU float32 matrix, owned.
Tensor rows(const Tensor& t, int64_t a, int64_t b) { return t.slice(0, a, b).contiguous().clone(); }

// [head0: q k v, head1: ...] rows -> [q_all; k_all; v_all].
Tensor deinterleave_qkv(const Tensor& t, int64_t head_dim) {
  const int64_t heads = t.size(0) / (3 * head_dim);
  std::vector<Tensor> parts;
  for (int part = 0; part < 3; ++part)
    for (int64_t h = 0; h < heads; ++h)
      parts.push_back(t.slice(0, (3 * h + part) * head_dim, (3 * h + part + 1) * head_dim));
  return ops::concat(parts, 0);
}

// Splits rows of a source update into the model's modules (`rows_of` per part).
std::vector<std::pair<std::string, Tensor>> split_rows(const Mapped& m, const Tensor& t,
                                                       const DitConfig& c, const std::string& file,
                                                       const std::string& key) {
  if (m.transform == Transform::kNone) return {{m.module, t}};
  if (m.transform == Transform::kSwapHalves) {
    H3_CHECK(t.size(0) % 2 == 0, ErrorCode::kInvalidFile, file, ": tensor '", key, "' has ",
             t.size(0), " rows; a fused SwiGLU fc1 update has an even number ([gate; value])");
    const int64_t half = t.size(0) / 2;
    return {{m.module, ops::concat({t.slice(0, half, 2 * half), t.slice(0, 0, half)}, 0)}};
  }
  const int64_t inner = c.inner_dim();
  H3_CHECK(t.size(0) == 3 * inner, ErrorCode::kInvalidFile, file, ": tensor '", key, "' has ",
           t.size(0), " rows; a fused QKV update of this model has 3 x ", inner);
  const Tensor fused =
      m.transform == Transform::kQkvInterleaved ? deinterleave_qkv(t, c.attention_head_dim) : t;
  const std::string base = m.module.substr(0, m.module.size() - 3);  // "...attn."
  return {{base + "to_q", rows(fused, 0, inner)},
          {base + "to_k", rows(fused, inner, 2 * inner)},
          {base + "to_v", rows(fused, 2 * inner, 3 * inner)}};
}

// Alphas the file declares outside `.alpha` tensors: a PEFT adapter config beside the file, the
// `lora_adapter_metadata` diffusers writes, or a bare `alpha` in the metadata (a network alpha).
struct AlphaConfig {
  std::optional<double> lora_alpha;
  std::vector<std::pair<std::string, double>> alpha_pattern;
  std::optional<double> network_alpha;
  std::string source;
};

double json_number(const nlohmann::json& j, const std::string& what, const std::string& src) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    char* end = nullptr;
    const std::string s = j.get<std::string>();
    const double v = std::strtod(s.c_str(), &end);
    if (end && *end == '\0' && end != s.c_str()) return v;
  }
  fail(ErrorCode::kInvalidFile, src, ": '", what, "' must be a number, got ", j.dump());
}

void read_peft_config(const nlohmann::json& j, const std::string& src, AlphaConfig* a) {
  if (!j.is_object()) return;
  for (const auto& [k, v] : j.items()) {
    // diffusers prefixes the config's keys with the component ("transformer.lora_alpha").
    std::string key = k;
    for (const char* p : {"transformer.", "transformer_ref."})
      if (starts_with(key, p)) key = key.substr(std::string(p).size());
    if (key == "lora_alpha" && !v.is_null()) a->lora_alpha = json_number(v, k, src);
    if (key == "alpha_pattern" && v.is_object())
      for (const auto& [pat, val] : v.items())
        a->alpha_pattern.emplace_back(pat, json_number(val, k + "." + pat, src));
  }
  a->source = src;
}

AlphaConfig alpha_config(const std::string& file, const std::map<std::string, std::string>& meta) {
  AlphaConfig a;
  namespace fs = std::filesystem;
  const fs::path cfg = fs::path(file).parent_path() / "adapter_config.json";
  std::error_code ec;
  if (fs::is_regular_file(cfg, ec)) {
    std::ifstream in(cfg, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    read_peft_config(io::parse_strict_json(reinterpret_cast<const uint8_t*>(text.data()),
                                           text.size(), cfg.string(), "adapter config", 16),
                     cfg.string(), &a);
  }
  if (auto it = meta.find("lora_adapter_metadata"); it != meta.end() && !a.lora_alpha) {
    const std::string label = file + " metadata 'lora_adapter_metadata'";
    read_peft_config(io::parse_strict_json(reinterpret_cast<const uint8_t*>(it->second.data()),
                                           it->second.size(), label, "adapter config", 16),
                     label, &a);
  }
  if (auto it = meta.find("alpha"); it != meta.end()) {
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    H3_CHECK(end && *end == '\0' && end != it->second.c_str() && std::isfinite(v),
             ErrorCode::kInvalidFile, file, ": metadata 'alpha' must be a number, got '",
             it->second, "'");
    a.network_alpha = v;
  }
  return a;
}

// PEFT's alpha_pattern keys name a module, possibly as an anchored regular expression of a plain
// name; they match the module or a suffix of it at a dot.
bool pattern_matches(std::string pat, const std::string& module) {
  if (!pat.empty() && pat.front() == '^') pat.erase(0, 1);
  if (!pat.empty() && pat.back() == '$') pat.pop_back();
  return module == pat || ends_with(module, "." + pat);
}

// The keys of one module of the file.
struct Group {
  std::string partition;
  std::map<std::string, std::string> keys;  // suffix -> key
};

}  // namespace

LoraAdapter read_lora(const std::string& file, const DitConfig& config,
                      const LoraReadOptions& options) {
  const std::shared_ptr<io::SafetensorsFile> f = io::SafetensorsFile::open(file);
  LoraAdapter a;
  a.file = file;

  std::vector<std::string> names;
  for (const io::TensorInfo& info : f->tensors()) names.push_back(info.name);
  bool any_peft_default = false, any_kohya = false, any_flattened = false, any_original = false;
  std::map<std::string, Group> groups;  // module (file naming) + partition -> keys
  std::vector<std::string> order;
  std::vector<std::string> unmatched;
  const std::map<std::string, std::string> flat = flattened_vocabulary(config);
  for (const std::string& key : names) {
    refuse_other_adapter_kinds(file, key);
    KeyParts p;
    if (!split_key(key, &p)) {
      unmatched.push_back(key);
      continue;
    }
    if (p.flattened) {
      auto it = flat.find(p.module);
      if (it == flat.end()) {
        unmatched.push_back(key);
        continue;
      }
      p.module = it->second;
      any_flattened = true;
    }
    any_peft_default |= p.peft_default;
    any_kohya |= p.kohya;
    any_original |= is_original_name(p.module);
    const std::string id = p.partition + "|" + p.module;
    auto [it, fresh] = groups.try_emplace(id);
    if (fresh) {
      it->second.partition = p.partition;
      order.push_back(id);
    }
    H3_CHECK(it->second.keys.emplace(p.suffix, key).second, ErrorCode::kInvalidFile, file,
             ": tensors '", it->second.keys[p.suffix], "' and '", key,
             "' are the same update of one module");
  }
  // DiffSynth-Studio writes the raw checkpoint's per-head interleaved QKV under the original names
  // with PEFT's `.default.` infix; every other producer reorders it as the reference loader does.
  const bool diffsynth = any_original && any_peft_default;
  a.layout = any_flattened      ? "musubi"
             : diffsynth        ? "diffsynth"
             : any_original     ? (any_kohya ? "kohya" : "original")
             : any_kohya        ? "kohya"
             : any_peft_default ? "peft"
                                : "diffusers";

  const AlphaConfig alphas = alpha_config(file, f->metadata());
  bool any_alpha_tensor = false;
  for (const auto& [id, g] : groups) any_alpha_tensor |= g.keys.count("alpha") > 0;

  DitWeights shapes;  // names and shapes only: dit_tensor_ref needs no data
  shapes.blocks.resize(static_cast<size_t>(config.num_layers));
  shapes.refiner.resize(static_cast<size_t>(config.num_refiner_layers));
  auto ref_of = [&](const std::string& name) { return dit_tensor_ref(shapes, config, name); };

  int64_t gate_sets = 0;
  for (const std::string& id : order) {
    const Group& g = groups.at(id);
    const std::string module_in_file = id.substr(id.find('|') + 1);
    const std::string any_key = g.keys.begin()->second;
    bool original = false;
    Mapped m = from_original(module_in_file, diffsynth, &original);
    if (!original) m = {module_in_file, Transform::kNone};
    H3_CHECK(!(starts_with(m.module, "token_refiner.") &&
               m.module.find("to_gate_compress") != std::string::npos),
             ErrorCode::kInvalidFile, file, ": tensor '", any_key,
             "' is a VSA compression gate on the token refiner, which FastH3 does not gate");
    // Which model tensors this module names: a fused QKV module stands for three.
    std::vector<std::string> targets;
    if (m.transform == Transform::kQkv || m.transform == Transform::kQkvInterleaved) {
      const std::string base = m.module.substr(0, m.module.size() - 3);
      targets = {base + "to_q", base + "to_k", base + "to_v"};
    } else {
      targets = {m.module};
    }
    bool known = true;
    for (const std::string& t : targets) known &= ref_of(t + ".weight").tensor != nullptr;
    if (!known) {
      for (const auto& [suffix, key] : g.keys) unmatched.push_back(key);
      continue;
    }
    auto key_of = [&](const char* suffix) -> std::string {
      auto it = g.keys.find(suffix);
      return it == g.keys.end() ? std::string() : it->second;
    };

    // Low-rank pair.
    const std::string ka = key_of("lora_A"), kb = key_of("lora_B"), kalpha = key_of("alpha");
    H3_CHECK(ka.empty() == kb.empty(), ErrorCode::kInvalidFile, file, ": tensor '",
             ka.empty() ? kb : ka, "' has no matching ",
             ka.empty() ? "lora_A/lora_down" : "lora_B/lora_up", " tensor for module '",
             module_in_file, "'");
    H3_CHECK(!kalpha.empty() ? !ka.empty() : true, ErrorCode::kInvalidFile, file, ": tensor '",
             kalpha, "' is an alpha for module '", module_in_file, "', which has no lora_A/lora_B");
    if (!ka.empty()) {
      const Tensor down = finite_f32(*f, file, ka);
      const Tensor up = finite_f32(*f, file, kb);
      H3_CHECK(down.dim() == 2 && up.dim() == 2, ErrorCode::kInvalidFile, file, ": tensors '", ka,
               "' ", shape_str(down.shape()), " and '", kb, "' ", shape_str(up.shape()),
               ": expected matrices A [rank, in] and B [out, rank]");
      const int64_t r = down.size(0);
      H3_CHECK(up.size(1) == r && r > 0, ErrorCode::kInvalidFile, file, ": rank mismatch: '", ka,
               "' has rank ", r, " ", shape_str(down.shape()), " but '", kb, "' has rank ",
               up.size(1), " ", shape_str(up.shape()));
      double alpha = static_cast<double>(r);
      if (!kalpha.empty()) {
        const Tensor at = finite_f32(*f, file, kalpha);
        H3_CHECK(at.numel() == 1, ErrorCode::kInvalidFile, file, ": tensor '", kalpha, "' ",
                 shape_str(at.shape()), ": expected one value");
        alpha = at.data<float>()[0];
      } else {
        bool found = false;
        for (const auto& [pat, v] : alphas.alpha_pattern) {
          if (pattern_matches(pat, module_in_file) || pattern_matches(pat, m.module)) {
            alpha = v;
            found = true;
            break;
          }
        }
        if (!found && alphas.lora_alpha)
          alpha = *alphas.lora_alpha;
        else if (!found && alphas.network_alpha && !any_alpha_tensor)
          alpha = *alphas.network_alpha;
      }
      const Tensor up_scaled = ops::scale(up, static_cast<float>(alpha / static_cast<double>(r)));
      const auto parts = split_rows(m, up_scaled, config, file, kb);
      for (const auto& [target, b] : parts) {
        const DitTensorRef ref = ref_of(target + ".weight");
        H3_CHECK(ref.lora != nullptr, ErrorCode::kInvalidFile, file, ": tensor '", kb,
                 "' is a low-rank update of '", target, "', which is not a linear layer");
        H3_CHECK(b.size(0) == ref.shape[0] && down.size(1) == ref.shape[1], ErrorCode::kInvalidFile,
                 file, ": tensors '", ka, "' ", shape_str(down.shape()), " and '", kb, "' ",
                 shape_str(up.shape()), " do not fit '", target, ".weight' ", shape_str(ref.shape),
                 " (A must be [rank, ", ref.shape[1], "], B [",
                 ref.shape[0] * static_cast<int64_t>(parts.size()), ", rank])");
        LoraUpdate u;
        u.target = target + ".weight";
        u.kind = LoraUpdateKind::kLowRank;
        u.down = down;
        u.up = b;
        u.rank = r;
        u.alpha = alpha;
        u.source = kb;
        u.partition = g.partition;
        a.updates.push_back(std::move(u));
      }
    }

    // Whole-tensor updates.
    for (const char* suffix : {"diff", "diff_b", "set_weight"}) {
      const std::string key = key_of(suffix);
      if (key.empty()) continue;
      const bool bias = std::string(suffix) == "diff_b";
      Tensor t = finite_f32(*f, file, key);
      if (bias) {
        H3_CHECK(t.dim() == 1, ErrorCode::kInvalidFile, file, ": tensor '", key, "' ",
                 shape_str(t.shape()), " is a bias update; expected one dimension");
        H3_CHECK(m.transform == Transform::kNone || m.transform == Transform::kSwapHalves,
                 ErrorCode::kInvalidFile, file, ": tensor '", key,
                 "' is a bias update of a fused QKV projection, which has no bias");
        // A [gate; value] bias swaps like the weight's rows.
        if (m.transform == Transform::kSwapHalves) t = t.view({t.numel(), 1});
      }
      const auto parts = split_rows(m, t, config, file, key);
      for (auto [target, d] : parts) {
        const std::string name = target + (bias ? ".bias" : ".weight");
        const DitTensorRef ref = ref_of(name);
        if (!ref.tensor) {
          unmatched.push_back(key);
          continue;
        }
        if (bias) d = d.reshape({d.numel()});
        H3_CHECK(d.shape() == ref.shape, ErrorCode::kInvalidFile, file, ": tensor '", key, "' ",
                 shape_str(t.shape()), " does not fit '", name, "' ", shape_str(ref.shape));
        LoraUpdate u;
        u.target = name;
        u.kind = std::string(suffix) == "set_weight" ? LoraUpdateKind::kSet : LoraUpdateKind::kDiff;
        u.dense = d.is_contiguous() ? d : d.contiguous();
        u.source = key;
        u.partition = g.partition;
        if (u.kind == LoraUpdateKind::kSet && ends_with(name, "attn.to_gate_compress.weight"))
          ++gate_sets;
        a.updates.push_back(std::move(u));
      }
    }
  }

  if (!unmatched.empty()) {
    std::string list;
    for (size_t i = 0; i < unmatched.size() && i < 5; ++i) list += (i ? ", " : "") + unmatched[i];
    if (unmatched.size() > 5) list += str_cat(", ... (", unmatched.size(), " in all)");
    H3_CHECK(options.allow_unmatched, ErrorCode::kInvalidFile, file, ": ", unmatched.size(),
             " tensor(s) match no module of a MiniMax-H3 transformer with ", config.num_layers,
             " blocks and ", config.num_refiner_layers,
             " refiner blocks (--lora-allow-unmatched skips them): ", list);
    H3_LOG_WARN(file, ": skipping ", unmatched.size(), " tensor(s) that match no module: ", list);
    a.unmatched = std::move(unmatched);
  }
  // §5.6: a FastH3 student gates every main block; a partial set is not a model we know.
  H3_CHECK(gate_sets == 0 || gate_sets == config.num_layers, ErrorCode::kUnsupported, file, ": ",
           gate_sets, " of ", config.num_layers,
           " blocks get a VSA compression gate (attn.to_gate_compress.set_weight); expected all or "
           "none");
  a.sets_vsa_gates = gate_sets > 0;
  H3_CHECK(!a.updates.empty() || !a.unmatched.empty(), ErrorCode::kInvalidFile, file,
           ": holds no LoRA or whole-tensor update (expected keys ending in lora_A/lora_B, "
           "lora_down/lora_up, .diff, .diff_b or .set_weight)");
  return a;
}

std::string describe_lora(const LoraAdapter& a) {
  std::ostringstream o;
  o << a.file << "\n  layout: " << a.layout << "\n";
  // Module families: what part of the model the updates touch.
  auto family = [](const std::string& t) -> std::string {
    std::string f = t;
    for (const char* p : {"transformer_blocks.", "token_refiner.refiner_blocks."}) {
      if (starts_with(f, p)) {
        const size_t dot = f.find('.', std::string(p).size());
        f = std::string(p) + "*" + f.substr(dot);
      }
    }
    return f;
  };
  std::map<std::string, std::map<std::string, int64_t>> counts;  // family -> kind -> n
  std::map<std::string, std::set<std::pair<int64_t, double>>> ranks;
  std::set<std::string> partitions;
  for (const LoraUpdate& u : a.updates) {
    counts[family(u.target)][lora_update_kind_name(u.kind)]++;
    if (u.kind == LoraUpdateKind::kLowRank) ranks[family(u.target)].insert({u.rank, u.alpha});
    partitions.insert(u.partition.empty() ? "any" : u.partition);
  }
  o << "  updates: " << a.updates.size() << " tensor(s)";
  if (partitions.size() > 1 || !partitions.count("any")) {
    o << ", partitions:";
    for (const std::string& p : partitions) o << " " << p;
  }
  o << "\n";
  for (const auto& [fam, kinds] : counts) {
    o << "    " << fam << ":";
    for (const auto& [kind, n] : kinds) o << " " << n << " " << kind;
    if (auto it = ranks.find(fam); it != ranks.end()) {
      o << " (rank/alpha";
      for (const auto& [r, al] : it->second) o << " " << r << "/" << al;
      o << ")";
    }
    o << "\n";
  }
  if (a.sets_vsa_gates)
    o << "  sets every block's FastH3 gate: the model runs as a FastH3 student\n";
  if (!a.unmatched.empty()) {
    o << "  unmatched (skipped): " << a.unmatched.size() << "\n";
    for (const std::string& k : a.unmatched) o << "    " << k << "\n";
  }
  return o.str();
}

// ---- applying
// ---------------------------------------------------------------------------------------

namespace {

// Every run-time pair list of the model (to clear them).
std::vector<RuntimeLora*> all_runtime_lists(DitWeights& w) {
  std::vector<RuntimeLora*> v = {&w.proj_in_lora, &w.audio_proj_in_lora, &w.time_1_lora,
                                 &w.time_2_lora,  &w.proj_out_lora,      &w.audio_proj_out_lora,
                                 &w.context_lora, &w.norm_out_lora};
  auto body = [&](DitAttentionWeights& at, DitFeedForwardWeights& ff) {
    for (RuntimeLora* l : {&at.to_q_lora, &at.to_k_lora, &at.to_v_lora, &at.to_out_lora,
                           &at.to_gate_lora, &ff.fc_in_lora, &ff.fc_out_lora})
      v.push_back(l);
  };
  for (DitRefinerBlockWeights& b : w.refiner) body(b.attn, b.ff);
  for (DitBlockWeights& b : w.blocks) {
    body(b.attn, b.ff);
    v.push_back(&b.adaln_lora);
  }
  return v;
}

// A host copy that does not alias `t` (to() returns the tensor itself on its own device).
Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? t.clone() : t.to(Device::cpu()); }

// Gives `dst` the values of `src` in dst's dtype. Device tensors and the pinned buffers of streamed
// blocks (which the layer stream reads) are written in place; other host tensors may be views of
// the checkpoint's read-only mapping, so they are replaced by a new tensor instead.
void overwrite(Tensor& dst, const Tensor& src, bool in_place_host) {
  const Tensor s = src.dtype() == dst.dtype() ? src : ops::cast(src, dst.dtype());
  if (dst.device().is_cuda()) {
    ops::copy_into(dst, s.to(dst.device()));
  } else if (in_place_host) {
    dst.copy_from(s.to(Device::cpu()));
  } else {
    dst = s.to(Device::cpu()).clone();
  }
}

int64_t block_of(const std::string& name) {
  static const std::string p = "transformer_blocks.";
  if (!starts_with(name, p)) return -1;
  return std::atoll(name.c_str() + p.size());
}

}  // namespace

void DitModel::apply_loras(const std::vector<ScaledLora>& adapters, LoraMode mode, bool restorable,
                           const std::string& partition) {
  if (has_loras()) remove_loras();
  struct Planned {
    DitTensorRef ref;
    std::vector<std::pair<const LoraUpdate*, float>> fused, runtime;
    const LoraAdapter* first = nullptr;
  };
  std::vector<std::string> order;
  std::map<std::string, Planned> plan;
  std::vector<std::string> applied;
  for (const ScaledLora& sl : adapters) {
    H3_CHECK(sl.adapter != nullptr, ErrorCode::kInternal, "apply_loras: null adapter");
    if (sl.scale == 0.0f) continue;  // adds nothing; skipping keeps the weights' bytes as loaded
    const LoraAdapter& a = *sl.adapter;
    for (const LoraUpdate& u : a.updates) {
      if (!u.partition.empty() && u.partition != partition) continue;
      auto [it, fresh] = plan.try_emplace(u.target);
      Planned& p = it->second;
      if (fresh) {
        p.ref = dit_tensor_ref(weights_, config_, u.target);
        p.first = &a;
        order.push_back(u.target);
      }
      // The adapter was read against a config; this model's must give the same shapes.
      H3_CHECK(p.ref.tensor != nullptr, ErrorCode::kInvalidArgument, a.file, ": tensor '", u.source,
               "' updates '", u.target, "', which this transformer does not have");
      const bool fits = u.kind == LoraUpdateKind::kLowRank
                            ? u.up.size(0) == p.ref.shape[0] && u.down.size(1) == p.ref.shape[1]
                            : u.dense.shape() == p.ref.shape;
      H3_CHECK(fits, ErrorCode::kInvalidArgument, a.file, ": tensor '", u.source,
               "' does not fit '", u.target, "' ", shape_str(p.ref.shape), " of this transformer");
      const bool runtime = u.kind == LoraUpdateKind::kLowRank && mode == LoraMode::kRuntime;
      (runtime ? p.runtime : p.fused).push_back({&u, sl.scale});
    }
    applied.push_back(str_cat(a.file, "@", sl.scale));
  }
  // Checks before the first tensor changes.
  for (const std::string& name : order) {
    const Planned& p = plan.at(name);
    H3_CHECK(p.fused.empty() || !p.ref.tensor->defined() || p.ref.tensor->dtype() != DType::kF8E4M3,
             ErrorCode::kUnsupported, p.first->file, ": rewrites '", name,
             "', an FP8 (E4M3) weight (--dit-dtype fp8); low-rank adapters apply to FP8 weights ",
             "with --lora-mode runtime, other kinds need --dit-dtype bf16");
    if (p.ref.tensor->defined()) continue;
    // Only gates can be absent: created by a set_weight, which must come first.
    H3_CHECK(!p.fused.empty() && p.fused.front().first->kind == LoraUpdateKind::kSet,
             ErrorCode::kUnsupported, p.first->file, ": updates '", name,
             "', a FastH3 gate this transformer does not have (apply the adapter that sets the "
             "gates first, or use the student's checkpoint)");
    const int64_t blk = block_of(name);
    H3_CHECK(blk < resident_blocks_, ErrorCode::kUnsupported, p.first->file,
             ": creates the FastH3 gate of DiT block ", blk,
             ", which streams from host memory; adapters that add gates need every block resident "
             "(drop --cpu-offload)");
  }

  LoraState state;
  state.mode = mode;
  state.restorable = restorable;
  for (const std::string& name : order) {
    Planned& p = plan.at(name);
    Tensor& w = *p.ref.tensor;
    if (!p.fused.empty()) {
      const Device dev = w.defined() ? w.device() : options_.device;
      const DType dt = w.defined() ? w.dtype() : act_;
      if (restorable) state.originals.emplace_back(name, w.defined() ? host_copy(w) : Tensor());
      state.fused_any = true;
      state.gates_created |= !w.defined();
      // float32 accumulation, one rounding to the weight's dtype at the end.
      Tensor acc =
          w.defined() ? ops::cast(w, DType::kF32) : Tensor::zeros(p.ref.shape, DType::kF32, dev);
      for (const auto& [u, s] : p.fused) {
        switch (u->kind) {
          case LoraUpdateKind::kLowRank: {
            const Tensor up = ops::scale(u->up.to(dev), s);
            const Tensor delta = ops::matmul(up.view({1, up.size(0), up.size(1)}), u->down.to(dev));
            acc = ops::add(acc, delta.view(p.ref.shape));
            break;
          }
          case LoraUpdateKind::kDiff:
            acc = ops::add(acc, ops::scale(u->dense.to(dev), s));
            break;
          case LoraUpdateKind::kSet:
            // s = 1 is an exact replacement; acc + (S - acc) would round.
            acc = s == 1.0f ? u->dense.to(dev)
                            : ops::add(ops::scale(acc, 1.0f - s), ops::scale(u->dense.to(dev), s));
            break;
        }
      }
      if (w.defined()) {
        overwrite(w, acc, block_of(name) >= resident_blocks_);
      } else {
        // A copy: the cast of a float32 set_weight may be the adapter's own tensor.
        w = ops::copy(ops::cast(acc, dt));
      }
    }
    for (const auto& [u, s] : p.runtime) {
      const Device dev = options_.device;
      const DType dt = p.ref.fp32_island ? DType::kF32 : act_;
      LowRankPair pair;
      pair.down = ops::cast(u->down.to(dev), dt);
      pair.up = ops::cast(ops::scale(u->up.to(dev), s), dt);
      p.ref.lora->push_back(std::move(pair));
    }
  }
  bool all_gates = !weights_.blocks.empty();
  for (const DitBlockWeights& b : weights_.blocks) all_gates &= b.attn.to_gate.defined();
  weights_.has_vsa_gates = all_gates;
  state.applied = std::move(applied);
  lora_state_ = std::move(state);
}

void DitModel::remove_loras() {
  LoraState& st = lora_state_;
  H3_CHECK(st.restorable || !st.fused_any, ErrorCode::kUnsupported,
           "the transformer's LoRA adapters were fused without keeping the original weights; "
           "reload the transformer to remove them");
  // Newest first, so a tensor listed twice ends as it was loaded.
  for (auto it = st.originals.rbegin(); it != st.originals.rend(); ++it) {
    const DitTensorRef ref = dit_tensor_ref(weights_, config_, it->first);
    H3_CHECK(ref.tensor != nullptr, ErrorCode::kInternal, "remove_loras: no tensor ", it->first);
    if (!it->second.defined()) {
      *ref.tensor = Tensor();  // a gate the adapters created
    } else {
      overwrite(*ref.tensor, it->second, block_of(it->first) >= resident_blocks_);
    }
  }
  for (RuntimeLora* l : all_runtime_lists(weights_)) l->clear();
  bool all_gates = !weights_.blocks.empty();
  for (const DitBlockWeights& b : weights_.blocks) all_gates &= b.attn.to_gate.defined();
  weights_.has_vsa_gates = all_gates;
  lora_state_ = LoraState{};
}

std::string DitModel::applied_loras() const {
  if (lora_state_.applied.empty()) return "";
  std::string s;
  for (const std::string& a : lora_state_.applied) s += (s.empty() ? "" : ", ") + a;
  return s + " (" + lora_mode_name(lora_state_.mode) + ")";
}

bool DitModel::loras_restorable() const { return lora_state_.restorable || !lora_state_.fused_any; }

}  // namespace h3::dit
