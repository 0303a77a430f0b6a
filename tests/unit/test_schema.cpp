// Tensor schemas (models/schema) and make-tiny (models/tiny_model):
//  - each schema equals the golden tiny-h3 checkpoint's tensor list (manifest, kind "checkpoint");
//  - at the released configs, the totals equal the specs' figures;
//  - the check reports removed, renamed, reshaped and retyped tensors;
//  - make-tiny writes a repository that passes the inspection, deterministically, and the
//    released-shape variant is sparse, sharded like the release, with exact headers.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/repo.h"
#include "io/safetensors.h"
#include "models/schema.h"
#include "models/tiny_model.h"
#include "support/golden.h"
#include "text/tokenizer.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;
using models::Schema;

using test::TempDir;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

Schema schema_for_config(const std::string& component, const nlohmann::json& config) {
  if (component == "text_encoder") return models::qwen3_vl_schema(config);
  if (component == "vae") return models::video_vae_schema(config);
  if (component == "audio_vae") return models::audio_vae_schema(config);
  return models::dit_schema(config);
}

std::vector<io::TensorInfo> infos_of(const Schema& s) {
  std::vector<io::TensorInfo> out;
  for (const auto& t : s.tensors) {
    if (!t.optional) out.push_back({t.name, t.dtype, t.shape, 0, t.nbytes()});
  }
  return out;
}

// "BF16[1088, 32]" -> dtype and shape.
void parse_manifest_tensor(const std::string& s, DType* dtype, Shape* shape) {
  const size_t open = s.find('[');
  ASSERT_NE(open, std::string::npos) << s;
  ASSERT_TRUE(dtype_from_safetensors_name(s.substr(0, open), dtype)) << s;
  shape->clear();
  const nlohmann::json dims = nlohmann::json::parse(s.substr(open));
  for (const auto& d : dims) shape->push_back(d.get<int64_t>());
}

// ---- schemas against the golden checkpoint ------------------------------------------------------

TEST(Schema, MatchesGoldenTinyCheckpoint) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "checkpoint");
  int checked = 0;
  for (const auto& c : cases) {
    if (!c.entry.contains("tensors") || fs::path(c.file).extension() != ".safetensors") continue;
    const fs::path folder = fs::path(c.path).parent_path();
    const std::string component = folder.filename().string();
    const Schema schema = schema_for_config(component, read_json(folder / "config.json"));
    std::map<std::string, const models::TensorSpec*> expected;
    for (const auto& t : schema.tensors) {
      if (!t.optional) expected[t.name] = &t;
    }
    size_t matched = 0;
    for (const auto& [name, desc] : c.entry["tensors"].items()) {
      DType dt;
      Shape shape;
      parse_manifest_tensor(desc.get<std::string>(), &dt, &shape);
      auto it = expected.find(name);
      if (it == expected.end()) {
        ADD_FAILURE() << c.file << ": schema lacks '" << name << "'";
        continue;
      }
      EXPECT_EQ(shape_str(it->second->shape), shape_str(shape)) << c.file << " " << name;
      EXPECT_EQ(it->second->dtype, dt) << c.file << " " << name;
      ++matched;
    }
    EXPECT_EQ(matched, expected.size()) << c.file << ": schema has tensors the checkpoint lacks";
    std::printf("%s: %zu/%zu tensors match (schema %s)\n", c.file.c_str(), matched, expected.size(),
                schema.family.c_str());
    ++checked;
  }
  EXPECT_EQ(checked, 5) << "expected the five weight files of tiny-h3 in the manifest";
}

// ---- released totals against the specs' figures ------------------------------------------------

