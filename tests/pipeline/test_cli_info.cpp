// The `h3 info` and `h3 make-tiny` commands, run as a user would (the built binary from $H3_BIN):
// exit codes, and messages that name the offending file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

TEST(CliInfo, GoldenTinyH3PassesWithNoErrors) {
  H3_REQUIRE_BIN();
  H3_REQUIRE_GOLDEN_REPO(repo);
  const RunResult r = run_h3("info " + shell_quote(repo));
  std::printf("%s", r.output.c_str());
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(contains(r.output, "ok: no errors"));
  for (const char* name : {"transformer", "transformer_ref", "text_encoder", "tokenizer",
                           "processor", "vae", "audio_vae", "scheduler", "audio_scheduler"}) {
    EXPECT_TRUE(contains(r.output, std::string("\n") + name + " ")) << name;
  }
  EXPECT_TRUE(contains(r.output, "1,034,528 params"));  // the tiny DiT
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
      EXPECT_EQ(c["by_dtype"]["f32"]["params"], 66048);
      EXPECT_EQ(c["schema"]["matched"], 74);
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
  EXPECT_TRUE(contains(r.output, "schema: ok, 109/109 tensors"));
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
  // The config says 4 blocks; the checkpoint has 3.
  const fs::path cfg = copy / "transformer" / "config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(cfg));
  j["num_layers"] = 4;
  std::ofstream(cfg, std::ios::trunc) << j.dump(2);
  const RunResult r = run_h3("info " + shell_quote(copy.string()));
  std::printf("%s", r.output.c_str());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "missing tensor 'transformer_blocks.3.norm1.weight'"));
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

}  // namespace
}  // namespace h3
