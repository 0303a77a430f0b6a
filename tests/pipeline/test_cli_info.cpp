// The `h3 info` and `h3 make-tiny` commands, run as a user would (the built binary from $H3_BIN):
// exit codes, and messages that name the offending file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/repo.h"
#include "io/safetensors.h"
#include "models/h3_dit/dit_config.h"
#include "models/tiny_model.h"
#include "support/cli.h"
#include "support/golden.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;

using test::RunResult;
using test::run_h3;
using test::shell_quote;

#define H3_REQUIRE_GOLDEN_REPO(var)                                                         \
  const test::Golden* var##_g = test::Golden::get();                                        \
  if (!var##_g) {                                                                           \
    if (test::golden_required()) FAIL() << "golden folder missing: " << test::golden_dir(); \
    GTEST_SKIP() << "golden folder not found at " << test::golden_dir();                    \
  }                                                                                         \
  const std::string var = var##_g->checkpoint_dir()

using test::TempDir;

// A writable copy of a repository (the golden files are read-only).
fs::path copy_repo(const std::string& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(to)) {
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  fs::permissions(to, fs::perms::owner_write, fs::perm_options::add);
  return to;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// What the report must say about a checkpoint is read from the checkpoint itself, not from the
// shared folder's tiny model (another folder of the same format holds another size).
struct WeightCount {
  int64_t params = 0, f32_params = 0, tensors = 0;
};

WeightCount count_weights(const fs::path& component) {
  WeightCount w;
  for (const auto& e : fs::directory_iterator(component)) {
    if (e.path().extension() != ".safetensors") continue;
    const auto f = io::SafetensorsFile::open(e.path().string());
    for (const io::TensorInfo& t : f->tensors()) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      w.params += n;
      if (t.dtype == DType::kF32) w.f32_params += n;
      ++w.tensors;
    }
  }
  return w;
}

// 1034528 -> "1,034,528" (the report's thousands separators).
std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The components the repository index names (entries whose value is a loading spec).
std::vector<std::string> index_components(const std::string& repo) {
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(fs::path(repo) / "modular_model_index.json"));
  std::vector<std::string> out;
  for (const auto& [key, value] : j.items())
    if (value.is_array()) out.push_back(key);
  return out;
}

TEST(CliInfo, GoldenTinyH3PassesWithNoErrors) {
  H3_REQUIRE_BIN();
  H3_REQUIRE_GOLDEN_REPO(repo);
  const RunResult r = run_h3("info " + shell_quote(repo));
  std::printf("%s", r.output.c_str());
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(contains(r.output, "ok: no errors"));
  const std::vector<std::string> names = index_components(repo);
  EXPECT_EQ(names.size(), 9u);  // the nine components of a MiniMax-H3 repository
  for (const std::string& name : names) {
    EXPECT_TRUE(contains(r.output, "\n" + name + " ")) << name;
  }
  const std::string dit_params = with_commas(count_weights(fs::path(repo) / "transformer").params) + " params";
  EXPECT_TRUE(contains(r.output, dit_params)) << dit_params;  // the DiT's parameter count
  EXPECT_FALSE(contains(r.output, "error:"));
  EXPECT_FALSE(contains(r.output, "warning:"));
}

TEST(CliInfo, JsonReport) {
  H3_REQUIRE_BIN();
  H3_REQUIRE_GOLDEN_REPO(repo);
  const RunResult r = run_h3("info --json " + shell_quote(repo), false);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_EQ(j["components"].size(), 9u);
  int64_t params = 0;
  for (const auto& c : j["components"]) {
    EXPECT_TRUE(c["ok"].get<bool>()) << c["name"];
    if (c.contains("params")) params += c["params"].get<int64_t>();
    if (c["name"] == "transformer") {
      const WeightCount w = count_weights(fs::path(repo) / "transformer");
      EXPECT_EQ(c["by_dtype"]["f32"]["params"], w.f32_params);  // the fp32 islands
      EXPECT_EQ(c["schema"]["matched"], w.tensors);
    }
  }
  EXPECT_EQ(params, j["total_params"].get<int64_t>());
  std::printf("golden tiny-h3: %lld params in %zu components\n", static_cast<long long>(params),
              j["components"].size());
}