TEST(Schema, ReleasedDitTotalsMatchSpec) {
  // h3_dit_spec.md §1.3 / §7.1.
  const Schema s = models::dit_schema(models::make_tiny_config("transformer", true));
  int64_t tensors = 0, fp32 = 0, adaln = 0, block0 = 0;
  for (const auto& t : s.tensors) {
    if (t.optional) continue;
    ++tensors;
    if (t.dtype == DType::kF32) fp32 += t.numel();
    if (t.name.find("adaln_proj") != std::string::npos) adaln += t.numel();
    if (t.name.rfind("transformer_blocks.0.", 0) == 0) block0 += t.numel();
  }
  std::printf("DiT: %lld tensors, %lld params, %llu bytes, fp32 %lld, adaln %lld, block %lld\n",
              static_cast<long long>(tensors), static_cast<long long>(s.param_count()),
              static_cast<unsigned long long>(s.byte_count()), static_cast<long long>(fp32),
              static_cast<long long>(adaln), static_cast<long long>(block0));
  EXPECT_EQ(tensors, 638);
  EXPECT_EQ(s.param_count(), 33'122'992'896);
  EXPECT_EQ(s.byte_count(), 66'280'430'080ull);
  EXPECT_EQ(fp32, 17'222'144);
  EXPECT_EQ(adaln, 13'010'457'600);
  EXPECT_EQ(block0, 645'571'840);
  const auto* w = s.find("transformer_blocks.49.adaln_proj.linear.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (Shape{96768, 2688}));
  EXPECT_EQ(s.find("proj_in.weight")->dtype, DType::kF32);
}

TEST(Schema, ReleasedDitRankReducedVariant) {
  // h3_dit_spec.md §1.6: adaln_rank adds a basis and shrinks every AdaLN projection (fp16).
  nlohmann::json c = models::make_tiny_config("transformer", true);
  c["adaln_rank"] = 16;
  const Schema s = models::dit_schema(c);
  ASSERT_NE(s.find("adaln_basis.weight"), nullptr);
  EXPECT_EQ(s.find("adaln_basis.weight")->shape, (Shape{16, 2688}));
  EXPECT_EQ(s.find("transformer_blocks.3.adaln_proj.linear.weight")->shape, (Shape{96768, 16}));
  EXPECT_EQ(s.find("norm_out.linear.weight")->dtype, DType::kF16);
  const double params = static_cast<double>(s.param_count());
  std::printf("rank-16 DiT: %.4f B params (spec: about 20.17 B)\n", params / 1e9);
  EXPECT_NEAR(params / 1e9, 20.17, 0.01);
  c["adaln_rank"] = 4000;  // outside (0, time_embed_dim]
  EXPECT_THROW(models::dit_schema(c), Error);
}

TEST(Schema, ReleasedComponentTotalsMatchSpec) {
  // h3_components_spec.md §6.1.
  const Schema te = models::qwen3_vl_schema(models::make_tiny_config("text_encoder", true));
  int64_t layer0 = 0, vision = 0;
  for (const auto& t : te.tensors) {
    if (t.name.rfind("model.language_model.layers.0.", 0) == 0) layer0 += t.numel();
    if (t.name.rfind("model.visual.", 0) == 0) vision += t.numel();
  }
  const Schema vae = models::video_vae_schema(models::make_tiny_config("vae", true));
  int64_t vae_enc = 0;
  for (const auto& t : vae.tensors) {
    if (t.name.rfind("encoder.", 0) == 0 || t.name.rfind("quant_conv.", 0) == 0)
      vae_enc += t.numel();
  }
  const Schema audio = models::audio_vae_schema(models::make_tiny_config("audio_vae", true));
  std::printf("text encoder: %lld params (%llu bytes), built %lld, layer %lld, vision %lld\n",
              static_cast<long long>(te.param_count()),
              static_cast<unsigned long long>(te.byte_count()),
              static_cast<long long>(te.param_count(true)), static_cast<long long>(layer0),
              static_cast<long long>(vision));
  std::printf("video VAE: %lld params (encoder %lld); audio VAE: %lld params\n",
              static_cast<long long>(vae.param_count()), static_cast<long long>(vae_enc),
              static_cast<long long>(audio.param_count()));
  EXPECT_EQ(layer0, 487'598'336);
  EXPECT_NEAR(static_cast<double>(te.param_count()) / 1e9, 33.36, 0.005);
  EXPECT_NEAR(static_cast<double>(te.param_count(true)) / 1e9, 25.75, 0.005);
  EXPECT_NEAR(static_cast<double>(te.byte_count()) / (1ull << 30), 62.1, 0.05);
  EXPECT_NEAR(static_cast<double>(vision) / 1e9, 0.595, 0.0005);
  EXPECT_NEAR(static_cast<double>(vae.param_count()) / 1e9, 2.604, 0.0005);
  EXPECT_NEAR(static_cast<double>(vae_enc) / 1e9, 0.180, 0.0005);
  EXPECT_NEAR(static_cast<double>(vae.byte_count()) / 1e9, 10.42, 0.005);
  EXPECT_NEAR(static_cast<double>(audio.param_count()) / 1e9, 0.151, 0.0005);
}

// ---- the check
// ------------------------------------------------------------------------------------

TEST(Schema, CheckReportsRemovedRenamedReshapedRetyped) {
  const Schema s = models::dit_schema(models::make_tiny_config("transformer", false));
  const std::vector<io::TensorInfo> good = infos_of(s);
  const models::SchemaCheck ok = models::check_schema(s, good);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.matched, static_cast<int64_t>(good.size()));
  EXPECT_TRUE(ok.errors().empty());

  auto find = [](std::vector<io::TensorInfo>& v, const std::string& name) -> io::TensorInfo& {
    for (auto& t : v) {
      if (t.name == name) return t;
    }
    throw Error(ErrorCode::kNotFound, name);
  };

  std::vector<io::TensorInfo> removed = good;
  removed.erase(removed.begin() + 5);
  models::SchemaCheck r = models::check_schema(s, removed);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.missing.size(), 1u);
  EXPECT_EQ(r.missing[0], good[5].name);
  EXPECT_TRUE(r.unexpected.empty());

  std::vector<io::TensorInfo> renamed = good;
  find(renamed, "transformer_blocks.1.attn.to_q.weight").name =
      "transformer_blocks.1.attn.q_proj.weight";
  r = models::check_schema(s, renamed);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.missing, std::vector<std::string>{"transformer_blocks.1.attn.to_q.weight"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"transformer_blocks.1.attn.q_proj.weight"});

  std::vector<io::TensorInfo> reshaped = good;
  find(reshaped, "norm_out.linear.weight").shape = {64, 192};
  r = models::check_schema(s, reshaped);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.misshapen.size(), 1u);
  EXPECT_EQ(r.misshapen[0].expected_shape, (Shape{192, 64}));
  EXPECT_NE(r.errors()[0].find("has shape [64, 192], expected [192, 64]"), std::string::npos)
      << r.errors()[0];

  // A float stored at another precision loads (converted): a warning, not an error.
  std::vector<io::TensorInfo> widened = good;
  find(widened, "context_embedder.weight").dtype = DType::kF32;
  r = models::check_schema(s, widened);
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(r.dtype_warnings.size(), 1u);
  EXPECT_NE(r.warnings()[0].find("stored as f32, the release stores bf16"), std::string::npos);

  std::vector<io::TensorInfo> integer = good;
  find(integer, "proj_in.bias").dtype = DType::kI32;
  r = models::check_schema(s, integer);
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.bad_dtype.size(), 1u);

  // FastH3's gates are optional: present or absent, no error.
  std::vector<io::TensorInfo> gated = good;
  gated.push_back(
      {"transformer_blocks.0.attn.to_gate_compress.weight", DType::kBF16, {128, 96}, 0, 0});
  EXPECT_TRUE(models::check_schema(s, gated).ok());
}

