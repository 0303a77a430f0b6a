// LoRA adapters (dit_lora.h, DitModel::apply_loras) on a small random DiT written here, so that the
// tests run without the golden folder:
//  - every file layout the reader knows (diffusers, PEFT, original MiniMax names, DiffSynth, kohya,
//    musubi) is written with random factors, read, fused, and each touched weight compared with
//    W + s (alpha / r) B A computed here in float64 from the file's own tensors, the layout's
//    transforms (QKV split, per-head de-interleave, fc1 half swap) done by hand with plain loops;
//    every other tensor must keep its bits;
//  - scale 0 and B = 0 leave the forward's bytes alone, fused and run-time forwards agree, two
//    adapters add, remove_loras restores every bit;
//  - whole-tensor updates (.diff, .diff_b, .set_weight) and the FastH3 gates they can create;
//  - the refusals, each with its error code and a message naming the file and the key;
//  - partition prefixes (`transformer.` / `transformer_ref.`).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "models/h3_dit/dit_lora.h"
#include "models/h3_dit/dit_model.h"
#include "support/golden.h"
#include "support/small_dit.h"
#include "support/temp_dir.h"

namespace h3::dit {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfig = test::kSmallDitConfig;
using test::random_tensor;

// ---- the model's tensors by name, mapped here independently of dit_tensor_ref -------------------

template <typename Body>
const Tensor* body_tensor(const Body& b, const std::string& rest) {
  if (rest == "norm1.weight") return &b.norm1;
  if (rest == "norm2.weight") return &b.norm2;
  if (rest == "attn.to_q.weight") return &b.attn.to_q;
  if (rest == "attn.to_k.weight") return &b.attn.to_k;
  if (rest == "attn.to_v.weight") return &b.attn.to_v;
  if (rest == "attn.norm_q.weight") return &b.attn.norm_q;
  if (rest == "attn.norm_k.weight") return &b.attn.norm_k;
  if (rest == "attn.to_out.0.weight") return &b.attn.to_out;
  if (rest == "ff.net.0.proj.weight") return &b.ff.fc_in;
  if (rest == "ff.net.2.weight") return &b.ff.fc_out;
  return nullptr;
}

template <typename Body>
const RuntimeLora* body_pairs(const Body& b, const std::string& rest) {
  if (rest == "attn.to_q.weight") return &b.attn.to_q_lora;
  if (rest == "attn.to_k.weight") return &b.attn.to_k_lora;
  if (rest == "attn.to_v.weight") return &b.attn.to_v_lora;
  if (rest == "attn.to_out.0.weight") return &b.attn.to_out_lora;
  if (rest == "ff.net.0.proj.weight") return &b.ff.fc_in_lora;
  if (rest == "ff.net.2.weight") return &b.ff.fc_out_lora;
  return nullptr;
}

struct NameParts {
  int kind = 0;  // 0 global, 1 main block, 2 refiner block
  size_t index = 0;
  std::string rest;
};

NameParts split_name(const std::string& name) {
  static const std::regex block(R"(transformer_blocks\.(\d+)\.(.+))");
  static const std::regex refiner(R"(token_refiner\.refiner_blocks\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(name, m, block)) return {1, std::stoul(m[1].str()), m[2].str()};
  if (std::regex_match(name, m, refiner)) return {2, std::stoul(m[1].str()), m[2].str()};
  return {0, 0, name};
}

const Tensor* find_weight(const DitWeights& w, const std::string& name) {
  const NameParts p = split_name(name);
  if (p.kind == 1) {
    if (p.index >= w.blocks.size()) return nullptr;
    const DitBlockWeights& b = w.blocks[p.index];
    if (p.rest == "adaln_proj.linear.weight") return &b.adaln_w;
    if (p.rest == "adaln_proj.linear.bias") return &b.adaln_b;
    if (p.rest == "attn.to_gate_compress.weight") return &b.attn.to_gate;
    return body_tensor(b, p.rest);
  }
  if (p.kind == 2)
    return p.index < w.refiner.size() ? body_tensor(w.refiner[p.index], p.rest) : nullptr;
  const std::pair<const char*, const Tensor*> globals[] = {
      {"proj_in.weight", &w.proj_in_w},
      {"proj_in.bias", &w.proj_in_b},
      {"audio_proj_in.weight", &w.audio_proj_in_w},
      {"audio_proj_in.bias", &w.audio_proj_in_b},
      {"context_embedder.weight", &w.context_w},
      {"context_embedder.bias", &w.context_b},
      {"time_embedder.linear_1.weight", &w.time_1_w},
      {"time_embedder.linear_1.bias", &w.time_1_b},
      {"time_embedder.linear_2.weight", &w.time_2_w},
      {"time_embedder.linear_2.bias", &w.time_2_b},
      {"token_refiner.final_norm.weight", &w.refiner_final_norm},
      {"norm_out.norm.weight", &w.norm_out_norm},
      {"norm_out.linear.weight", &w.norm_out_w},
      {"norm_out.linear.bias", &w.norm_out_b},
      {"proj_out.weight", &w.proj_out_w},
      {"proj_out.bias", &w.proj_out_b},
      {"audio_proj_out.weight", &w.audio_proj_out_w},
      {"audio_proj_out.bias", &w.audio_proj_out_b},
  };
  for (const auto& [n, t] : globals) {
    if (name == n) return t;
  }
  return nullptr;
}

const RuntimeLora* find_pairs(const DitWeights& w, const std::string& name) {
  const NameParts p = split_name(name);
  if (p.kind == 1) {
    const DitBlockWeights& b = w.blocks.at(p.index);
    if (p.rest == "adaln_proj.linear.weight") return &b.adaln_lora;
    if (p.rest == "attn.to_gate_compress.weight") return &b.attn.to_gate_lora;
    return body_pairs(b, p.rest);
  }
  if (p.kind == 2) return body_pairs(w.refiner.at(p.index), p.rest);
  const std::pair<const char*, const RuntimeLora*> globals[] = {
      {"proj_in.weight", &w.proj_in_lora},
      {"audio_proj_in.weight", &w.audio_proj_in_lora},
      {"context_embedder.weight", &w.context_lora},
      {"time_embedder.linear_1.weight", &w.time_1_lora},
      {"time_embedder.linear_2.weight", &w.time_2_lora},
      {"norm_out.linear.weight", &w.norm_out_lora},
      {"proj_out.weight", &w.proj_out_lora},
      {"audio_proj_out.weight", &w.audio_proj_out_lora},
  };
  for (const auto& [n, l] : globals) {
    if (name == n) return l;
  }
  return nullptr;
}

// Every tensor name of the model of `config`, the gates included.
std::vector<std::string> all_names(const DitConfig& config) {
  std::vector<std::string> names;
  for (const DitTensorSpec& s : dit_tensor_specs(config)) names.push_back(s.name);
  for (int64_t i = 0; i < config.num_layers; ++i) names.push_back(dit_gate_spec(config, i).name);
  return names;
}

Shape spec_shape(const DitConfig& config, const std::string& name) {
  for (const DitTensorSpec& s : dit_tensor_specs(config)) {
    if (s.name == name) return s.shape;
  }
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const DitTensorSpec g = dit_gate_spec(config, i);
    if (g.name == name) return g.shape;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// Host copies of every defined tensor of a model (undefined tensors are kept undefined).
using Snapshot = std::map<std::string, Tensor>;
Snapshot snapshot(const DitModel& m) {
  Snapshot s;
  for (const std::string& n : all_names(m.config())) {
    const Tensor* t = find_weight(m.weights(), n);
    EXPECT_NE(t, nullptr) << n;
    if (t) s[n] = t->defined() ? t->clone() : Tensor();
  }
  return s;
}

// ---- adapters written here, with the update each one should make ------------------------------

// How the rows of a file's B (or dense tensor) land in the model's tensors.
enum class Rows {
  kPlain,           // one target, same rows
  kQkv,             // fused [q_all; k_all; v_all] -> to_q, to_k, to_v (thirds)
  kQkvInterleaved,  // [head0: q k v, head1: ...] -> to_q, to_k, to_v
  kFc1,             // [gate; value] -> ff.net.0.proj [value; gate]
};

// What one adapter does to one tensor at unit scale: delta (low-rank and diff updates, summed) and
// the magnitude of the terms that make it (the float32 rounding bound is relative to that).
struct Expect {
  std::vector<double> delta, magnitude;
  std::vector<double> set;  // a .set_weight replacement (empty: none)
};

class AdapterFile {
 public:
  AdapterFile(const DitConfig& config, uint32_t seed) : c_(config), rng_(seed) {}

  // A low-rank pair under keys `a_key` / `b_key`. `target` is the model module: for kPlain and
  // kFc1 the module whose `.weight` is updated, for the QKV forms the attention ("...attn").
  // `factor` is the alpha / r the reader must find for this pair.
  void low_rank(const std::string& a_key, const std::string& b_key, Rows rows,
                const std::string& target, int64_t rank, double factor, DType dtype = DType::kF32,
                float b_stddev = 0.05f) {
    const std::vector<std::string> targets = targets_of(rows, target);
    const Shape t0 = spec_shape(c_, targets[0]);
    const int64_t in = t0[1];
    const int64_t out = rows == Rows::kPlain ? t0[0] : (rows == Rows::kFc1 ? t0[0] : 3 * t0[0]);
    const Tensor a = random_tensor({rank, in}, rng_, 0.0f, 1.0f, dtype);
    const Tensor b = random_tensor({out, rank}, rng_, 0.0f, b_stddev, dtype);
    tensors_.push_back({a_key, a});
    tensors_.push_back({b_key, b});
    const std::vector<double> av = a.to_f64_vector(), bv = b.to_f64_vector();
    for (size_t p = 0; p < targets.size(); ++p) {
      Expect& e = slot(targets[p]);
      const int64_t target_rows = spec_shape(c_, targets[p])[0];
      for (int64_t row = 0; row < target_rows; ++row) {
        const int64_t src = file_row(rows, static_cast<int64_t>(p), row, target_rows);
        for (int64_t j = 0; j < in; ++j) {
          double sum = 0, mag = 0;
          for (int64_t k = 0; k < rank; ++k) {
            const double term =
                bv[static_cast<size_t>(src * rank + k)] * av[static_cast<size_t>(k * in + j)];
            sum += term;
            mag += std::fabs(term);
          }
          e.delta[static_cast<size_t>(row * in + j)] += factor * sum;
          e.magnitude[static_cast<size_t>(row * in + j)] += std::fabs(factor) * mag;
        }
      }
    }
  }

  // A whole-tensor update under `key` of the model tensor `target` (full name, ".weight"/".bias").
  void diff(const std::string& key, const std::string& target, DType dtype = DType::kF32,
            float stddev = 0.05f) {
    const Tensor d = random_tensor(spec_shape(c_, target), rng_, 0.0f, stddev, dtype);
    tensors_.push_back({key, d});
    Expect& e = slot(target);
    const std::vector<double> v = d.to_f64_vector();
    for (size_t i = 0; i < v.size(); ++i) {
      e.delta[i] += v[i];
      e.magnitude[i] += std::fabs(v[i]);
    }
  }
  void set_weight(const std::string& key, const std::string& target, DType dtype = DType::kF32,
                  float mean = 0.0f, float stddev = 0.2f) {
    const Tensor s = random_tensor(spec_shape(c_, target), rng_, mean, stddev, dtype);
    tensors_.push_back({key, s});
    slot(target).set = s.to_f64_vector();
  }
  // A raw tensor (alphas, refusal cases).
  void raw(const std::string& key, const Tensor& t) { tensors_.push_back({key, t}); }
  void alpha(const std::string& key, float value, DType dtype = DType::kF32) {
    tensors_.push_back({key, Tensor::from_f32({value}, {}, dtype)});
  }

  std::string write(const fs::path& path,
                    const std::map<std::string, std::string>& meta = {}) const {
    fs::create_directories(path.parent_path());
    io::write_safetensors(path.string(), tensors_, meta);
    return path.string();
  }

  const std::map<std::string, Expect>& expects() const { return expects_; }
  std::vector<io::NamedTensor>& tensors() { return tensors_; }

 private:
  std::vector<std::string> targets_of(Rows rows, const std::string& target) const {
    if (rows == Rows::kQkv || rows == Rows::kQkvInterleaved)
      return {target + ".to_q.weight", target + ".to_k.weight", target + ".to_v.weight"};
    return {target + ".weight"};
  }
  // The row of the file's B that lands on row `row` of target `part`.
  int64_t file_row(Rows rows, int64_t part, int64_t row, int64_t target_rows) const {
    switch (rows) {
      case Rows::kPlain:
        return row;
      case Rows::kQkv:
        return part * target_rows + row;
      case Rows::kQkvInterleaved: {
        const int64_t hd = c_.attention_head_dim, head = row / hd, d = row % hd;
        return head * 3 * hd + part * hd + d;
      }
      case Rows::kFc1: {
        // The model holds [value; gate], the file [gate; value].
        const int64_t half = target_rows / 2;
        return row < half ? row + half : row - half;
      }
    }
    return row;
  }
  Expect& slot(const std::string& target) {
    Expect& e = expects_[target];
    if (e.delta.empty()) {
      const size_t n = static_cast<size_t>(shape_numel(spec_shape(c_, target)));
      e.delta.assign(n, 0.0);
      e.magnitude.assign(n, 0.0);
    }
    return e;
  }

  DitConfig c_;
  std::mt19937 rng_;
  std::vector<io::NamedTensor> tensors_;
  std::map<std::string, Expect> expects_;
};

struct Applied {
  const AdapterFile* file;
  double scale;
};

// Compares every tensor of `m` with `before` plus the updates of `applied` (in order). Targets of
// a float32 tensor: |got - expected| <= 1e-5 (|W| + sum |s| |terms|). The reader multiplies B by
// alpha / r and the fuse adds s B A to W, all in float32: a handful of roundings of at most 2^-24
// each, relative to the magnitude of the terms of the sum, below 1e-6 for rank <= 8 whatever order
// the sum runs in; 1e-5 leaves room for any summation order and is still four orders below the
// size of an update sent to the wrong rows (the updates are 10-100 % of |W|). A bf16 tensor adds
// the one rounding of the result to bf16 (at most 2^-9 of |expected|, 2^-8 allowed for the float32
// error sitting on a tie). Every other tensor keeps its bits.
void expect_updated(const DitModel& m, const Snapshot& before, const std::vector<Applied>& applied,
                    const std::string& what) {
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> want;  // value, mag
  for (const Applied& a : applied) {
    for (const auto& [name, e] : a.file->expects()) {
      auto it = want.find(name);
      if (it == want.end()) {
        const Tensor& w = before.at(name);
        std::vector<double> v =
            w.defined() ? w.to_f64_vector() : std::vector<double>(e.set.size(), 0.0);
        std::vector<double> mag(v.size());
        for (size_t i = 0; i < v.size(); ++i) mag[i] = std::fabs(v[i]);
        it = want.emplace(name, std::make_pair(std::move(v), std::move(mag))).first;
      }
      auto& [v, mag] = it->second;
      if (!e.set.empty()) {
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] += a.scale * (e.set[i] - v[i]);
          mag[i] = std::fabs(v[i]) + std::fabs(a.scale) * (std::fabs(e.set[i]) + mag[i]);
        }
      }
      for (size_t i = 0; i < e.delta.size(); ++i) {
        v[i] += a.scale * e.delta[i];
        mag[i] += std::fabs(a.scale) * e.magnitude[i];
      }
    }
  }
  int64_t checked = 0;
  for (const auto& [name, old] : before) {
    const Tensor* t = find_weight(m.weights(), name);
    ASSERT_NE(t, nullptr) << name;
    auto it = want.find(name);
    if (it == want.end()) {
      ASSERT_EQ(t->defined(), old.defined()) << what << ": " << name;
      if (!old.defined()) continue;
      std::string first;
      EXPECT_EQ(test::count_bit_mismatches(*t, old, &first), 0)
          << what << ": " << name << " is no target of the adapters but changed: " << first;
      continue;
    }
    ASSERT_TRUE(t->defined()) << what << ": " << name;
    if (old.defined()) {
      EXPECT_EQ(t->dtype(), old.dtype()) << what << ": " << name;
    }
    const std::vector<double> got = t->to_f64_vector();
    const auto& [v, mag] = it->second;
    ASSERT_EQ(got.size(), v.size()) << name;
    const bool bf16 = t->dtype() == DType::kBF16;
    double worst = 0;  // the largest error as a fraction of its bound
    size_t worst_i = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const double bound = 1e-5 * mag[i] + (bf16 ? std::ldexp(std::fabs(v[i]), -8) : 0.0) + 1e-30;
      const double r = std::fabs(got[i] - v[i]) / bound;
      if (r > worst) {
        worst = r;
        worst_i = i;
      }
    }
    EXPECT_LE(worst, 1.0) << what << ": " << name << " element " << worst_i << " is "
                          << got[worst_i] << ", expected " << v[worst_i] << " (terms of magnitude "
                          << mag[worst_i] << ")";
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int64_t>(want.size())) << what;
  std::printf("  %s: %lld updated tensors within the bound, %zu others bit for bit\n", what.c_str(),
              static_cast<long long>(checked), before.size() - want.size());
}