TEST(CliInfo, TruncatedWeightFileFailsNamingIt) {
  H3_REQUIRE_BIN();
  H3_REQUIRE_GOLDEN_REPO(repo);
  TempDir tmp;
  const fs::path copy = copy_repo(repo, tmp.path() / "tiny-h3");
  const fs::path victim = copy / "transformer" / "diffusion_pytorch_model.safetensors";
  fs::resize_file(victim, fs::file_size(victim) / 2);
  const RunResult r = run_h3("info " + shell_quote(copy.string()));
  std::printf("%s", r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, victim.string())) << "the message does not name " << victim;
  // The other components are still listed and checked.
  const int64_t vae = count_weights(fs::path(repo) / "vae").tensors;
  EXPECT_TRUE(contains(r.output, "schema: ok, " + std::to_string(vae) + "/" + std::to_string(vae) + " tensors"));
}

TEST(CliInfo, CorruptHeaderFailsNamingIt) {
  H3_REQUIRE_BIN();
  H3_REQUIRE_GOLDEN_REPO(repo);
  TempDir tmp;
  const fs::path copy = copy_repo(repo, tmp.path() / "tiny-h3");
  const fs::path victim = copy / "vae" / "diffusion_pytorch_model.safetensors";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write("\x01\x02\x03garbage", 10);  // inside the JSON header
  }
  const RunResult r = run_h3("info " + shell_quote(copy.string()));
  std::printf("%s", r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, victim.string()));
}

TEST(CliInfo, SchemaMismatchFails) {
  H3_REQUIRE_BIN();
  H3_REQUIRE_GOLDEN_REPO(repo);
  TempDir tmp;
  const fs::path copy = copy_repo(repo, tmp.path() / "tiny-h3");
  // The config says one block more than the checkpoint has.
  const fs::path cfg = copy / "transformer" / "config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
  const int64_t blocks = j["num_layers"].get<int64_t>();
  j["num_layers"] = blocks + 1;
  std::ofstream(cfg, std::ios::trunc) << j.dump(2);
  const RunResult r = run_h3("info " + shell_quote(copy.string()));
  std::printf("%s", r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "missing tensor 'transformer_blocks." + std::to_string(blocks) + ".norm1.weight'"));
}

TEST(CliInfo, MissingComponentFolderFails) {
  H3_REQUIRE_BIN();
  H3_REQUIRE_GOLDEN_REPO(repo);
  TempDir tmp;
  const fs::path copy = copy_repo(repo, tmp.path() / "tiny-h3");
  fs::remove_all(copy / "audio_vae");
  const RunResult r = run_h3("info " + shell_quote(copy.string()));
  std::printf("%s", r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, (copy / "audio_vae").string()));
}

TEST(CliInfo, BadArguments) {
  H3_REQUIRE_BIN();
  RunResult r = run_h3("info");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "missing repository path")) << r.output;
  r = run_h3("info /nonexistent/h3/repo");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "/nonexistent/h3/repo")) << r.output;
  r = run_h3("info --frobnicate x");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--frobnicate")) << r.output;
  r = run_h3("info --help");
  EXPECT_EQ(r.status, 0);
}

TEST(CliMakeTiny, WritesRepositoryThatPassesInfo) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const std::string dir = (tmp.path() / "made").string();
  RunResult r = run_h3("make-tiny " + shell_quote(dir) + " --seed 42");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_h3("info " + shell_quote(dir));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ok: no errors"));
  // Never overwrites.
  r = run_h3("make-tiny " + shell_quote(dir));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "not an empty folder")) << r.output;
  r = run_h3("make-tiny " + shell_quote((tmp.path() / "other").string()) + " --seed x1");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--seed")) << r.output;
  EXPECT_FALSE(fs::exists(tmp.path() / "other"));
  // Missing parent folders are made (models/h3-tiny in a fresh checkout); a parent that is a file
  // is named.
  r = run_h3("make-tiny " + shell_quote((tmp.path() / "a" / "b" / "made").string()));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(tmp.path() / "a" / "b" / "made" / "modular_model_index.json"));
  std::ofstream(tmp.path() / "file") << "not a folder";
  r = run_h3("make-tiny " + shell_quote((tmp.path() / "file" / "made").string()));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, (tmp.path() / "file").string() + ": cannot make the parent"))
      << r.output;
}