TEST(Schema, TextEncoderSkipsLayersAfterTheTap) {
  const Schema s = models::qwen3_vl_schema(models::make_tiny_config("text_encoder", false));
  ASSERT_NE(s.find("model.language_model.layers.49.mlp.up_proj.weight"), nullptr);
  EXPECT_TRUE(s.find("model.language_model.layers.49.mlp.up_proj.weight")->used);
  EXPECT_FALSE(s.find("model.language_model.layers.50.mlp.up_proj.weight")->used);
  EXPECT_FALSE(s.find("model.language_model.norm.weight")->used);
  EXPECT_FALSE(s.find("lm_head.weight")->used);
  const models::SchemaCheck r = models::check_schema(s, infos_of(s));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.skipped, 13);  // layer 50 (11 tensors), final norm, lm_head

  // A tied LM head is not stored.
  nlohmann::json tied = models::make_tiny_config("text_encoder", false);
  tied["tie_word_embeddings"] = true;
  EXPECT_EQ(models::qwen3_vl_schema(tied).find("lm_head.weight"), nullptr);
}

TEST(Schema, ConfigErrorsNameFileAndField) {
  nlohmann::json dit = models::make_tiny_config("transformer", false);
  dit["rope_freq_dim"] = 8;  // 6*8 = 48 rotary channels > head dim 32
  try {
    models::dit_schema(dit, "t/config.json");
    ADD_FAILURE() << "rotary width wider than the head accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("t/config.json"), std::string::npos);
    EXPECT_NE(e.message().find("'rope_freq_dim'"), std::string::npos) << e.what();
  }
  nlohmann::json te = models::make_tiny_config("text_encoder", false);
  te["text_config"]["num_hidden_layers"] = 40;
  try {
    models::qwen3_vl_schema(te, "te/config.json");
    ADD_FAILURE() << "a conditioner without layer 50 accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("te/config.json"), std::string::npos);
    EXPECT_NE(e.message().find("hidden_states[50]"), std::string::npos) << e.what();
  }
  nlohmann::json vae = models::make_tiny_config("vae", false);
  vae.erase("decoder_num_layers");
  EXPECT_THROW(models::video_vae_schema(vae), Error);
}