// Expects an h3::Error of `code` whose message names `file` and `key`.
template <typename Fn>
void expect_lora_error(Fn fn, ErrorCode code, const std::string& file, const std::string& key) {
  try {
    fn();
    ADD_FAILURE() << "expected an error naming '" << key << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "got " << error_code_name(e.code()) << ": " << e.what();
    EXPECT_NE(e.message().find(file), std::string::npos) << "the file is not named: " << e.what();
    EXPECT_NE(e.message().find(key), std::string::npos)
        << "'" << key << "' is not named: " << e.what();
    std::printf("  error: %s\n", e.what());
  }
}

std::string attn(int64_t block) { return "transformer_blocks." + std::to_string(block) + ".attn"; }

// ---- the fixture: a random checkpoint of kConfig written to a temporary folder -----------------

class LoraDit : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = DitConfig::from_json(nlohmann::json::parse(kConfig), "config.json");
    model_dir_ = tmp_.path() / "transformer";
    fs::create_directories(model_dir_);
    std::mt19937 rng(1234);
    std::vector<io::NamedTensor> tensors;
    for (const DitTensorSpec& s : dit_tensor_specs(config_)) {
      const bool is_norm = s.name.find("norm") != std::string::npos && s.shape.size() == 1 &&
                           s.name.find("linear") == std::string::npos;
      const bool is_bias = s.name.find(".bias") != std::string::npos;
      const float fan_in = s.shape.size() == 2 ? static_cast<float>(s.shape[1]) : 1.0f;
      const DType dt = s.fp32_island ? DType::kF32 : DType::kBF16;
      if (is_norm) {
        tensors.push_back({s.name, random_tensor(s.shape, rng, 1.0f, 0.1f, dt)});
      } else if (is_bias) {
        tensors.push_back({s.name, random_tensor(s.shape, rng, 0.0f, 0.1f, dt)});
      } else {
        tensors.push_back(
            {s.name, random_tensor(s.shape, rng, 0.0f, 1.0f / std::sqrt(fan_in), dt)});
      }
    }
    std::ofstream(model_dir_ / "config.json") << kConfig;
    io::write_safetensors((model_dir_ / "diffusion_pytorch_model.safetensors").string(), tensors);
  }

  DitModel load(DitPrecision precision = DitPrecision::kF32) const {
    return DitModel::load(model_dir_.string(), {Device::cpu(), precision, DitRounding::kEager});
  }
  fs::path path(const std::string& rel) const { return tmp_.path() / rel; }

  // A small packed sequence: 5 text rows, 6 video rows (2 condition), 4 audio rows, three
  // timesteps (the one of test_dit_model.cpp).
  static DitInputs inputs() {
    std::mt19937 rng(99);
    DitInputs in;
    const int64_t nt = 5, nv = 6, na = 4, s = nt + nv + na;
    in.encoder_hidden_states = random_tensor({1, nt, 8}, rng, 0, 1, DType::kF32);
    in.hidden_states = random_tensor({1, nv, 16}, rng, 0, 1, DType::kF32);
    in.audio_hidden_states = random_tensor({1, na, 6}, rng, 0, 1, DType::kF32);
    in.timestep = Tensor::from_f32({0.25f, 0.5f, 0.999f}, {3});
    std::vector<int64_t> text(nt), video(nv), audio(na), tags(s), ti(s);
    std::iota(text.begin(), text.end(), 0);
    for (int64_t i = 0; i < 2; ++i) video[i] = nt + i;
    for (int64_t i = 0; i < na; ++i) audio[i] = nt + 2 + i;
    for (int64_t i = 2; i < nv; ++i) video[i] = nt + na + i;
    std::vector<double> pos(static_cast<size_t>(s * 3));
    for (int64_t r = 0; r < s; ++r) {
      pos[r * 3 + 0] = static_cast<double>(r) * 1.5;
      pos[r * 3 + 1] = static_cast<double>(r % 3) - 0.25;
      pos[r * 3 + 2] = static_cast<double>(r % 2) * 3.5;
    }
    for (int64_t r = 0; r < nt; ++r) {
      tags[r] = 1;
      ti[r] = 1;
    }
    for (int64_t i = 0; i < nv; ++i) {
      tags[video[i]] = 0;
      ti[video[i]] = i < 2 ? 2 : 1;
    }
    for (int64_t i = 0; i < na; ++i) {
      tags[audio[i]] = 2;
      ti[audio[i]] = 0;
    }
    in.text_indices = Tensor::from_i64(text, {nt});
    in.video_indices = Tensor::from_i64(video, {nv});
    in.audio_indices = Tensor::from_i64(audio, {na});
    in.token_tags = Tensor::from_i64(tags, {s});
    in.timestep_indices = Tensor::from_i64(ti, {s});
    Tensor p = Tensor::empty({s, 3}, DType::kF64);
    std::copy(pos.begin(), pos.end(), p.data<double>());
    in.position_ids = p;
    return in;
  }

  // A diffusers adapter over most module families (attention, FFN, AdaLN, refiner, the globals,
  // an fp32 island), B scaled by `b_stddev` (0: an adapter that changes nothing).
  AdapterFile diffusers_adapter(uint32_t seed, float b_stddev = 0.05f) const {
    AdapterFile f(config_, seed);
    auto pair = [&](const std::string& module, Rows rows, const std::string& target) {
      f.low_rank("transformer." + module + ".lora_A.weight",
                 "transformer." + module + ".lora_B.weight", rows, target, 4, 1.0, DType::kF32,
                 b_stddev);
    };
    for (const char* m : {".to_q", ".to_k", ".to_v", ".to_out.0"})
      pair(attn(0) + m, Rows::kPlain, attn(0) + m);
    pair("transformer_blocks.1.ff.net.0.proj", Rows::kPlain, "transformer_blocks.1.ff.net.0.proj");
    pair("transformer_blocks.1.ff.net.2", Rows::kPlain, "transformer_blocks.1.ff.net.2");
    pair("transformer_blocks.0.adaln_proj.linear", Rows::kPlain,
         "transformer_blocks.0.adaln_proj.linear");
    pair("token_refiner.refiner_blocks.0.attn.to_v", Rows::kPlain,
         "token_refiner.refiner_blocks.0.attn.to_v");
    pair("context_embedder", Rows::kPlain, "context_embedder");
    pair("norm_out.linear", Rows::kPlain, "norm_out.linear");
    pair("proj_in", Rows::kPlain, "proj_in");
    pair("audio_proj_out", Rows::kPlain, "audio_proj_out");
    return f;
  }

  static DitOutputs run(const DitModel& m) { return m.forward(inputs()); }

  test::TempDir tmp_{"h3_test_lora"};
  fs::path model_dir_;
  DitConfig config_;
};

