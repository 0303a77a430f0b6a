// Repository layout parsing (io/repo): a valid repository opens with its components, configs and
// weights resolved; every structural defect is an h3::Error that names the file and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/repo.h"
#include "models/tiny_model.h"
#include "support/golden.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
}

void write_json(const fs::path& p, const nlohmann::json& j) { write_file(p, j.dump(2)); }

// A fresh, writable tiny repository for each test: a copy of one made once per run (writing it
// syncs every file, copying does not).
const fs::path& tiny_template() {
  static TempDir dir;
  static const fs::path root = [] {
    const fs::path r = dir.path() / "tiny";
    models::make_tiny(r.string(), {.seed = 1});
    return r;
  }();
  return root;
}

struct TinyRepo {
  TempDir tmp;
  fs::path root = tmp.path() / "tiny";
  TinyRepo() { fs::copy(tiny_template(), root, fs::copy_options::recursive); }
};

// Opens `root` expecting an h3::Error; returns it (code and message checked by the caller).
Error open_error(const fs::path& root) {
  try {
    io::Repository::open(root.string());
  } catch (const Error& e) {
    std::printf("  error: %s\n", e.what());
    return e;
  }
  ADD_FAILURE() << "Repository::open(" << root << ") succeeded, expected an error";
  return Error(ErrorCode::kInternal, "");
}

TEST(Repo, OpensTinyRepository) {
  TinyRepo repo;
  const io::Repository r = io::Repository::open(repo.root.string());
  EXPECT_EQ(r.components().size(), 9u);
  EXPECT_EQ(r.pipeline_class(), "MiniMaxH3ModularPipeline");
  EXPECT_EQ(r.pipeline_config().at("canvas_short_edge"), 64);
  EXPECT_EQ(fs::path(r.index_file()).filename(), "modular_model_index.json");
  for (const auto& name : io::required_component_names()) EXPECT_TRUE(r.has(name)) << name;
  ASSERT_TRUE(r.has("transformer_ref"));

  const io::Component& t = r.component("transformer");
  EXPECT_EQ(t.kind, io::ComponentKind::kTransformer);
  EXPECT_EQ(t.library, "diffusers");
  EXPECT_EQ(t.config.at("hidden_size"), 96);
  EXPECT_EQ(fs::path(t.config_file).filename(), "config.json");
  EXPECT_EQ(fs::path(t.weights).filename(), "diffusion_pytorch_model.safetensors");
  ASSERT_EQ(t.weight_files.size(), 1u);

  const io::Component& te = r.component("text_encoder");
  EXPECT_EQ(te.kind, io::ComponentKind::kTextEncoder);
  EXPECT_EQ(fs::path(te.weights).filename(), "model.safetensors");
  EXPECT_EQ(fs::path(r.component("scheduler").config_file).filename(), "scheduler_config.json");
  EXPECT_EQ(fs::path(r.component("processor").config_file).filename(), "processor_config.json");
  EXPECT_EQ(fs::path(r.component("tokenizer").config_file).filename(), "tokenizer.json");
  EXPECT_TRUE(r.component("tokenizer").weights.empty());

  const io::Checkpoint ck = r.checkpoint("transformer");
  EXPECT_TRUE(ck.has("proj_in.weight"));
  EXPECT_THROW(r.checkpoint("scheduler"), Error);
  EXPECT_THROW(r.component("no_such_component"), Error);
}

TEST(Repo, OpensGoldenTinyH3) {
  const test::Golden* g = test::Golden::get();
  if (!g) {
    if (test::golden_required()) FAIL() << "golden folder missing: " << test::golden_dir();
    GTEST_SKIP() << "golden folder not found at " << test::golden_dir();
  }
  const io::Repository r = io::Repository::open(g->checkpoint_dir());
  EXPECT_EQ(r.components().size(), 9u);
  // The index names its own folder (the manifest's `checkpoint`, tiny-h3 in the shared folder).
  EXPECT_EQ(r.component("vae").pretrained,
            fs::path(g->manifest().value("checkpoint", std::string())).filename().string());
  EXPECT_EQ(r.component("text_encoder").class_name, "Qwen3VLForConditionalGeneration");
  // The pipeline configuration is kept verbatim (the shared folder's shrinks the canvas to 64).
  const nlohmann::json index = io::read_json_file(r.index_file());
  ASSERT_TRUE(index.contains("reference_image_short_edge"));
  EXPECT_EQ(r.pipeline_config().at("reference_image_short_edge"), index["reference_image_short_edge"]);
  std::printf("golden repository %s: %zu components\n", r.root().c_str(), r.components().size());
}