// ---- make-tiny
// ------------------------------------------------------------------------------------

TEST(MakeTiny, WritesRepositoryThatPassesInspection) {
  TempDir tmp;
  const fs::path root = tmp.path() / "tiny";
  models::make_tiny(root.string(), {.seed = 3});
  const models::RepositoryReport r = models::inspect_repository(root.string());
  for (const auto& c : r.components) {
    for (const auto& e : c.errors) ADD_FAILURE() << c.name << ": " << e;
    if (!c.weights.empty()) {
      std::printf("%-16s %9lld params %5lld tensors\n", c.name.c_str(),
                  static_cast<long long>(c.params), static_cast<long long>(c.tensors));
    }
  }
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(r.components.size(), 9u);
  // No stray temporary folder next to the result.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "tiny");
  }
  EXPECT_EQ(entries, 1);

  // The dimensions of the golden tiny-h3: the same parameter counts per component, for each
  // component whose golden config has make-tiny's architecture (another golden folder may hold
  // another size; the latent statistics are random and change no shape).
  const test::Golden* g = test::Golden::get();
  if (!g) return;
  const models::RepositoryReport gr = models::inspect_repository(g->checkpoint_dir());
  ASSERT_TRUE(gr.ok());
  ASSERT_EQ(gr.components.size(), r.components.size());
  auto architecture = [](const fs::path& config) {
    std::ifstream in(config);
    nlohmann::json j = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (!j.is_object()) return nlohmann::json();
    for (const char* k : {"latents_mean", "latents_std"}) j.erase(k);
    for (auto it = j.begin(); it != j.end();) it = it.key().rfind('_', 0) == 0 ? j.erase(it) : std::next(it);
    return j;
  };
  int compared = 0;
  for (size_t i = 0; i < r.components.size(); ++i) {
    const std::string& name = r.components[i].name;
    EXPECT_EQ(name, gr.components[i].name);
    if (architecture(root / name / "config.json") != architecture(fs::path(g->checkpoint_dir()) / name / "config.json")) {
      std::printf("  %s: the golden checkpoint has another architecture; counts not compared\n", name.c_str());
      continue;
    }
    EXPECT_EQ(r.components[i].params, gr.components[i].params) << name;
    EXPECT_EQ(r.components[i].tensors, gr.components[i].tensors) << name;
    ++compared;
  }
  std::printf("  %d of %zu components compared with the golden checkpoint\n", compared, r.components.size());
  std::printf("make-tiny total %lld params, golden tiny-h3 %lld\n",
              static_cast<long long>(r.total_params()), static_cast<long long>(gr.total_params()));
}

TEST(MakeTiny, DeterministicPerSeed) {
  TempDir a, b, c;
  models::make_tiny((a.path() / "repo").string(), {.seed = 11});
  models::make_tiny((b.path() / "repo").string(), {.seed = 11});
  models::make_tiny((c.path() / "repo").string(), {.seed = 12});
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(a.path() / "repo")) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), a.path());
    EXPECT_EQ(read_bytes(e.path()), read_bytes(b.path() / rel))
        << rel << " differs for equal seeds";
    ++files;
  }
  std::printf("%d files byte-identical for seed 11\n", files);
  EXPECT_GE(files, 20);
  const fs::path w = "repo/transformer/diffusion_pytorch_model.safetensors";
  EXPECT_NE(read_bytes(a.path() / w), read_bytes(c.path() / w)) << "seed does not change weights";
  // transformer and transformer_ref differ (different weights, same architecture).
  EXPECT_NE(read_bytes(a.path() / w),
            read_bytes(a.path() / "repo/transformer_ref/diffusion_pytorch_model.safetensors"));
}