const LoraUpdate* find_update(const LoraAdapter& a, const std::string& target) {
  for (const LoraUpdate& u : a.updates) {
    if (u.target == target) return &u;
  }
  return nullptr;
}

// Reads `file`, fuses it (restorable) at `scale` into a fresh float32 model and checks every
// tensor against the adapter's expected update; returns the adapter.
LoraAdapter fuse_and_check(DitModel& m, const AdapterFile& f, const std::string& file, double scale,
                           const std::string& layout) {
  const LoraAdapter a = read_lora(file, m.config());
  EXPECT_EQ(a.layout, layout) << file;
  EXPECT_TRUE(a.unmatched.empty());
  EXPECT_FALSE(a.sets_vsa_gates);
  std::set<std::string> targets;
  for (const LoraUpdate& u : a.updates) targets.insert(u.target);
  for (const auto& [name, e] : f.expects())
    EXPECT_EQ(targets.count(name), 1u) << name << " not updated";
  EXPECT_EQ(targets.size(), f.expects().size());
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, static_cast<float>(scale)}}, LoraMode::kFused, true);
  EXPECT_TRUE(m.has_loras());
  expect_updated(m, before, {{&f, scale}}, layout);
  return a;
}

// ---- 1. --lora FILE[:SCALE] ---------------------------------------------------------------------

TEST(LoraSpec, FileAndScale) {
  LoraSpec s = parse_lora_spec("a.safetensors");
  EXPECT_EQ(s.file, "a.safetensors");
  EXPECT_EQ(s.scale, 1.0f);
  s = parse_lora_spec("a.safetensors:0.5");
  EXPECT_EQ(s.file, "a.safetensors");
  EXPECT_EQ(s.scale, 0.5f);
  s = parse_lora_spec("dir/a.safetensors:-1.25");
  EXPECT_EQ(s.file, "dir/a.safetensors");
  EXPECT_EQ(s.scale, -1.25f);
  s = parse_lora_spec("a.safetensors:1e-1");
  EXPECT_EQ(s.file, "a.safetensors");
  EXPECT_FLOAT_EQ(s.scale, 0.1f);
  // A colon followed by something that is not a number is part of the name.
  s = parse_lora_spec("C:/x:y.safetensors");
  EXPECT_EQ(s.file, "C:/x:y.safetensors");
  EXPECT_EQ(s.scale, 1.0f);
  s = parse_lora_spec("C:/adapters/x.safetensors");
  EXPECT_EQ(s.file, "C:/adapters/x.safetensors");
  EXPECT_EQ(s.scale, 1.0f);
  s = parse_lora_spec("C:/adapters/x.safetensors:0.8");
  EXPECT_EQ(s.file, "C:/adapters/x.safetensors");
  EXPECT_EQ(s.scale, 0.8f);
  s = parse_lora_spec("C:/x:y.safetensors:2");
  EXPECT_EQ(s.file, "C:/x:y.safetensors");
  EXPECT_EQ(s.scale, 2.0f);
}

TEST(LoraSpec, RefusesEmptyNamesAndNonFiniteScales) {
  for (const char* bad : {"", ":0.5", "a.safetensors:nan", "a.safetensors:NaN", "a.safetensors:inf",
                          "a.safetensors:-inf", "a.safetensors:1e999"}) {
    try {
      parse_lora_spec(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad << ": " << e.what();
      std::printf("  '%s': %s\n", bad, e.what());
    }
  }
}

TEST(LoraSpec, ModeAndKindNames) {
  EXPECT_EQ(parse_lora_mode("fused"), LoraMode::kFused);
  EXPECT_EQ(parse_lora_mode("runtime"), LoraMode::kRuntime);
  EXPECT_STREQ(lora_mode_name(LoraMode::kFused), "fused");
  EXPECT_STREQ(lora_mode_name(LoraMode::kRuntime), "runtime");
  EXPECT_THROW(parse_lora_mode("lazy"), Error);
  EXPECT_STREQ(lora_update_kind_name(LoraUpdateKind::kLowRank), "low-rank");
  EXPECT_STREQ(lora_update_kind_name(LoraUpdateKind::kDiff), "diff");
  EXPECT_STREQ(lora_update_kind_name(LoraUpdateKind::kSet), "set");
}

// ---- 2. every layout, fused and compared with an independent float64 update -------------------

// diffusers names under `transformer.`: no alpha anywhere is alpha = rank, except one module with
// its `.alpha` tensor.
TEST_F(LoraDit, DiffusersLayoutFusesExactly) {
  AdapterFile f(config_, 11);
  auto pair = [&](const std::string& module, int64_t rank, double factor, DType dt) {
    f.low_rank("transformer." + module + ".lora_A.weight",
               "transformer." + module + ".lora_B.weight", Rows::kPlain, module, rank, factor, dt);
  };
  pair(attn(0) + ".to_q", 4, 1.0, DType::kF32);
  pair(attn(0) + ".to_k", 4, 1.0, DType::kBF16);
  pair(attn(1) + ".to_v", 2, 1.0, DType::kF16);
  pair(attn(1) + ".to_out.0", 4, 1.0, DType::kF32);
  pair("transformer_blocks.0.ff.net.0.proj", 8, 4.0 / 8.0, DType::kF32);
  f.alpha("transformer.transformer_blocks.0.ff.net.0.proj.alpha", 4.0f);
  pair("transformer_blocks.1.ff.net.2", 4, 1.0, DType::kF32);
  pair("transformer_blocks.1.adaln_proj.linear", 4, 1.0, DType::kF32);
  pair("token_refiner.refiner_blocks.0.attn.to_q", 4, 1.0, DType::kF32);
  pair("token_refiner.refiner_blocks.0.ff.net.2", 4, 1.0, DType::kF32);
  pair("context_embedder", 4, 1.0, DType::kF32);
  pair("norm_out.linear", 4, 1.0, DType::kF32);
  pair("proj_in", 4, 1.0, DType::kF32);
  pair("time_embedder.linear_2", 4, 1.0, DType::kF32);
  pair("proj_out", 4, 1.0, DType::kF32);
  const std::string file = f.write(path("diffusers/pytorch_lora_weights.safetensors"));
  DitModel m = load();
  const LoraAdapter a = fuse_and_check(m, f, file, 0.75, "diffusers");
  const LoraUpdate* ff = find_update(a, "transformer_blocks.0.ff.net.0.proj.weight");
  ASSERT_NE(ff, nullptr);
  EXPECT_EQ(ff->rank, 8);
  EXPECT_EQ(ff->alpha, 4.0);
  EXPECT_EQ(ff->kind, LoraUpdateKind::kLowRank);
  EXPECT_EQ(ff->partition, "transformer");
  EXPECT_NE(ff->source.find("transformer_blocks.0.ff.net.0.proj"), std::string::npos) << ff->source;
  const LoraUpdate* q = find_update(a, attn(0) + ".to_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->rank, 4);
  EXPECT_EQ(q->alpha, 4.0);  // alpha = rank when the file gives none
  const std::string d = describe_lora(a);
  std::printf("%s\n", d.c_str());
  EXPECT_NE(d.find("diffusers"), std::string::npos);
  EXPECT_NE(m.applied_loras().find("pytorch_lora_weights.safetensors"), std::string::npos)
      << m.applied_loras();
}

// PEFT: `base_model.model.` prefix, `.default.` infix, alphas from adapter_config.json beside the
// file (lora_alpha, with an alpha_pattern entry and a rank_pattern entry of another rank).
TEST_F(LoraDit, PeftLayoutWithAdapterConfigFusesExactly) {
  AdapterFile f(config_, 12);
  auto pair = [&](const std::string& module, int64_t rank, double factor) {
    f.low_rank("base_model.model." + module + ".lora_A.default.weight",
               "base_model.model." + module + ".lora_B.default.weight", Rows::kPlain, module, rank,
               factor);
  };
  pair(attn(0) + ".to_q", 4, 8.0 / 4.0);
  pair(attn(1) + ".to_k", 4, 8.0 / 4.0);
  pair("transformer_blocks.1.ff.net.2", 4, 2.0 / 4.0);             // alpha_pattern: 2
  pair("token_refiner.refiner_blocks.0.attn.to_v", 2, 8.0 / 2.0);  // rank_pattern: 2
  pair("transformer_blocks.0.adaln_proj.linear", 4, 8.0 / 4.0);
  pair("time_embedder.linear_1", 4, 8.0 / 4.0);
  const std::string file = f.write(path("peft/adapter_model.safetensors"));
  std::ofstream(path("peft/adapter_config.json")) << R"({
    "peft_type": "LORA", "r": 4, "lora_alpha": 8,
    "rank_pattern": {"token_refiner.refiner_blocks.0.attn.to_v": 2},
    "alpha_pattern": {"transformer_blocks.1.ff.net.2": 2},
    "target_modules": ["to_q", "to_k", "to_v", "ff.net.2", "linear", "linear_1"]})";
  DitModel m = load();
  const LoraAdapter a = fuse_and_check(m, f, file, 0.75, "peft");
  const LoraUpdate* v = find_update(a, "token_refiner.refiner_blocks.0.attn.to_v.weight");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->rank, 2);
  EXPECT_EQ(v->alpha, 8.0);
  const LoraUpdate* ff = find_update(a, "transformer_blocks.1.ff.net.2.weight");
  ASSERT_NE(ff, nullptr);
  EXPECT_EQ(ff->alpha, 2.0);
  EXPECT_EQ(ff->partition, "");
}