TEST(CliMakeTiny, ForceReplacesOnlyARepository) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const std::string dir = (tmp.path() / "made").string();
  ASSERT_EQ(run_h3("make-tiny " + shell_quote(dir) + " --seed 1").status, 0);
  std::ofstream(fs::path(dir) / "stale.txt") << "left from before";
  RunResult r = run_h3("make-tiny --force " + shell_quote(dir) + " --seed 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(fs::path(dir) / "stale.txt")) << "the old folder was not replaced";
  EXPECT_EQ(run_h3("info " + shell_quote(dir)).status, 0);
  // A folder that is not a MiniMax-H3 repository is never replaced, --force or not.
  const fs::path other = tmp.path() / "notes";
  fs::create_directories(other);
  std::ofstream(other / "keep.txt") << "precious";
  r = run_h3("make-tiny --force " + shell_quote(other.string()));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "modular_model_index.json")) << r.output;
  EXPECT_TRUE(fs::exists(other / "keep.txt"));
}

TEST(CliMakeTiny, ReleasedShapesPassInfo) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const std::string dir = (tmp.path() / "released").string();
  RunResult r = run_h3("make-tiny --released-shapes " + shell_quote(dir));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_h3("info " + shell_quote(dir));
  std::printf("%s", r.output.c_str());
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(contains(r.output, "33,122,992,896 params, 61.73 GiB"));  // h3_dit_spec.md §1.3
}

// --text-context-scale 0 (the trained tiny model's conditioner): each text row the DiT reads is a
// function of its own token, so the motion word at the end of two prompts that differ in colour
// and shape gets the same row; with the random attention (scale 1) context outweighs the word.
// Only the attention output projections change. Values outside [0, 1] are refused by name.
TEST(CliMakeTiny, TextContextScaleZeroMakesRowsContextFree) {
  H3_REQUIRE_BIN();
  TempDir tmp;
  const std::string prompts[2] = {"a red circle moves to the left",
                                  "a blue square moves to the left"};
  auto last_rows = [&](const std::string& flags, const std::string& name) {
    const std::string dir = (tmp.path() / name).string(), out = dir + ".safetensors";
    RunResult r = run_h3("make-tiny " + shell_quote(dir) + " --seed 0" + flags);
    EXPECT_EQ(r.status, 0) << r.output;
    r = run_h3("encode-text --model " + shell_quote(dir) + " --prompt " + shell_quote(prompts[0]) +
               " --prompt " + shell_quote(prompts[1]) + " --out " + shell_quote(out));
    EXPECT_EQ(r.status, 0) << r.output;
    const io::Checkpoint ck = io::Checkpoint::open(out);
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < 2; ++i) {
      const Tensor t = ck.tensor("prompt." + std::to_string(i) + ".embeds");
      const std::vector<float> v = t.to_f32_vector();
      const size_t d = static_cast<size_t>(t.size(1));
      rows.emplace_back(v.end() - static_cast<std::ptrdiff_t>(d), v.end());
    }
    return rows;
  };
  auto cosine = [](const std::vector<float>& a, const std::vector<float>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ab += double(a[i]) * b[i];
      aa += double(a[i]) * a[i];
      bb += double(b[i]) * b[i];
    }
    return ab / std::sqrt(aa * bb);
  };
  const auto random = last_rows("", "random");
  const auto free = last_rows(" --text-context-scale 0", "context_free");
  const double c_random = cosine(random[0], random[1]), c_free = cosine(free[0], free[1]);
  std::printf("the word 'left' after two contexts: cosine %.4f (random), %.6f (scale 0)\n",
              c_random, c_free);
  // Equal up to float32 rounding (the rows sit at other positions of the CPU's GEMMs).
  EXPECT_GT(c_free, 0.99999);
  EXPECT_LT(c_random, 0.99);
  // The rest of the conditioner is the random one's, byte for byte.
  const io::Checkpoint a = io::Checkpoint::open((tmp.path() / "random/text_encoder").string());
  const io::Checkpoint b =
      io::Checkpoint::open((tmp.path() / "context_free/text_encoder").string());
  int zeroed = 0;
  for (const std::string& name : a.names()) {
    const std::vector<float> va = a.tensor(name).to_f32_vector(),
                             vb = b.tensor(name).to_f32_vector();
    if (name.find(".self_attn.o_proj.weight") != std::string::npos) {
      EXPECT_EQ(vb, std::vector<float>(va.size(), 0.0f)) << name;
      ++zeroed;
    } else {
      EXPECT_EQ(va, vb) << name;
    }
  }
  EXPECT_GT(zeroed, 0);
  for (const char* bad : {"1.5", "-0.1", "x"}) {
    const RunResult r = run_h3("make-tiny " + shell_quote((tmp.path() / "bad").string()) +
                               " --text-context-scale " + bad);
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_TRUE(contains(r.output, "--text-context-scale")) << r.output;
    EXPECT_FALSE(fs::exists(tmp.path() / "bad"));
  }
}