TEST(MakeTiny, WeightsFollowTheInitRules) {
  TempDir tmp;
  models::make_tiny((tmp.path() / "r").string(), {.seed = 5});
  const io::Checkpoint dit = io::Checkpoint::open((tmp.path() / "r/transformer").string());
  const std::vector<float> norm = dit.tensor("transformer_blocks.0.norm1.weight").to_f32_vector();
  double mean = 0;
  for (float v : norm) mean += v;
  mean /= static_cast<double>(norm.size());
  const std::vector<float> w = dit.tensor("transformer_blocks.0.attn.to_q.weight").to_f32_vector();
  double var = 0;
  for (float v : w) var += static_cast<double>(v) * v;
  var /= static_cast<double>(w.size());
  std::printf("norm weight mean %.4f (expect ~1), to_q std %.4f (expect 1/sqrt(96) = %.4f)\n", mean,
              std::sqrt(var), 1.0 / std::sqrt(96.0));
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(std::sqrt(var), 1.0 / std::sqrt(96.0), 0.01);
  EXPECT_EQ(dit.info("proj_in.weight").dtype, DType::kF32);
  EXPECT_EQ(dit.info("context_embedder.weight").dtype, DType::kBF16);

  // The audio anti-aliasing filter is the release's Kaiser sinc: compare with the golden file.
  const io::Checkpoint avae = io::Checkpoint::open((tmp.path() / "r/audio_vae").string());
  const std::vector<float> ours =
      avae.tensor("decoder.activation_post.upsample.filter").to_f32_vector();
  double sum = 0;
  for (float v : ours) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  const test::Golden* g = test::Golden::get();
  if (!g) return;
  const io::Checkpoint gold = io::Checkpoint::open(g->checkpoint_dir() + "/audio_vae");
  const std::vector<float> ref =
      gold.tensor("decoder.activation_post.upsample.filter").to_f32_vector();
  ASSERT_EQ(ref.size(), ours.size());
  double max_abs = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    max_abs = std::max(max_abs, std::abs(double(ref[i]) - ours[i]));
  std::printf("Kaiser-sinc filter vs golden: max_abs=%.3g (bound 1e-6)\n", max_abs);
  EXPECT_LE(max_abs, 1e-6);
}

TEST(MakeTiny, TokenizerMatchesGoldenLayout) {
  TempDir tmp;
  models::make_tiny((tmp.path() / "r").string(), {.seed = 0});
  const fs::path file = tmp.path() / "r/tokenizer/tokenizer.json";
  const nlohmann::json tok = read_json(file);
  EXPECT_EQ(tok["model"]["vocab"].size(), 1024u);
  EXPECT_EQ(tok["model"]["merges"].size(), 768u);
  EXPECT_EQ(tok["normalizer"]["type"], "NFC");
  EXPECT_EQ(tok["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(tok["model"]["vocab"]["!"], 0);
  ASSERT_EQ(tok["added_tokens"].size(), 26u);

  const test::Golden* g = test::Golden::get();
  if (g) {
    // Added tokens at the golden's ids, same flags; the same pre-tokenizer.
    const nlohmann::json gold = read_json(g->checkpoint_dir() + "/tokenizer/tokenizer.json");
    EXPECT_EQ(tok["added_tokens"], gold["added_tokens"]);
    EXPECT_EQ(tok["pre_tokenizer"], gold["pre_tokenizer"]);
    EXPECT_EQ(tok["normalizer"], gold["normalizer"]);
    // The 256 byte tokens have the same ids.
    int same = 0;
    for (const auto& [k, v] : gold["model"]["vocab"].items()) {
      if (v.get<int>() < 256) {
        EXPECT_EQ(tok["model"]["vocab"].value(k, -1), v.get<int>()) << k;
        ++same;
      }
    }
    EXPECT_EQ(same, 256);
  }

  // It is a working tokenizer: the engine's own BPE round-trips text through it.
  const text::Tokenizer t = text::Tokenizer::from_file(file.string());
  const std::string text = "A red fox crosses the snow at sunrise. <|vision_start|>";
  const std::vector<int32_t> ids = t.encode(text);
  EXPECT_EQ(ids.back(), 1033);
  EXPECT_LT(ids.size(), text.size() / 2) << "merges barely compress English text";
  EXPECT_EQ(t.decode(ids), text);
  std::printf("%zu bytes -> %zu tokens\n", text.size(), ids.size());
}

TEST(MakeTiny, RefusesNonEmptyTarget) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "full");
  std::ofstream(tmp.path() / "full" / "keep.txt") << "x";
  EXPECT_THROW(models::make_tiny((tmp.path() / "full").string()), Error);
  EXPECT_TRUE(fs::exists(tmp.path() / "full" / "keep.txt"));
  // An empty folder is fine (replaced by the result).
  fs::create_directories(tmp.path() / "empty");
  models::make_tiny((tmp.path() / "empty").string());
  EXPECT_TRUE(fs::exists(tmp.path() / "empty" / "modular_model_index.json"));
  // Missing parents are made; a parent that is a file is an error, and nothing is written.
  models::make_tiny((tmp.path() / "no/such/parent/x").string());
  EXPECT_TRUE(fs::exists(tmp.path() / "no/such/parent/x/modular_model_index.json"));
  std::ofstream(tmp.path() / "file") << "x";
  EXPECT_THROW(models::make_tiny((tmp.path() / "file/x").string()), Error);
  EXPECT_TRUE(fs::is_regular_file(tmp.path() / "file"));
}