TEST(Repo, PlainModelIndexIsAccepted) {
  TinyRepo repo;
  fs::rename(repo.root / "modular_model_index.json", repo.root / "model_index.json");
  const io::Repository r = io::Repository::open(repo.root.string());
  EXPECT_EQ(fs::path(r.index_file()).filename(), "model_index.json");
}

TEST(Repo, MissingRootOrIndex) {
  TempDir tmp;
  Error e = open_error(tmp.path() / "does_not_exist");
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find("does_not_exist"), std::string::npos);
  e = open_error(tmp.path());
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find("modular_model_index.json"), std::string::npos);
}

TEST(Repo, InvalidIndexJson) {
  TinyRepo repo;
  write_file(repo.root / "modular_model_index.json", "{\"transformer\": [\"diffusers\", ");
  const Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
  EXPECT_NE(e.message().find("modular_model_index.json"), std::string::npos);
  EXPECT_NE(e.message().find("invalid JSON"), std::string::npos);
}

TEST(Repo, IndexMissingRequiredComponent) {
  TinyRepo repo;
  nlohmann::json index = read_json(repo.root / "modular_model_index.json");
  index.erase("audio_vae");
  write_json(repo.root / "modular_model_index.json", index);
  const Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
  EXPECT_NE(e.message().find("modular_model_index.json"), std::string::npos);
  EXPECT_NE(e.message().find("'audio_vae'"), std::string::npos);
}

TEST(Repo, TransformerRefIsOptional) {
  TinyRepo repo;
  nlohmann::json index = read_json(repo.root / "modular_model_index.json");
  index.erase("transformer_ref");
  write_json(repo.root / "modular_model_index.json", index);
  const io::Repository r = io::Repository::open(repo.root.string());
  EXPECT_FALSE(r.has("transformer_ref"));
  EXPECT_EQ(r.components().size(), 8u);
}

TEST(Repo, MalformedComponentEntry) {
  TinyRepo repo;
  nlohmann::json index = read_json(repo.root / "modular_model_index.json");
  index["vae"] = nlohmann::json::array({"diffusers"});
  write_json(repo.root / "modular_model_index.json", index);
  Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
  EXPECT_NE(e.message().find("component 'vae'"), std::string::npos);

  index = read_json(repo.root / "modular_model_index.json");
  index["vae"] = {"diffusers", "AutoencoderKLMiniMaxH3", {{"subfolder", "../elsewhere"}}};
  write_json(repo.root / "modular_model_index.json", index);
  e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
  EXPECT_NE(e.message().find("subfolder"), std::string::npos);
}

TEST(Repo, MissingComponentFolder) {
  TinyRepo repo;
  fs::remove_all(repo.root / "vae");
  const Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find((repo.root / "vae").string()), std::string::npos);
  EXPECT_NE(e.message().find("component folder not found"), std::string::npos);
}

TEST(Repo, MissingConfigFiles) {
  struct Case {
    const char* file;
    const char* component;
  };
  for (const Case c : {Case{"transformer/config.json", "transformer"},
                       Case{"scheduler/scheduler_config.json", "scheduler"},
                       Case{"tokenizer/tokenizer.json", "tokenizer"},
                       Case{"processor/processor_config.json", "processor"}}) {
    TinyRepo repo;
    fs::remove(repo.root / c.file);
    const Error e = open_error(repo.root);
    EXPECT_EQ(e.code(), ErrorCode::kNotFound) << c.file;
    EXPECT_NE(e.message().find((repo.root / c.file).string()), std::string::npos) << c.file;
    EXPECT_NE(e.message().find(std::string("'") + c.component + "'"), std::string::npos) << c.file;
  }
}

TEST(Repo, InvalidConfigJson) {
  TinyRepo repo;
  write_file(repo.root / "vae" / "config.json", "{ \"latent_channels\": 24,, }");
  const Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
  EXPECT_NE(e.message().find((repo.root / "vae" / "config.json").string()), std::string::npos);
  EXPECT_NE(e.message().find("invalid JSON"), std::string::npos);
}