// --trained PARTS: the trained tiny model from its kept parts. Stand-in parts (another seed's
// make-tiny weights at the trained model's VAE ratio) show what is copied and what is made: the
// three parts' files byte for byte, the other components as `--seed 0 --vae-spatial-ratio 4
// --text-context-scale 0` writes them, the clip geometry as the index's default request.
class CliMakeTinyTrained : public ::testing::Test {
 protected:
  void SetUp() override {
    models::MakeTinyOptions o;
    o.seed = 5;
    o.vae_spatial_ratio = 4;
    models::make_tiny((tmp_.path() / "src").string(), o);
    for (const auto& [part, component] : kParts) {
      fs::create_directories(parts() / part);
      fs::copy_file(tmp_.path() / "src" / component / "diffusion_pytorch_model.safetensors",
                    parts() / part / "model.safetensors");
      fs::copy_file(tmp_.path() / "src" / component / "config.json",
                    parts() / part / "config.json");
    }
  }
  fs::path parts() const { return tmp_.path() / "parts"; }
  RunResult make(const std::string& out, const std::string& extra = "") const {
    return run_h3("make-tiny " + shell_quote((tmp_.path() / out).string()) + " --trained " +
                  shell_quote(parts().string()) + extra);
  }
  static std::string bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static constexpr std::pair<const char*, const char*> kParts[] = {
      {"dit", "transformer"}, {"vae", "vae"}, {"audio_vae", "audio_vae"}};
  TempDir tmp_;
};

TEST_F(CliMakeTinyTrained, CopiesThePartsAndMakesTheRestAsTheyWereTrainedOn) {
  H3_REQUIRE_BIN();
  RunResult r = make("trained");
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path out = tmp_.path() / "trained";
  r = run_h3("info " + shell_quote(out.string()));
  EXPECT_EQ(r.status, 0) << r.output;
  for (const auto& [part, component] : kParts) {
    EXPECT_EQ(bytes(out / component / "diffusion_pytorch_model.safetensors"),
              bytes(parts() / part / "model.safetensors"))
        << component;
    EXPECT_EQ(io::read_json_file((out / component / "config.json").string()),
              io::read_json_file((parts() / part / "config.json").string()))
        << component;
  }
  models::MakeTinyOptions o;
  o.vae_spatial_ratio = 4;
  o.text_context_scale = 0.0f;
  models::make_tiny((tmp_.path() / "seed0").string(), o);
  for (const char* same :
       {"text_encoder/model.safetensors", "transformer_ref/diffusion_pytorch_model.safetensors",
        "tokenizer/tokenizer.json", "scheduler/scheduler_config.json"})
    EXPECT_EQ(bytes(out / same), bytes(tmp_.path() / "seed0" / same)) << same;
  const nlohmann::json index = io::read_json_file((out / "modular_model_index.json").string());
  EXPECT_EQ(index.value("default_height", 0), 64);
  EXPECT_EQ(index.value("default_width", 0), 128);
  EXPECT_EQ(index.value("default_num_frames", 0), 39);
}