// Alphas from the file's metadata: diffusers' `lora_adapter_metadata` (the adapter config with
// component-prefixed keys) and a bare `alpha` entry (one network alpha for every module of a file
// that holds no `.alpha` tensor).
TEST_F(LoraDit, LoraAlphaFromFileMetadata) {
  AdapterFile f(config_, 19);
  for (const std::string& module :
       {attn(0) + ".to_q", std::string("transformer_blocks.1.ff.net.2")})
    f.low_rank("transformer." + module + ".lora_A.weight",
               "transformer." + module + ".lora_B.weight", Rows::kPlain, module, 4, 8.0 / 4.0);
  const std::string file =
      f.write(path("meta/diffusers.safetensors"),
              {{"lora_adapter_metadata", R"({"transformer.lora_alpha": 8, "transformer.r": 4})"}});
  DitModel m = load();
  const LoraAdapter a = fuse_and_check(m, f, file, 0.75, "diffusers");
  EXPECT_EQ(a.updates.at(0).alpha, 8.0);

  AdapterFile g(config_, 20);
  g.low_rank(attn(1) + ".to_k.lora_down.weight", attn(1) + ".to_k.lora_up.weight", Rows::kPlain,
             attn(1) + ".to_k", 4, 2.0 / 4.0);
  g.low_rank("proj_out.lora_down.weight", "proj_out.lora_up.weight", Rows::kPlain, "proj_out", 2,
             2.0 / 2.0);
  const std::string file2 = g.write(path("meta/kohya.safetensors"), {{"alpha", "2"}});
  DitModel m2 = load();
  fuse_and_check(m2, g, file2, 0.75, "kohya");
}

// The released checkpoint's own names under `diffusion_model.` (ai-toolkit, ComfyUI): the fused
// QKV update ([q_all; k_all; v_all]) split by rows, fc1's [gate; value] swapped, the renamed
// globals (h3_dit_spec.md §1.5).
TEST_F(LoraDit, OriginalLayoutSplitsQkvAndSwapsFc1) {
  AdapterFile f(config_, 13);
  auto pair = [&](const std::string& orig, Rows rows, const std::string& target, double factor) {
    f.low_rank("diffusion_model." + orig + ".lora_A.weight",
               "diffusion_model." + orig + ".lora_B.weight", rows, target, 4, factor);
  };
  pair("blocks.0.attn.qkv_proj", Rows::kQkv, attn(0), 2.0 / 4.0);
  f.alpha("diffusion_model.blocks.0.attn.qkv_proj.alpha", 2.0f);
  pair("blocks.1.attn.qkv_proj", Rows::kQkv, attn(1), 1.0);
  pair("blocks.0.attn.out_proj", Rows::kPlain, attn(0) + ".to_out.0", 1.0);
  pair("blocks.1.mlp.fc1", Rows::kFc1, "transformer_blocks.1.ff.net.0.proj", 1.0);
  pair("blocks.1.mlp.fc2", Rows::kPlain, "transformer_blocks.1.ff.net.2", 1.0);
  pair("blocks.1.adaln_proj.linear", Rows::kPlain, "transformer_blocks.1.adaln_proj.linear", 1.0);
  pair("token_refiner.blocks.0.attn.qkv_proj", Rows::kQkv, "token_refiner.refiner_blocks.0.attn",
       1.0);
  pair("token_refiner.blocks.0.mlp.fc1", Rows::kFc1, "token_refiner.refiner_blocks.0.ff.net.0.proj",
       1.0);
  pair("final_layer.adaln_proj.linear", Rows::kPlain, "norm_out.linear", 1.0);
  pair("video_patch_proj", Rows::kPlain, "proj_in", 1.0);
  pair("audio_patch_proj", Rows::kPlain, "audio_proj_in", 1.0);
  pair("condition_proj", Rows::kPlain, "context_embedder", 1.0);
  pair("time_embedder.proj_in", Rows::kPlain, "time_embedder.linear_1", 1.0);
  pair("time_embedder.proj_out", Rows::kPlain, "time_embedder.linear_2", 1.0);
  pair("final_layer.video_out", Rows::kPlain, "proj_out", 1.0);
  pair("final_layer.audio_out", Rows::kPlain, "audio_proj_out", 1.0);
  const std::string file = f.write(path("original/lora.safetensors"));
  DitModel m = load();
  const LoraAdapter a = fuse_and_check(m, f, file, 0.75, "original");
  // One shared A for the three parts of the fused QKV.
  const LoraUpdate* q = find_update(a, attn(0) + ".to_q.weight");
  const LoraUpdate* v = find_update(a, attn(0) + ".to_v.weight");
  ASSERT_TRUE(q && v);
  EXPECT_EQ(q->alpha, 2.0);
  EXPECT_EQ(v->rank, 4);
  EXPECT_EQ(q->down.to_f32_vector(), v->down.to_f32_vector());
}

// DiffSynth-Studio: original names with `.default.`, QKV B per-head interleaved.
TEST_F(LoraDit, DiffSynthLayoutDeinterleavesQkv) {
  AdapterFile f(config_, 14);
  auto pair = [&](const std::string& orig, Rows rows, const std::string& target) {
    f.low_rank(orig + ".lora_A.default.weight", orig + ".lora_B.default.weight", rows, target, 4,
               1.0, DType::kBF16);
  };
  pair("blocks.0.attn.qkv_proj", Rows::kQkvInterleaved, attn(0));
  pair("blocks.1.attn.qkv_proj", Rows::kQkvInterleaved, attn(1));
  pair("token_refiner.blocks.0.attn.qkv_proj", Rows::kQkvInterleaved,
       "token_refiner.refiner_blocks.0.attn");
  pair("blocks.0.mlp.fc1", Rows::kFc1, "transformer_blocks.0.ff.net.0.proj");
  pair("blocks.1.attn.out_proj", Rows::kPlain, attn(1) + ".to_out.0");
  pair("blocks.0.adaln_proj.linear", Rows::kPlain, "transformer_blocks.0.adaln_proj.linear");
  const std::string file = f.write(path("diffsynth/lora.safetensors"));
  DitModel m = load();
  fuse_and_check(m, f, file, 0.75, "diffsynth");
}

// kohya `lora_down` / `lora_up` / `.alpha` under dotted names: diffusers names in one file, the
// original names under `diffusion_model.` in another.
TEST_F(LoraDit, KohyaDottedLayoutFusesExactly) {
  AdapterFile f(config_, 15);
  auto pair = [&](const std::string& module, int64_t rank, float alpha, DType dt) {
    f.low_rank(module + ".lora_down.weight", module + ".lora_up.weight", Rows::kPlain, module, rank,
               alpha / static_cast<double>(rank), dt);
    f.alpha(module + ".alpha", alpha);
  };
  pair(attn(0) + ".to_q", 4, 2.0f, DType::kF32);
  pair(attn(0) + ".to_v", 8, 16.0f, DType::kBF16);
  pair("transformer_blocks.1.ff.net.0.proj", 4, 4.0f, DType::kF32);
  pair("norm_out.linear", 4, 1.0f, DType::kF32);
  pair("proj_out", 2, 1.0f, DType::kF32);
  const std::string file = f.write(path("kohya/dotted.safetensors"));
  DitModel m = load();
  const LoraAdapter a = fuse_and_check(m, f, file, 0.75, "kohya");
  const LoraUpdate* v = find_update(a, attn(0) + ".to_v.weight");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->rank, 8);
  EXPECT_EQ(v->alpha, 16.0);

  AdapterFile g(config_, 16);
  auto orig = [&](const std::string& module, Rows rows, const std::string& target, float alpha) {
    g.low_rank("diffusion_model." + module + ".lora_down.weight",
               "diffusion_model." + module + ".lora_up.weight", rows, target, 4, alpha / 4.0);
    g.alpha("diffusion_model." + module + ".alpha", alpha, DType::kBF16);
  };
  orig("blocks.1.attn.qkv_proj", Rows::kQkv, attn(1), 8.0f);
  orig("blocks.0.mlp.fc1", Rows::kFc1, "transformer_blocks.0.ff.net.0.proj", 2.0f);
  orig("final_layer.video_out", Rows::kPlain, "proj_out", 4.0f);
  const std::string file2 = g.write(path("kohya/original_names.safetensors"));
  DitModel m2 = load();
  fuse_and_check(m2, g, file2, -0.5, "kohya");
}