TEST(Repo, MissingRequiredFields) {
  struct Case {
    const char* file;
    const char* field;  // dotted path erased from the file
  };
  for (const Case c :
       {Case{"transformer/config.json", "hidden_size"},
        Case{"transformer_ref/config.json", "patch_size"},
        Case{"text_encoder/config.json", "text_config.head_dim"},
        Case{"text_encoder/config.json", "vision_config.deepstack_visual_indexes"},
        Case{"vae/config.json", "latents_std"}, Case{"audio_vae/config.json", "decoder_rates"},
        Case{"scheduler/scheduler_config.json", "shift"},
        Case{"processor/processor_config.json", "image_processor.merge_size"}}) {
    TinyRepo repo;
    const fs::path file = repo.root / c.file;
    nlohmann::json j = read_json(file);
    const std::string field = c.field;
    const size_t dot = field.find('.');
    if (dot == std::string::npos) {
      j.erase(field);
    } else {
      j[field.substr(0, dot)].erase(field.substr(dot + 1));
    }
    write_json(file, j);
    const Error e = open_error(repo.root);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << c.file << " " << c.field;
    EXPECT_NE(e.message().find(file.string()), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("'" + field + "'"), std::string::npos) << e.message();
  }
}

TEST(Repo, InvalidFieldValues) {
  TinyRepo repo;
  nlohmann::json j = read_json(repo.root / "transformer" / "config.json");
  j["num_layers"] = "three";
  write_json(repo.root / "transformer" / "config.json", j);
  Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
  EXPECT_NE(e.message().find("'num_layers' must be an integer"), std::string::npos);

  TinyRepo repo2;
  j = read_json(repo2.root / "vae" / "config.json");
  j["latents_mean"] = {0.0, 1.0};  // 24 expected
  write_json(repo2.root / "vae" / "config.json", j);
  e = open_error(repo2.root);
  EXPECT_NE(e.message().find("'latents_mean' must be a list of 24 numbers"), std::string::npos);

  // The pipeline's shifts are fixed (h3_dit_spec.md §1.1).
  TinyRepo repo3;
  j = read_json(repo3.root / "audio_scheduler" / "scheduler_config.json");
  j["shift"] = 12.0;
  write_json(repo3.root / "audio_scheduler" / "scheduler_config.json", j);
  e = open_error(repo3.root);
  EXPECT_NE(e.message().find("audio_scheduler"), std::string::npos);
  EXPECT_NE(e.message().find("must be 3"), std::string::npos);
}

TEST(Repo, MissingWeights) {
  TinyRepo repo;
  fs::remove(repo.root / "audio_vae" / "diffusion_pytorch_model.safetensors");
  const Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find((repo.root / "audio_vae").string()), std::string::npos);
  EXPECT_NE(e.message().find("no weights"), std::string::npos);
}

TEST(Repo, ShardedCheckpointWithMissingShard) {
  TinyRepo repo;
  // Re-express the transformer as a one-shard index naming a second, absent shard.
  const fs::path folder = repo.root / "transformer";
  fs::rename(folder / "diffusion_pytorch_model.safetensors",
             folder / "diffusion_pytorch_model-00001-of-00002.safetensors");
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  index["weight_map"] = {{"proj_in.weight", "diffusion_pytorch_model-00001-of-00002.safetensors"},
                         {"proj_out.weight", "diffusion_pytorch_model-00002-of-00002.safetensors"}};
  write_json(folder / "diffusion_pytorch_model.safetensors.index.json", index);
  const Error e = open_error(repo.root);
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(e.message().find("diffusion_pytorch_model-00002-of-00002.safetensors"),
            std::string::npos);

  index.erase("weight_map");
  write_json(folder / "diffusion_pytorch_model.safetensors.index.json", index);
  const Error e2 = open_error(repo.root);
  EXPECT_EQ(e2.code(), ErrorCode::kInvalidFile);
  EXPECT_NE(e2.message().find("'weight_map'"), std::string::npos);
}