TEST(MakeTiny, ShardPlan) {
  const std::vector<int> s = models::plan_shards({3, 3, 3, 10, 1, 1}, 6);
  EXPECT_EQ(s, (std::vector<int>{0, 0, 1, 2, 3, 3}));
}

TEST(MakeTiny, ReleasedShapesAreSparseAndExact) {
  fs::path kept;
  {
    TempDir tmp;
    kept = tmp.path();
    const fs::path root = tmp.path() / "released";
    models::make_tiny(root.string(), {.seed = 0, .released_shapes = true});
    const models::RepositoryReport r = models::inspect_repository(root.string());
    for (const auto& c : r.components) {
      for (const auto& e : c.errors) ADD_FAILURE() << c.name << ": " << e;
    }
    ASSERT_TRUE(r.ok());
    std::map<std::string, const models::ComponentReport*> by;
    for (const auto& c : r.components) by[c.name] = &c;
    EXPECT_EQ(by["transformer"]->params, 33'122'992'896);
    EXPECT_EQ(by["transformer"]->bytes, 66'280'430'080ull);
    EXPECT_EQ(by["transformer_ref"]->params, 33'122'992'896);
    EXPECT_EQ(by["transformer"]->files, 14);
    EXPECT_EQ(by["text_encoder"]->files, 14);
    EXPECT_EQ(by["vae"]->files, 3);
    EXPECT_EQ(by["audio_vae"]->files, 1);
    EXPECT_NEAR(static_cast<double>(by["text_encoder"]->used_params) / 1e9, 25.75, 0.005);
    EXPECT_TRUE(
        fs::exists(root / "transformer/diffusion_pytorch_model-00014-of-00014.safetensors"));
    EXPECT_TRUE(fs::exists(root / "text_encoder/model.safetensors.index.json"));

    const io::Checkpoint dit = io::Checkpoint::open((root / "transformer").string());
    EXPECT_EQ(dit.info("transformer_blocks.49.ff.net.0.proj.weight").shape, (Shape{28672, 5376}));
    EXPECT_EQ(dit.info("proj_in.weight").dtype, DType::kF32);
    const io::Checkpoint te = io::Checkpoint::open((root / "text_encoder").string());
    EXPECT_EQ(te.info("model.language_model.layers.63.mlp.down_proj.weight").shape,
              (Shape{5120, 25600}));
    EXPECT_EQ(te.info("model.visual.patch_embed.proj.weight").shape, (Shape{1152, 3, 2, 16, 16}));
    const nlohmann::json index =
        read_json(root / "transformer/diffusion_pytorch_model.safetensors.index.json");
    EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 66'280'430'080ull);
    EXPECT_EQ(index["weight_map"].size(), 638u);

    // Logical size is the release's; blocks on disk are headers only.
    uint64_t logical = 0, allocated = 0;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file()) continue;
      struct stat st {};
      ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
      logical += static_cast<uint64_t>(st.st_size);
      allocated += static_cast<uint64_t>(st.st_blocks) * 512;
    }
    std::printf("released-shape repository: %.1f GB logical, %.2f MB allocated, %lld params\n",
                static_cast<double>(logical) / 1e9, static_cast<double>(allocated) / 1e6,
                static_cast<long long>(r.total_params()));
    EXPECT_GT(logical, 200'000'000'000ull);
    EXPECT_LT(allocated, 64ull << 20);
  }
  EXPECT_FALSE(fs::exists(kept)) << "temporary folder left behind";
}

}  // namespace
}  // namespace h3