// musubi-tuner: flattened `lora_unet_<path>` names (original names, and diffusers names in a
// second file), lora_down / lora_up and an `.alpha` per module.
TEST_F(LoraDit, MusubiFlattenedLayoutFusesExactly) {
  AdapterFile f(config_, 17);
  auto pair = [&](const std::string& flat, Rows rows, const std::string& target, float alpha) {
    f.low_rank("lora_unet_" + flat + ".lora_down.weight", "lora_unet_" + flat + ".lora_up.weight",
               rows, target, 4, alpha / 4.0, DType::kBF16);
    f.alpha("lora_unet_" + flat + ".alpha", alpha);
  };
  pair("blocks_0_attn_qkv_proj", Rows::kQkv, attn(0), 2.0f);
  pair("blocks_1_mlp_fc1", Rows::kFc1, "transformer_blocks.1.ff.net.0.proj", 4.0f);
  pair("blocks_1_mlp_fc2", Rows::kPlain, "transformer_blocks.1.ff.net.2", 4.0f);
  pair("blocks_1_adaln_proj_linear", Rows::kPlain, "transformer_blocks.1.adaln_proj.linear", 4.0f);
  pair("token_refiner_blocks_0_attn_out_proj", Rows::kPlain,
       "token_refiner.refiner_blocks.0.attn.to_out.0", 8.0f);
  pair("final_layer_adaln_proj_linear", Rows::kPlain, "norm_out.linear", 4.0f);
  pair("video_patch_proj", Rows::kPlain, "proj_in", 4.0f);
  pair("time_embedder_proj_out", Rows::kPlain, "time_embedder.linear_2", 4.0f);
  pair("condition_proj", Rows::kPlain, "context_embedder", 4.0f);
  const std::string file = f.write(path("musubi/lora.safetensors"));
  DitModel m = load();
  fuse_and_check(m, f, file, 0.75, "musubi");

  AdapterFile g(config_, 18);
  auto flat = [&](const std::string& name, const std::string& target) {
    g.low_rank("lora_unet_" + name + ".lora_down.weight", "lora_unet_" + name + ".lora_up.weight",
               Rows::kPlain, target, 4, 1.0);
    g.alpha("lora_unet_" + name + ".alpha", 4.0f);
  };
  flat("transformer_blocks_1_attn_to_out_0", attn(1) + ".to_out.0");
  flat("transformer_blocks_0_ff_net_0_proj", "transformer_blocks.0.ff.net.0.proj");
  flat("token_refiner_refiner_blocks_0_attn_to_k", "token_refiner.refiner_blocks.0.attn.to_k");
  flat("time_embedder_linear_1", "time_embedder.linear_1");
  const std::string file2 = g.write(path("musubi/diffusers_names.safetensors"));
  DitModel m2 = load();
  fuse_and_check(m2, g, file2, 0.75, "musubi");
}

// A bf16 model: the update is folded in float32 and rounded once to bf16 (the fp32 islands stay
// float32 and exact to the float32 bound).
TEST_F(LoraDit, Bf16FuseRoundsOnce) {
  const AdapterFile f = diffusers_adapter(21);
  const std::string file = f.write(path("bf16/lora.safetensors"));
  const LoraAdapter a = read_lora(file, config_);
  DitModel m = load(DitPrecision::kBF16);
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, 0.75f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&f, 0.75}}, "bf16 fused");
  EXPECT_EQ(m.weights().proj_in_w.dtype(), DType::kF32);
  EXPECT_EQ(m.weights().blocks[0].attn.to_q.dtype(), DType::kBF16);
}

// The CPU model's weights may be views of the checkpoint's read-only mapping (a tensor stored in
// the dtype the model wants: every fp32 island, and every bf16 tensor of a bf16 model). Fusing
// must give the model its own copy of each tensor it changes: it may neither fault on the mapping
// nor change the checkpoint, which a second load reads again.
TEST_F(LoraDit, FusedLoraOnMappedWeightsLeavesTheCheckpointAlone) {
  AdapterFile f(config_, 22);
  f.low_rank("proj_in.lora_A.weight", "proj_in.lora_B.weight", Rows::kPlain, "proj_in", 4, 1.0);
  f.low_rank(attn(0) + ".to_q.lora_A.weight", attn(0) + ".to_q.lora_B.weight", Rows::kPlain,
             attn(0) + ".to_q", 4, 1.0);
  f.diff("proj_out.diff_b", "proj_out.bias");
  const LoraAdapter a = read_lora(f.write(path("mapped/lora.safetensors")), config_);
  for (DitPrecision p : {DitPrecision::kF32, DitPrecision::kBF16}) {
    SCOPED_TRACE(precision_name(p));
    DitModel m = load(p);
    const Snapshot before = snapshot(m);
    m.apply_loras({{&a, 0.75f}}, LoraMode::kFused, false);
    expect_updated(m, before, {{&f, 0.75}},
                   std::string("fused into a ") + precision_name(p) + " model");
    expect_updated(load(p), before, {}, "the checkpoint loaded again");
  }
}

// ---- 3. scale 0 and B = 0 change nothing
// ---------------------------------------------------------

TEST_F(LoraDit, LoraScaleZeroAndZeroUpdateKeepOutputBytes) {
  const AdapterFile f = diffusers_adapter(31);
  const AdapterFile zero = diffusers_adapter(32, 0.0f);
  const LoraAdapter a = read_lora(f.write(path("nonzero/lora.safetensors")), config_);
  const LoraAdapter z = read_lora(zero.write(path("zero/lora.safetensors")), config_);
  for (DitPrecision p : {DitPrecision::kF32, DitPrecision::kBF16}) {
    SCOPED_TRACE(precision_name(p));
    DitModel m = load(p);
    const DitOutputs base = run(m);
    const Snapshot before = snapshot(m);
    auto expect_same = [&](const std::string& what) {
      const DitOutputs o = run(m);
      std::string first;
      EXPECT_EQ(test::count_bit_mismatches(o.video, base.video, &first), 0)
          << what << ": " << first;
      EXPECT_EQ(test::count_bit_mismatches(o.audio, base.audio, &first), 0)
          << what << ": " << first;
    };
    m.apply_loras({{&a, 0.0f}}, LoraMode::kFused, true);
    expect_same("scale 0, fused");
    expect_updated(m, before, {}, "scale 0 changes no tensor");
    m.apply_loras({{&a, 0.0f}}, LoraMode::kRuntime, true);
    expect_same("scale 0, runtime");
    m.apply_loras({{&z, 1.0f}}, LoraMode::kFused, true);
    expect_same("B = 0, fused");
    m.apply_loras({{&z, 1.0f}}, LoraMode::kRuntime, true);
    expect_same("B = 0, runtime");
    // The same check sees a real adapter.
    m.apply_loras({{&a, 1.0f}}, LoraMode::kFused, true);
    EXPECT_GT(test::compare(run(m).video, base.video).rel_l2, 1e-2);
  }
}

// ---- run-time mode: the weights stay, the pairs sit beside them
// ----------------------------------

TEST_F(LoraDit, RuntimeLoraKeepsPairsBesideWeights) {
  AdapterFile f = diffusers_adapter(41);
  AdapterFile dense(config_, 42);
  dense.diff("transformer_blocks.1.attn.to_k.diff", attn(1) + ".to_k.weight");
  dense.diff("transformer_blocks.0.norm2.diff", "transformer_blocks.0.norm2.weight");
  const LoraAdapter a = read_lora(f.write(path("rt/lora.safetensors")), config_);
  const LoraAdapter d = read_lora(dense.write(path("rt/dense.safetensors")), config_);
  DitModel m = load();
  const Snapshot before = snapshot(m);
  const float s = 0.75f;
  m.apply_loras({{&a, s}, {&d, s}}, LoraMode::kRuntime, true);
  // Only the dense updates are folded.
  expect_updated(m, before, {{&dense, s}}, "runtime: dense updates folded, low-rank ones not");
  for (const LoraUpdate& u : a.updates) {
    const RuntimeLora* pairs = find_pairs(m.weights(), u.target);
    ASSERT_NE(pairs, nullptr) << u.target;
    ASSERT_EQ(pairs->size(), 1u) << u.target;
    const LowRankPair& p = pairs->front();
    // A as read, B times the scale (and alpha / r, 1 here) in float32.
    EXPECT_EQ(p.down.shape(), u.down.shape()) << u.target;
    EXPECT_EQ(p.down.to_f32_vector(), u.down.to_f32_vector()) << u.target;
    const std::vector<float> up = p.up.to_f32_vector(), want = u.up.to_f32_vector();
    ASSERT_EQ(up.size(), want.size()) << u.target;
    for (size_t i = 0; i < up.size(); ++i)
      ASSERT_NEAR(up[i], s * want[i], 1e-6 * std::fabs(want[i]) + 1e-30) << u.target << " " << i;
  }
  EXPECT_TRUE(find_pairs(m.weights(), attn(1) + ".to_k.weight")->empty());
  m.remove_loras();
  for (const LoraUpdate& u : a.updates)
    EXPECT_TRUE(find_pairs(m.weights(), u.target)->empty()) << u.target;
  expect_updated(m, before, {}, "runtime removed");
}

// --dit-dtype fp8: a fused adapter would rewrite E4M3 values in place, which the scales were not
// computed for; it is refused before any tensor changes. Low-rank pairs at run time apply beside
// the FP8 GEMM and change the output.
TEST_F(LoraDit, Fp8WeightsTakeRuntimePairsAndRefuseFusing) {
  const AdapterFile f = diffusers_adapter(61);
  const LoraAdapter a = read_lora(f.write(path("fp8/lora.safetensors")), config_);
  DitOptions o{Device::cpu(), DitPrecision::kBF16, DitRounding::kEager};
  o.fp8 = true;
  DitModel m = DitModel::load(model_dir_.string(), o);
  ASSERT_EQ(m.weights().blocks[0].attn.to_q.dtype(), DType::kF8E4M3);
  const Snapshot before = snapshot(m);
  try {
    m.apply_loras({{&a, 1.0f}}, LoraMode::kFused, false);
    FAIL() << "expected kUnsupported for a fused adapter on FP8 weights";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("--lora-mode runtime"), std::string::npos) << e.what();
  }
  expect_updated(m, before, {}, "refused fused adapter changed nothing");
  EXPECT_NO_THROW(m.apply_loras({{&a, 1.0f}}, LoraMode::kRuntime, true));
  EXPECT_FALSE(find_pairs(m.weights(), a.updates.front().target)->empty());
}