// What the kept parts of the checkout assemble to passes `h3 info`.
TEST_F(CliMakeTinyTrained, TheProjectsPartsMakeAValidRepository) {
  H3_REQUIRE_BIN();
  const fs::path kept = fs::path(H3_SOURCE_DIR) / "tools" / "train_tiny" / "parts";
  if (!fs::is_regular_file(kept / "dit" / "model.safetensors"))
    GTEST_SKIP() << "no trained parts in this checkout (" << kept.string() << ")";
  const fs::path out = tmp_.path() / "kept";
  RunResult r =
      run_h3("make-tiny " + shell_quote(out.string()) + " --trained " + shell_quote(kept.string()));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_h3("info " + shell_quote(out.string()));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ok: no errors")) << r.output;
}

// Each broken part is refused naming its file, and nothing is left where the model would go.
TEST_F(CliMakeTinyTrained, BrokenPartsAreRefusedByName) {
  H3_REQUIRE_BIN();
  const auto refused = [&](const std::string& what, const std::string& needle) {
    const RunResult r = make("out");
    EXPECT_NE(r.status, 0) << what;
    EXPECT_TRUE(contains(r.output, needle)) << what << ": " << r.output;
    EXPECT_FALSE(fs::exists(tmp_.path() / "out")) << what;
  };
  const fs::path dit = parts() / "dit" / "model.safetensors";
  const std::string good = bytes(dit);
  std::ofstream(dit, std::ios::binary | std::ios::trunc) << good.substr(0, good.size() / 2);
  refused("truncated DiT", dit.string());
  // Every tensor in float32: the engine would load it, but the release stores the DiT in bf16.
  std::ofstream(dit, std::ios::binary | std::ios::trunc) << good;
  {
    const io::Checkpoint ck = io::Checkpoint::open(dit.string());
    std::vector<io::NamedTensor> f32;
    for (const std::string& n : ck.names())
      f32.push_back({n, Tensor::from_f32(ck.tensor(n).to_f32_vector(), ck.info(n).shape)});
    io::write_safetensors(dit.string(), f32);
  }
  refused("float32 DiT", "the release stores it as bf16");
  std::ofstream(dit, std::ios::binary | std::ios::trunc) << good;
  // The VAE's config asks for more latent channels than its tensors have.
  const fs::path vae_config = parts() / "vae" / "config.json";
  nlohmann::json c = io::read_json_file(vae_config.string());
  c["latent_channels"] = c.at("latent_channels").get<int64_t>() * 2;
  std::ofstream(vae_config) << c.dump(2);
  refused("VAE config against its tensors", (parts() / "vae" / "model.safetensors").string());
  fs::remove(vae_config);
  refused("missing VAE config", vae_config.string());
  EXPECT_NE(make("out", " --seed 3").output.find("--trained"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp_.path() / "out"));
  const RunResult none = run_h3("make-tiny " + shell_quote((tmp_.path() / "out").string()) +
                                " --trained " + shell_quote((tmp_.path() / "nowhere").string()));
  EXPECT_NE(none.status, 0);
  EXPECT_TRUE(contains(none.output, "nowhere")) << none.output;
}

// `h3 info --plan`: the memory plan of the released shapes for given device and host sizes, as JSON.
class CliInfoPlan : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::getenv("H3_BIN")) return;
    tmp_ = std::make_unique<TempDir>();
    released_ = (tmp_->path() / "released").string();
    const RunResult r = run_h3("make-tiny --released-shapes " + shell_quote(released_));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() { tmp_.reset(); }
  static nlohmann::json plan(const std::string& flags, int want_status = 0) {
    const RunResult r = run_h3("info --plan " + shell_quote(released_) + " " + flags + " --json", false);
    EXPECT_EQ(r.status, want_status) << r.output;
    try {
      return nlohmann::json::parse(r.output);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON (" << e.what() << "): " << r.output;
      return nlohmann::json::object();
    }
  }
  static const nlohmann::json* component(const nlohmann::json& j, const std::string& name) {
    for (const auto& c : j["components"])
      if (c["name"] == name) return &c;
    return nullptr;
  }
  static std::unique_ptr<TempDir> tmp_;
  static std::string released_;
};
std::unique_ptr<TempDir> CliInfoPlan::tmp_;
std::string CliInfoPlan::released_;