TEST(Repo, ConfigFieldHelpers) {
  const nlohmann::json j = {
      {"a", 3}, {"b", {{"c", {1, 2, 3}}}}, {"f", 2.0}, {"g", 2.5}, {"n", nullptr}};
  EXPECT_EQ(io::config_int(j, "a", "x.json"), 3);
  EXPECT_EQ(io::config_int(j, "f", "x.json"), 2);  // integral floats are accepted
  EXPECT_EQ(io::config_int_list(j, "b.c", "x.json"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(io::config_int_or(j, "missing", "x.json", 7), 7);
  EXPECT_EQ(io::config_int_or(j, "n", "x.json", 8), 8);
  EXPECT_DOUBLE_EQ(io::config_number(j, "g", "x.json"), 2.5);
  try {
    io::config_int(j, "g", "x.json");
    ADD_FAILURE() << "2.5 accepted as an integer";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("x.json: field 'g' must be an integer"), std::string::npos)
        << e.what();
  }
  try {
    io::config_int(j, "b.d", "x.json");
    ADD_FAILURE() << "missing field accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("x.json: missing required field 'b.d'"), std::string::npos)
        << e.what();
  }
}

// The bounded optional readers the VAE configs use: absent or null gives the fallback, values
// outside the bounds, empty lists and non-finite numbers are refused naming the file and field.
TEST(Repo, BoundedOptionalConfigFields) {
  const nlohmann::json j = {{"k", 4},
                            {"zero", 0},
                            {"big", 1 << 21},
                            {"eps", 1e-6},
                            {"neg", -1.0},
                            {"list", {2, 2, 1}},
                            {"empty", nlohmann::json::array()},
                            {"bad", {1, 0}},
                            {"nested", {{1, 3}, {5}}},
                            {"floats", {0.5, -1.25}},
                            {"strings", {"a"}},
                            {"n", nullptr}};
  EXPECT_EQ(io::config_int_in_or(j, "k", "x.json", 9, 1, 1 << 20), 4);
  EXPECT_EQ(io::config_int_in_or(j, "zero", "x.json", 9, 0, 8), 0);
  EXPECT_EQ(io::config_int_in_or(j, "missing", "x.json", 9, 1, 8), 9);
  EXPECT_EQ(io::config_int_in_or(j, "n", "x.json", 9, 1, 8), 9);
  EXPECT_DOUBLE_EQ(io::config_positive_or(j, "eps", "x.json", 1.0), 1e-6);
  EXPECT_DOUBLE_EQ(io::config_positive_or(j, "n", "x.json", 1.0), 1.0);
  EXPECT_EQ(io::config_int_list_in_or(j, "list", "x.json", {7}, 1, 2),
            (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(io::config_int_list_in_or(j, "n", "x.json", {7}, 1, 2), (std::vector<int64_t>{7}));
  EXPECT_EQ(io::config_int_list_in(j["nested"][1], "nested", "x.json", 1, 8),
            (std::vector<int64_t>{5}));
  EXPECT_EQ(io::config_float_list_or(j, "floats", "x.json", {}),
            (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(io::config_float_list_or(j, "n", "x.json", {3.0f}), (std::vector<float>{3.0f}));
  const std::vector<std::pair<std::function<void()>, std::string>> refused = {
      {[&] { io::config_int_in_or(j, "zero", "x.json", 9, 1, 8); },
       "field 'zero' must be an integer in [1, 8]"},
      {[&] { io::config_int_in_or(j, "big", "x.json", 9, 1, 1 << 20); },
       "field 'big' must be an integer in"},
      {[&] { io::config_positive_or(j, "neg", "x.json", 1.0); },
       "field 'neg' must be a positive finite number"},
      {[&] { io::config_int_list_in_or(j, "empty", "x.json", {}, 1, 8); },
       "field 'empty' must be a non-empty list"},
      {[&] { io::config_int_list_in_or(j, "bad", "x.json", {}, 1, 8); },
       "field 'bad' must hold integers in [1, 8]"},
      {[&] { io::config_float_list_or(j, "strings", "x.json", {}); },
       "field 'strings' must hold finite numbers"},
      {[&] { io::config_float_list_or(j, "k", "x.json", {}); },
       "field 'k' must be a list of numbers"},
  };
  for (const auto& [call, want] : refused) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected: " << want;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
      EXPECT_NE(e.message().find("x.json: " + want), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace h3