// ---- 4. fused and run-time forwards agree
// --------------------------------------------------------

// Fused computes x (W + s B A)^T, run time x W^T + s (x A^T) B^T: the same function, different
// roundings. In float32 both are within a few float32 ulps per linear, so the outputs agree to
// 1e-5 relative (rel_l2; the 2-block model does not amplify it much). In bf16, the fused weight
// is rounded to bf16 once more (2^-9 relative per weight), the run-time pair is not: the two runs
// differ by bf16 weight-rounding noise, which is the same kind and size of noise that separates
// the bf16 model from the float32 one; bound: 2x that measured floor, and 2e-2 absolutely.
TEST_F(LoraDit, FusedAndRuntimeLoraForwardsAgree) {
  const AdapterFile f = diffusers_adapter(51);
  const LoraAdapter a = read_lora(f.write(path("fr/lora.safetensors")), config_);
  const float s = 0.75f;

  DitModel m32 = load();
  const DitOutputs base32 = run(m32);
  m32.apply_loras({{&a, s}}, LoraMode::kFused, true);
  const DitOutputs fused32 = run(m32);
  m32.apply_loras({{&a, s}}, LoraMode::kRuntime, true);
  const DitOutputs rt32 = run(m32);
  const test::Metrics effect = test::compare(fused32.video, base32.video);
  const test::Metrics v32 = test::compare(rt32.video, fused32.video);
  const test::Metrics a32 = test::compare(rt32.audio, fused32.audio);
  std::printf("f32: adapter effect %s\n  runtime vs fused: video %s | audio %s\n",
              test::format_metrics(effect).c_str(), test::format_metrics(v32).c_str(),
              test::format_metrics(a32).c_str());
  EXPECT_GT(effect.rel_l2, 5e-2);  // the adapter matters, so agreement means something
  EXPECT_LT(v32.rel_l2, 1e-5);
  EXPECT_LT(a32.rel_l2, 1e-5);
  EXPECT_LT(v32.rel_max, 1e-4);
  EXPECT_LT(a32.rel_max, 1e-4);

  DitModel mbf = load(DitPrecision::kBF16);
  mbf.apply_loras({{&a, s}}, LoraMode::kFused, true);
  const DitOutputs fusedbf = run(mbf);
  mbf.apply_loras({{&a, s}}, LoraMode::kRuntime, true);
  const DitOutputs rtbf = run(mbf);
  const test::Metrics floor_v = test::compare(fusedbf.video, fused32.video);
  const test::Metrics floor_a = test::compare(fusedbf.audio, fused32.audio);
  const test::Metrics vbf = test::compare(rtbf.video, fusedbf.video);
  const test::Metrics abf = test::compare(rtbf.audio, fusedbf.audio);
  std::printf("bf16 floor (fused bf16 vs fused f32): video %s | audio %s\n",
              test::format_metrics(floor_v).c_str(), test::format_metrics(floor_a).c_str());
  std::printf("bf16 runtime vs fused: video %s | audio %s\n", test::format_metrics(vbf).c_str(),
              test::format_metrics(abf).c_str());
  EXPECT_LT(vbf.rel_l2, 2e-2);
  EXPECT_LT(abf.rel_l2, 2e-2);
  EXPECT_LE(vbf.rel_l2, 2 * floor_v.rel_l2);
  EXPECT_LE(abf.rel_l2, 2 * floor_a.rel_l2);
  // The run-time bf16 forward is also that close to the float32 truth.
  EXPECT_LE(test::compare(rtbf.video, fused32.video).rel_l2, 2 * floor_v.rel_l2);
}

// ---- 5. two adapters at once
// ---------------------------------------------------------------------

TEST_F(LoraDit, TwoLorasAddTheirUpdates) {
  const AdapterFile x = diffusers_adapter(61);
  AdapterFile y(config_, 62);
  auto pair = [&](const std::string& module, float alpha) {
    y.low_rank(module + ".lora_down.weight", module + ".lora_up.weight", Rows::kPlain, module, 4,
               alpha / 4.0);
    y.alpha(module + ".alpha", alpha);
  };
  pair(attn(0) + ".to_q", 2.0f);  // also in x
  pair(attn(1) + ".to_k", 8.0f);
  pair("norm_out.linear", 4.0f);  // also in x
  pair("proj_in", 4.0f);          // also in x (fp32 island)
  const LoraAdapter a = read_lora(x.write(path("two/x.safetensors")), config_);
  const LoraAdapter b = read_lora(y.write(path("two/y.safetensors")), config_);
  DitModel m = load();
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, 0.75f}, {&b, -0.5f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&x, 0.75}, {&y, -0.5}}, "two adapters");
  const std::string applied = m.applied_loras();
  std::printf("  applied: %s\n", applied.c_str());
  EXPECT_NE(applied.find("x.safetensors"), std::string::npos);
  EXPECT_NE(applied.find("y.safetensors"), std::string::npos);
  EXPECT_LT(applied.find("x.safetensors"), applied.find("y.safetensors"));

  // Run time, both pairs beside the shared weight.
  m.apply_loras({{&a, 0.75f}, {&b, -0.5f}}, LoraMode::kRuntime, true);
  EXPECT_EQ(m.weights().blocks[0].attn.to_q_lora.size(), 2u);
  EXPECT_EQ(m.weights().blocks[1].attn.to_k_lora.size(), 1u);
}

// ---- 6. remove_loras
// -----------------------------------------------------------------------------

TEST_F(LoraDit, RemoveLorasRestoresEveryBit) {
  AdapterFile f = diffusers_adapter(71);
  f.diff("transformer.transformer_blocks.1.norm1.diff", "transformer_blocks.1.norm1.weight");
  f.diff("transformer.transformer_blocks.1.adaln_proj.linear.diff_b",
         "transformer_blocks.1.adaln_proj.linear.bias");
  f.diff("transformer.proj_out.diff_b", "proj_out.bias");
  f.set_weight("transformer.token_refiner.final_norm.set_weight", "token_refiner.final_norm.weight",
               DType::kF32, 1.0f, 0.1f);
  AdapterFile gates(config_, 72);
  for (int64_t i = 0; i < config_.num_layers; ++i)
    gates.set_weight(attn(i) + ".to_gate_compress.set_weight", attn(i) + ".to_gate_compress.weight",
                     DType::kBF16);
  const LoraAdapter a = read_lora(f.write(path("rm/lora.safetensors")), config_);
  const LoraAdapter g = read_lora(gates.write(path("rm/gates.safetensors")), config_);
  for (DitPrecision p : {DitPrecision::kF32, DitPrecision::kBF16}) {
    SCOPED_TRACE(precision_name(p));
    DitModel m = load(p);
    const Snapshot before = snapshot(m);
    const DitOutputs base = run(m);
    for (LoraMode mode : {LoraMode::kFused, LoraMode::kRuntime}) {
      SCOPED_TRACE(lora_mode_name(mode));
      m.apply_loras({{&a, 0.75f}, {&g, 1.0f}}, mode, true);
      EXPECT_TRUE(m.has_loras());
      EXPECT_TRUE(m.loras_restorable());
      EXPECT_TRUE(m.has_vsa_gates());
      m.remove_loras();
      EXPECT_FALSE(m.has_loras());
      EXPECT_EQ(m.applied_loras(), "");
      EXPECT_FALSE(m.has_vsa_gates());
      expect_updated(m, before, {}, std::string("removed after ") + lora_mode_name(mode));
      for (const LoraUpdate& u : a.updates) {
        const RuntimeLora* pairs = find_pairs(m.weights(), u.target);
        if (pairs) {
          EXPECT_TRUE(pairs->empty()) << u.target;
        }
      }
      const DitOutputs o = run(m);
      EXPECT_EQ(test::count_bit_mismatches(o.video, base.video), 0);
      EXPECT_EQ(test::count_bit_mismatches(o.audio, base.audio), 0);
    }
    m.remove_loras();  // nothing applied: nothing to do
  }
}

TEST_F(LoraDit, NonRestorableLoraCannotBeRemoved) {
  const AdapterFile f = diffusers_adapter(81);
  const LoraAdapter a = read_lora(f.write(path("nr/lora.safetensors")), config_);
  DitModel m = load();
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, 0.75f}}, LoraMode::kFused, false);
  EXPECT_FALSE(m.loras_restorable());
  expect_updated(m, before, {{&f, 0.75}}, "fused without restore copies");
  try {
    m.remove_loras();
    ADD_FAILURE() << "remove_loras after a non-restorable fuse";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    std::printf("  error: %s\n", e.what());
  }
}

// Applying again removes what was applied before: the result is the new adapter's update alone.
TEST_F(LoraDit, ReapplyingLorasReplacesThePrevious) {
  const AdapterFile x = diffusers_adapter(91);
  const AdapterFile y = diffusers_adapter(92);
  const LoraAdapter a = read_lora(x.write(path("re/x.safetensors")), config_);
  const LoraAdapter b = read_lora(y.write(path("re/y.safetensors")), config_);
  DitModel m = load();
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, 0.75f}}, LoraMode::kFused, true);
  m.apply_loras({{&b, 0.5f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&y, 0.5}}, "second apply replaces the first");
  m.apply_loras({{&a, 0.75f}}, LoraMode::kRuntime, true);
  m.apply_loras({{&b, 0.5f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&y, 0.5}}, "fused after runtime");
  EXPECT_TRUE(m.weights().blocks[0].attn.to_q_lora.empty());
}

// ---- 7. hybrid payloads
// --------------------------------------------------------------------------