TEST_F(CliInfoPlan, JsonDecisionsForThreeDevices) {
  H3_REQUIRE_BIN();
  const nlohmann::json h200 = plan("--device-memory 140GiB --host-memory 128GiB");
  std::printf("140GiB: %s\n", h200.dump(2).c_str());
  EXPECT_EQ(h200["decision"], "resident");
  EXPECT_EQ(h200["device_memory"].get<uint64_t>(), 140ull << 30);
  EXPECT_EQ(h200["host_memory"].get<uint64_t>(), 128ull << 30);
  EXPECT_LE(h200["peak_bytes"].get<uint64_t>(), 140ull << 30);
  EXPECT_EQ(h200["dit_num_blocks"], 50);
  EXPECT_EQ(h200["dit_resident_blocks"], 50);
  ASSERT_EQ(h200["components"].size(), 4u);
  for (const char* name : {"conditioner", "transformer", "vae", "audio_vae"}) {
    const nlohmann::json* c = component(h200, name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ((*c)["placement"], "device") << name;
    EXPECT_GT((*c)["weights_bytes"].get<uint64_t>(), 0u) << name;
    EXPECT_GT((*c)["work_bytes"].get<uint64_t>(), 0u) << name;
  }
  // The conditioner as the engine loads it: 50 layers and the embeddings in bf16, 46.9 GiB.
  const double cond_gib = (*component(h200, "conditioner"))["weights_bytes"].get<double>() / (1ull << 30);
  EXPECT_NEAR(cond_gib, 46.86, 0.05);

  const nlohmann::json a100 = plan("--device-memory 80GiB --host-memory 128GiB");
  EXPECT_TRUE(a100["decision"] == "stream-conditioner" || a100["decision"] == "cpu-offload") << a100["reason"];
  EXPECT_EQ((*component(a100, "conditioner"))["placement"], "streamed");

  const nlohmann::json small = plan("--device-memory 24GiB --host-memory 128GiB");
  EXPECT_EQ(small["decision"], "cpu-offload") << small["reason"];
  EXPECT_EQ((*component(small, "transformer"))["placement"], "offload");
  EXPECT_LT(small["dit_resident_blocks"].get<int>(), 50);

  // Refused: exit status 1, the JSON still printed, the reason with numbers.
  const nlohmann::json refused = plan("--device-memory 24GiB --host-memory 16GiB", 1);
  EXPECT_EQ(refused["decision"], "refused");
  EXPECT_TRUE(contains(refused["reason"].get<std::string>(), "16.0 GiB")) << refused["reason"];

  // Forced flags and another workflow.
  EXPECT_EQ(plan("--device-memory 140GiB --host-memory 128GiB --sequential-load")["decision"], "sequential");
  EXPECT_EQ(plan("--device-memory 140GiB --host-memory 128GiB --cpu-offload")["decision"], "cpu-offload");
  EXPECT_EQ(plan("--device-memory 140GiB --host-memory 128GiB --unified-memory")["decision"], "sequential");
  const nlohmann::json fl2va = plan(
      "--device-memory 140GiB --host-memory 128GiB --workflow fl2va --height 768 --width 1344 --num-frames 192");
  EXPECT_EQ(fl2va["request"]["workflow"], "fl2va");
  EXPECT_GT((*component(fl2va, "conditioner"))["weights_bytes"].get<uint64_t>(),
            (*component(h200, "conditioner"))["weights_bytes"].get<uint64_t>());
}

TEST_F(CliInfoPlan, TextTable) {
  H3_REQUIRE_BIN();
  const RunResult r = run_h3("info --plan " + shell_quote(released_) + " --device-memory 80GB --host-memory 128GiB");
  std::printf("%s", r.output.c_str());
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"component", "conditioner", "transformer", "audio_vae", "placement", "decision: ",
                        "peak: ", "reason: ", "denoise"})
    EXPECT_TRUE(contains(r.output, s)) << s;
}

TEST_F(CliInfoPlan, WithoutAGpuPlansForTheCpu) {
  H3_REQUIRE_BIN();
  const nlohmann::json j = plan("--host-memory 64GiB");
  if (j.value("device", "") != "cpu") GTEST_SKIP() << "this machine has a GPU";
  EXPECT_TRUE(contains(j.value("note", ""), "planning for the CPU")) << j.dump();
  EXPECT_EQ(j["decision"], "sequential") << j["reason"];  // 64 GiB cannot hold the float32 model
  EXPECT_EQ((*component(j, "transformer"))["placement"], "released");
}