TEST_F(LoraDit, HybridLoraDiffAndSetWeight) {
  AdapterFile f(config_, 101);
  f.diff("transformer_blocks.0.attn.to_q.diff", attn(0) + ".to_q.weight");
  f.diff("transformer_blocks.0.attn.norm_q.diff", attn(0) + ".norm_q.weight", DType::kBF16);
  f.diff("transformer_blocks.0.adaln_proj.linear.diff_b",
         "transformer_blocks.0.adaln_proj.linear.bias");
  f.diff("proj_in.diff_b", "proj_in.bias");
  f.diff("context_embedder.diff_b", "context_embedder.bias");
  // A low-rank pair and a diff on the same weight add up.
  f.low_rank(attn(1) + ".to_k.lora_A.weight", attn(1) + ".to_k.lora_B.weight", Rows::kPlain,
             attn(1) + ".to_k", 4, 1.0);
  f.diff(attn(1) + ".to_k.diff", attn(1) + ".to_k.weight");
  f.set_weight("transformer_blocks.1.norm1.set_weight", "transformer_blocks.1.norm1.weight",
               DType::kF32, 1.0f, 0.1f);
  f.set_weight("norm_out.linear.set_weight", "norm_out.linear.weight");
  const std::string file = f.write(path("hybrid/lora.safetensors"));
  const LoraAdapter a = read_lora(file, config_);
  int counts[3] = {0, 0, 0};
  for (const LoraUpdate& u : a.updates) ++counts[static_cast<int>(u.kind)];
  EXPECT_EQ(counts[static_cast<int>(LoraUpdateKind::kLowRank)], 1);
  EXPECT_EQ(counts[static_cast<int>(LoraUpdateKind::kDiff)], 6);
  EXPECT_EQ(counts[static_cast<int>(LoraUpdateKind::kSet)], 2);
  EXPECT_FALSE(a.sets_vsa_gates);
  std::printf("%s\n", describe_lora(a).c_str());

  DitModel m = load();
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, 0.5f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&f, 0.5}}, "hybrid at 0.5");
  // At scale 1, set_weight replaces the tensor: the file's values exactly.
  m.apply_loras({{&a, 1.0f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&f, 1.0}}, "hybrid at 1");
  for (const io::NamedTensor& t : f.tensors()) {
    if (t.name == "norm_out.linear.set_weight") {
      EXPECT_EQ(test::count_bit_mismatches(m.weights().norm_out_w, t.tensor), 0);
    }
  }
  // Run time: the dense updates are folded all the same.
  m.apply_loras({{&a, 0.5f}}, LoraMode::kRuntime, true);
  EXPECT_EQ(test::count_bit_mismatches(m.weights().blocks[1].norm1,
                                       before.at("transformer_blocks.1.norm1.weight")),
            m.weights().blocks[1].norm1.numel());
  EXPECT_EQ(m.weights().blocks[1].attn.to_k_lora.size(), 1u);
}

// A FastH3-style adapter: a `.set_weight` gate for every main block makes a gate-less model a
// student with gates.
TEST_F(LoraDit, FastH3LoraCreatesGates) {
  AdapterFile f(config_, 111);
  for (int64_t i = 0; i < config_.num_layers; ++i)
    f.set_weight(attn(i) + ".to_gate_compress.set_weight", attn(i) + ".to_gate_compress.weight",
                 DType::kBF16);
  f.low_rank(attn(0) + ".to_q.lora_A.weight", attn(0) + ".to_q.lora_B.weight", Rows::kPlain,
             attn(0) + ".to_q", 4, 1.0);
  const std::string file = f.write(path("fasth3/lora.safetensors"));
  const LoraAdapter a = read_lora(file, config_);
  EXPECT_TRUE(a.sets_vsa_gates);
  for (DitPrecision p : {DitPrecision::kF32, DitPrecision::kBF16}) {
    SCOPED_TRACE(precision_name(p));
    DitModel m = load(p);
    ASSERT_FALSE(m.has_vsa_gates());
    const Snapshot before = snapshot(m);
    m.apply_loras({{&a, 1.0f}}, LoraMode::kFused, true);
    EXPECT_TRUE(m.has_vsa_gates());
    // The gates are the file's tensors (bf16 values, exact in either model dtype).
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      const Tensor& gate = m.weights().blocks[static_cast<size_t>(i)].attn.to_gate;
      ASSERT_TRUE(gate.defined());
      EXPECT_EQ(gate.dtype(), m.weights().blocks[0].attn.to_q.dtype());
      for (const io::NamedTensor& t : f.tensors()) {
        if (t.name == attn(i) + ".to_gate_compress.set_weight") {
          EXPECT_EQ(gate.to_f32_vector(), t.tensor.to_f32_vector()) << i;
        }
      }
    }
    expect_updated(m, before, {{&f, 1.0}}, "gates created");
    const DitOutputs o = run(m);
    for (float v : o.video.to_f32_vector()) ASSERT_TRUE(std::isfinite(v));
    m.remove_loras();
    EXPECT_FALSE(m.has_vsa_gates());
    EXPECT_FALSE(m.weights().blocks[0].attn.to_gate.defined());
  }
  // Not a student adapter.
  const AdapterFile plain = diffusers_adapter(112);
  EXPECT_FALSE(read_lora(plain.write(path("fasth3/plain.safetensors")), config_).sets_vsa_gates);
}

TEST_F(LoraDit, LoraGatesOnSomeBlocksRefused) {
  AdapterFile f(config_, 121);
  f.set_weight(attn(1) + ".to_gate_compress.set_weight", attn(1) + ".to_gate_compress.weight",
               DType::kBF16);
  const std::string file = f.write(path("gates/partial.safetensors"));
  expect_lora_error([&] { read_lora(file, config_); }, ErrorCode::kUnsupported, file,
                    "to_gate_compress");
  // The refiner has no gate.
  AdapterFile g(config_, 122);
  for (int64_t i = 0; i < config_.num_layers; ++i)
    g.set_weight(attn(i) + ".to_gate_compress.set_weight", attn(i) + ".to_gate_compress.weight",
                 DType::kBF16);
  g.raw("token_refiner.refiner_blocks.0.attn.to_gate_compress.set_weight",
        Tensor::zeros({32, 24}, DType::kBF16));
  const std::string file2 = g.write(path("gates/refiner.safetensors"));
  try {
    read_lora(file2, config_);
    ADD_FAILURE() << "a refiner gate accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(file2), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("token_refiner.refiner_blocks.0.attn.to_gate_compress"),
              std::string::npos)
        << e.what();
    std::printf("  error (%s): %s\n", error_code_name(e.code()), e.what());
  }
}

// A low-rank (or diff) update of a gate the model lacks is refused when applied, before any tensor
// changes.
TEST_F(LoraDit, LowRankLoraOnMissingGateRefusedBeforeAnyChange) {
  AdapterFile f = diffusers_adapter(131);
  f.low_rank(attn(1) + ".to_gate_compress.lora_A.weight",
             attn(1) + ".to_gate_compress.lora_B.weight", Rows::kPlain,
             attn(1) + ".to_gate_compress", 4, 1.0);
  AdapterFile g(config_, 132);
  g.diff(attn(0) + ".to_q.diff", attn(0) + ".to_q.weight");
  g.diff(attn(0) + ".to_gate_compress.diff", attn(0) + ".to_gate_compress.weight");
  const std::string file = f.write(path("gatelr/lowrank.safetensors"));
  const std::string file2 = g.write(path("gatelr/diff.safetensors"));
  const LoraAdapter a = read_lora(file, config_);
  const LoraAdapter b = read_lora(file2, config_);
  DitModel m = load();
  const Snapshot before = snapshot(m);
  for (LoraMode mode : {LoraMode::kFused, LoraMode::kRuntime}) {
    expect_lora_error(
        [&] {
          m.apply_loras({{&a, 1.0f}}, mode, true);
        },
        ErrorCode::kUnsupported, file, "to_gate_compress");
    expect_lora_error(
        [&] {
          m.apply_loras({{&b, 1.0f}}, mode, true);
        },
        ErrorCode::kUnsupported, file2, "to_gate_compress");
    EXPECT_FALSE(m.has_loras());
    EXPECT_TRUE(m.weights().blocks[0].attn.to_q_lora.empty());
    expect_updated(m, before, {}, "refused apply changes nothing");
  }
}

// ---- 8. refusals
// ----------------------------------------------------------------------------------

TEST_F(LoraDit, UnmatchedLoraKeys) {
  AdapterFile f(config_, 141);
  f.low_rank(attn(0) + ".to_q.lora_A.weight", attn(0) + ".to_q.lora_B.weight", Rows::kPlain,
             attn(0) + ".to_q", 4, 1.0);
  f.raw(attn(0) + ".to_zz.lora_A.weight", Tensor::zeros({4, 24}, DType::kF32));
  f.raw(attn(0) + ".to_zz.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
  const std::string file = f.write(path("unmatched/lora.safetensors"));
  expect_lora_error([&] { read_lora(file, config_); }, ErrorCode::kInvalidFile, file, "to_zz");
  LoraReadOptions opt;
  opt.allow_unmatched = true;
  const LoraAdapter a = read_lora(file, config_, opt);
  ASSERT_FALSE(a.unmatched.empty());
  for (const std::string& k : a.unmatched) EXPECT_NE(k.find("to_zz"), std::string::npos) << k;
  ASSERT_EQ(a.updates.size(), 1u);
  EXPECT_EQ(a.updates[0].target, attn(0) + ".to_q.weight");
  EXPECT_NE(describe_lora(a).find("to_zz"), std::string::npos) << describe_lora(a);
  DitModel m = load();
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, 0.75f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&f, 0.75}}, "unmatched keys skipped");

  // A block the model does not have is unmatched too.
  AdapterFile g(config_, 142);
  g.raw("transformer_blocks.7.attn.to_q.lora_A.weight", Tensor::zeros({4, 24}, DType::kF32));
  g.raw("transformer_blocks.7.attn.to_q.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
  g.low_rank(attn(1) + ".to_v.lora_A.weight", attn(1) + ".to_v.lora_B.weight", Rows::kPlain,
             attn(1) + ".to_v", 4, 1.0);
  const std::string file2 = g.write(path("unmatched/block7.safetensors"));
  expect_lora_error([&] { read_lora(file2, config_); }, ErrorCode::kInvalidFile, file2,
                    "transformer_blocks.7");
  EXPECT_EQ(read_lora(file2, config_, opt).updates.size(), 1u);
}

// One refusal per file: the file holds a good pair and the bad tensors.
class LoraRefusal : public LoraDit {
 protected:
  void expect_refused(const std::string& name, const std::function<void(AdapterFile&)>& add,
                      ErrorCode code, const std::string& key) {
    SCOPED_TRACE(name);
    AdapterFile f(config_, 150);
    f.low_rank(attn(0) + ".to_q.lora_A.weight", attn(0) + ".to_q.lora_B.weight", Rows::kPlain,
               attn(0) + ".to_q", 4, 1.0);
    add(f);
    const std::string file = f.write(path("refused/" + name + ".safetensors"));
    expect_lora_error([&] { read_lora(file, config_); }, code, file, key);
  }
};

TEST_F(LoraRefusal, LoraAWithoutB) {
  expect_refused(
      "a_without_b",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::zeros({4, 24}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k");
  expect_refused(
      "b_without_a",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k");
  expect_refused(
      "kohya_down_without_up",
      [](AdapterFile& f) {
        f.raw("lora_unet_blocks_1_mlp_fc2.lora_down.weight", Tensor::zeros({4, 32}, DType::kF32));
      },
      ErrorCode::kInvalidFile, "lora_unet_blocks_1_mlp_fc2");
}

TEST_F(LoraRefusal, LoraRankMismatch) {
  expect_refused(
      "rank_mismatch",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::zeros({4, 24}, DType::kF32));
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({32, 3}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k");
}

TEST_F(LoraRefusal, LoraShapeNotFittingModule) {
  expect_refused(
      "a_wrong_in",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::zeros({4, 25}, DType::kF32));
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k");
  expect_refused(
      "b_wrong_out",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::zeros({4, 24}, DType::kF32));
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({33, 4}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k");
  expect_refused(
      "qkv_wrong_rows",
      [](AdapterFile& f) {
        f.raw("diffusion_model.blocks.1.attn.qkv_proj.lora_A.weight",
              Tensor::zeros({4, 24}, DType::kF32));
        f.raw("diffusion_model.blocks.1.attn.qkv_proj.lora_B.weight",
              Tensor::zeros({95, 4}, DType::kF32));
      },
      ErrorCode::kInvalidFile, "blocks.1.attn.qkv_proj");
  expect_refused(
      "a_not_a_matrix",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::zeros({4, 24, 1}, DType::kF32));
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k");
}

TEST_F(LoraRefusal, LoraDenseUpdateOfWrongShape) {
  expect_refused(
      "diff_shape",
      [](AdapterFile& f) {
        f.raw("transformer_blocks.0.norm1.diff", Tensor::zeros({23}, DType::kF32));
      },
      ErrorCode::kInvalidFile, "transformer_blocks.0.norm1");
  expect_refused(
      "diff_b_shape",
      [](AdapterFile& f) {
        f.raw("proj_in.diff_b", Tensor::zeros({24, 1}, DType::kF32));
      },
      ErrorCode::kInvalidFile, "proj_in.diff_b");
  expect_refused(
      "set_weight_shape",
      [](AdapterFile& f) {
        f.raw("norm_out.linear.set_weight", Tensor::zeros({16, 48}, DType::kF32));
      },
      ErrorCode::kInvalidFile, "norm_out.linear.set_weight");
}

TEST_F(LoraRefusal, LoraNonFiniteValues) {
  expect_refused(
      "nan_in_a",
      [](AdapterFile& f) {
        std::vector<float> a(4 * 24, 0.5f);
        a[37] = std::numeric_limits<float>::quiet_NaN();
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::from_f32(a, {4, 24}));
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k.lora_A.weight");
  expect_refused(
      "inf_in_diff",
      [](AdapterFile& f) {
        std::vector<float> d(24, 0.0f);
        d[3] = -std::numeric_limits<float>::infinity();
        f.raw("transformer_blocks.1.norm2.diff", Tensor::from_f32(d, {24}, DType::kBF16));
      },
      ErrorCode::kInvalidFile, "transformer_blocks.1.norm2.diff");
  expect_refused(
      "nan_alpha",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_down.weight", Tensor::zeros({4, 24}, DType::kF32));
        f.raw(attn(1) + ".to_k.lora_up.weight", Tensor::zeros({32, 4}, DType::kF32));
        f.alpha(attn(1) + ".to_k.alpha", std::numeric_limits<float>::quiet_NaN());
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k.alpha");
}

TEST_F(LoraRefusal, LoKrLoHaDoRaLora) {
  expect_refused(
      "lokr",
      [](AdapterFile& f) {
        f.raw("lora_unet_blocks_0_attn_out_proj.lokr_w1", Tensor::zeros({4, 4}, DType::kF32));
        f.raw("lora_unet_blocks_0_attn_out_proj.lokr_w2", Tensor::zeros({6, 8}, DType::kF32));
      },
      ErrorCode::kUnsupported, "lora_unet_blocks_0_attn_out_proj.lokr_w");
  expect_refused(
      "loha",
      [](AdapterFile& f) {
        for (const char* k : {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"})
          f.raw(std::string("lora_unet_blocks_0_attn_out_proj.") + k,
                Tensor::zeros({4, 4}, DType::kF32));
      },
      ErrorCode::kUnsupported, "lora_unet_blocks_0_attn_out_proj.hada_w");
  expect_refused(
      "dora",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::zeros({4, 24}, DType::kF32));
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
        f.raw(attn(1) + ".to_k.dora_scale", Tensor::zeros({32, 1}, DType::kF32));
      },
      ErrorCode::kUnsupported, attn(1) + ".to_k.dora_scale");
}

TEST_F(LoraRefusal, LoraNonFloatDtype) {
  expect_refused(
      "int_a",
      [](AdapterFile& f) {
        f.raw(attn(1) + ".to_k.lora_A.weight", Tensor::zeros({4, 24}, DType::kI32));
        f.raw(attn(1) + ".to_k.lora_B.weight", Tensor::zeros({32, 4}, DType::kF32));
      },
      ErrorCode::kInvalidFile, attn(1) + ".to_k.lora_A.weight");
  expect_refused(
      "u8_diff",
      [](AdapterFile& f) {
        f.raw("transformer_blocks.1.norm2.diff", Tensor::zeros({24}, DType::kU8));
      },
      ErrorCode::kInvalidFile, "transformer_blocks.1.norm2.diff");
}

TEST_F(LoraDit, LoraCorruptFileRefused) {
  const fs::path dir = path("corrupt");
  fs::create_directories(dir);
  const std::string text = (dir / "not_safetensors.safetensors").string();
  std::ofstream(text) << "this is not a safetensors file, only some text in a file named so";
  try {
    read_lora(text, config_);
    ADD_FAILURE() << "text file accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << e.what();
    EXPECT_NE(e.message().find(text), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
  const AdapterFile f = diffusers_adapter(161);
  const std::string cut = f.write(dir / "truncated.safetensors");
  fs::resize_file(cut, fs::file_size(cut) / 2);
  try {
    read_lora(cut, config_);
    ADD_FAILURE() << "truncated file accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << e.what();
    EXPECT_NE(e.message().find(cut), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
  const std::string missing = (dir / "missing.safetensors").string();
  try {
    read_lora(missing, config_);
    ADD_FAILURE() << "missing file accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
    EXPECT_NE(e.message().find(missing), std::string::npos) << e.what();
  }
}

// ---- 9. partitions
// -------------------------------------------------------------------------------

TEST_F(LoraDit, LoraPartitionPrefixes) {
  AdapterFile main(config_, 171), ref(config_, 172), both(config_, 173);
  // One file, keys for both partitions; `main`, `ref` and `both` hold the expectations of each.
  main.low_rank("transformer." + attn(0) + ".to_k.lora_A.weight",
                "transformer." + attn(0) + ".to_k.lora_B.weight", Rows::kPlain, attn(0) + ".to_k",
                4, 1.0);
  ref.low_rank("transformer_ref." + attn(0) + ".to_q.lora_A.weight",
               "transformer_ref." + attn(0) + ".to_q.lora_B.weight", Rows::kPlain,
               attn(0) + ".to_q", 4, 1.0);
  ref.diff("transformer_ref.proj_out.diff_b", "proj_out.bias");
  AdapterFile file_tensors(config_, 0);
  for (AdapterFile* a : {&main, &ref})
    for (const io::NamedTensor& t : a->tensors()) file_tensors.raw(t.name, t.tensor);
  const std::string file = file_tensors.write(path("partition/lora.safetensors"));
  const LoraAdapter a = read_lora(file, config_);
  ASSERT_NE(find_update(a, attn(0) + ".to_k.weight"), nullptr);
  ASSERT_NE(find_update(a, attn(0) + ".to_q.weight"), nullptr);
  EXPECT_EQ(find_update(a, attn(0) + ".to_k.weight")->partition, "transformer");
  EXPECT_EQ(find_update(a, attn(0) + ".to_q.weight")->partition, "transformer_ref");
  EXPECT_EQ(find_update(a, "proj_out.bias")->partition, "transformer_ref");

  // Bare keys apply to whichever partition.
  both.low_rank(attn(1) + ".to_v.lora_A.weight", attn(1) + ".to_v.lora_B.weight", Rows::kPlain,
                attn(1) + ".to_v", 4, 1.0);
  const LoraAdapter b = read_lora(both.write(path("partition/bare.safetensors")), config_);
  EXPECT_EQ(b.updates.at(0).partition, "");

  DitModel m = load();
  const Snapshot before = snapshot(m);
  m.apply_loras({{&a, 0.75f}, {&b, 0.75f}}, LoraMode::kFused, true);
  expect_updated(m, before, {{&main, 0.75}, {&both, 0.75}}, "partition transformer");
  m.apply_loras({{&a, 0.75f}, {&b, 0.75f}}, LoraMode::kFused, true, "transformer_ref");
  expect_updated(m, before, {{&ref, 0.75}, {&both, 0.75}}, "partition transformer_ref");
  // Run time: the pairs sit beside the weights of their own partition only.
  m.apply_loras({{&a, 0.75f}, {&b, 0.75f}}, LoraMode::kRuntime, true, "transformer_ref");
  EXPECT_EQ(m.weights().blocks[0].attn.to_q_lora.size(), 1u);
  EXPECT_TRUE(m.weights().blocks[0].attn.to_k_lora.empty());
  EXPECT_EQ(m.weights().blocks[1].attn.to_v_lora.size(), 1u);
  m.apply_loras({{&a, 0.75f}, {&b, 0.75f}}, LoraMode::kRuntime, true, "transformer");
  EXPECT_TRUE(m.weights().blocks[0].attn.to_q_lora.empty());
  EXPECT_EQ(m.weights().blocks[0].attn.to_k_lora.size(), 1u);
  EXPECT_EQ(m.weights().blocks[1].attn.to_v_lora.size(), 1u);
  // The proj_out.bias diff is for transformer_ref alone: folded only there.
  EXPECT_EQ(test::count_bit_mismatches(m.weights().proj_out_b, before.at("proj_out.bias")), 0);
}

}  // namespace
}  // namespace h3::dit