TEST_F(CliInfoPlan, BadArguments) {
  H3_REQUIRE_BIN();
  const std::string repo = shell_quote(released_);
  RunResult r = run_h3("info --plan " + repo + " --device-memory 12XB");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--device-memory")) << r.output;
  EXPECT_TRUE(contains(r.output, "12XB")) << r.output;
  r = run_h3("info --plan " + repo + " --device-memory 80GiB --host-memory lots");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--host-memory")) << r.output;
  r = run_h3("info --plan " + repo + " --device-memory");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "needs a value")) << r.output;
  r = run_h3("info --plan " + repo + " --workflow i2v");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--workflow")) << r.output;
  r = run_h3("info --plan --device-memory 80GiB");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "missing model path")) << r.output;
  r = run_h3("info --plan /nonexistent/h3/repo --device-memory 80GiB");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "/nonexistent/h3/repo")) << r.output;
  r = run_h3("info --plan --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--device-memory SIZE")) << r.output;
}

// `h3 info --lora` lists what an adapter changes and what matches nothing (exit 1), and `h3
// generate --lora` refuses that file before loading a weight, naming the file, the key and the flag
// that would skip it.
TEST(CliInfo, LoraListsUpdatesAndUnmatchedKeysAndGenerateRefusesThem) {
  TempDir dir("h3_cli_lora");
  const std::string repo = (dir.path() / "tiny").string();
  models::make_tiny(repo, {});
  const dit::DitConfig c = dit::DitConfig::load(repo + "/transformer");
  auto zeros = [](const Shape& s) {
    return Tensor::from_f32(std::vector<float>(static_cast<size_t>(shape_numel(s)), 0.01f), s);
  };
  const int64_t r = 2;
  std::vector<io::NamedTensor> ts = {
      {"diffusion_model.blocks.0.attn.qkv_proj.lora_A.weight", zeros({r, c.hidden_size})},
      {"diffusion_model.blocks.0.attn.qkv_proj.lora_B.weight", zeros({3 * c.inner_dim(), r})},
      {"diffusion_model.blocks.0.mlp.fc1.lora_A.weight", zeros({r, c.hidden_size})},
      {"diffusion_model.blocks.0.mlp.fc1.lora_B.weight", zeros({2 * c.ffn_dim, r})}};
  const std::string good = (dir.path() / "good.safetensors").string();
  io::write_safetensors(good, ts);
  ts.push_back({"diffusion_model.blocks.0.attn.mystery.lora_A.weight", zeros({r, c.hidden_size})});
  const std::string bad = (dir.path() / "bad.safetensors").string();
  io::write_safetensors(bad, ts);

  const RunResult ok = run_h3("info --lora " + shell_quote(good) + " --model " + shell_quote(repo));
  EXPECT_EQ(ok.status, 0) << ok.output;
  for (const char* want : {"layout: original", "attn.to_q.weight: 1 low-rank",
                           "ff.net.0.proj.weight: 1 low-rank", "rank/alpha 2/2"})
    EXPECT_TRUE(contains(ok.output, want)) << want << " not in:\n" << ok.output;
  const RunResult listed =
      run_h3("info --lora " + shell_quote(bad) + " --model " + shell_quote(repo));
  EXPECT_EQ(listed.status, 1) << listed.output;
  EXPECT_TRUE(contains(listed.output, "unmatched (skipped): 1")) << listed.output;
  EXPECT_TRUE(contains(listed.output, "attn.mystery.lora_A.weight")) << listed.output;

  const RunResult refused =
      run_h3("generate --model " + shell_quote(repo) + " --prompt x --allow-any-duration --lora " +
             shell_quote(bad) + " --out " + shell_quote((dir.path() / "o.mp4").string()));
  EXPECT_NE(refused.status, 0) << refused.output;
  for (const char* want :
       {"bad.safetensors", "attn.mystery.lora_A.weight", "--lora-allow-unmatched"})
    EXPECT_TRUE(contains(refused.output, want)) << want << " not in:\n" << refused.output;
  EXPECT_FALSE(fs::exists(dir.path() / "o.mp4"));
}

}  // namespace
}  // namespace h3
