// The engine's load/release policy on the CPU with a tiny repository: which components are
// resident after each call, sequential release of the conditioner, reload after release, and the
// receipt's load stages.
#include <gtest/gtest.h>

#include <memory>

#include "core/status.h"
#include "models/tiny_model.h"
#include "pipeline/engine.h"
#include "support/temp_dir.h"

namespace h3::pipeline {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_engine");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static std::string resident(const Engine& e) {
    std::string s;
    for (const char* c : {"conditioner", "transformer", "vae", "audio_vae"})
      if (e.is_loaded(c)) s += std::string(s.empty() ? "" : " ") + c;
    return s;
  }
  static int loads(const Receipt& rc, const std::string& name) {
    int n = 0;
    for (const Receipt::Entry& e : rc.entries()) n += e.name == "load " + name;
    return n;
  }
  // One generation's component requests, in the pipeline's order.
  static void generation(Engine& e, Receipt& rc, std::vector<std::string>* trace) {
    e.conditioner(rc);
    trace->push_back(resident(e));
    e.finished_with_conditioner(rc);
    trace->push_back(resident(e));
    e.transformer(rc);
    trace->push_back(resident(e));
    e.video_vae(rc);
    e.audio_vae(rc);
    trace->push_back(resident(e));
    e.finished_generation(rc);
  }

  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
};
std::unique_ptr<test::TempDir> EngineTest::dir_;
std::string EngineTest::repo_;

TEST_F(EngineTest, SequentialReleasesTheConditionerAndReloadsIt) {
  EngineOptions o;
  o.sequential = SequentialLoad::kOn;
  Engine e(repo_, o);
  EXPECT_TRUE(e.plan().sequential);
  EXPECT_EQ(resident(e), "");
  Receipt rc;
  std::vector<std::string> t;
  generation(e, rc, &t);
  generation(e, rc, &t);
  const std::vector<std::string> want = {
      "conditioner", "", "transformer", "transformer vae audio_vae",
      // second generation: the conditioner needs the device alone, so the rest is released
      "conditioner", "", "transformer", "transformer vae audio_vae"};
  EXPECT_EQ(t, want);
  EXPECT_EQ(loads(rc, "conditioner"), 2);
  EXPECT_EQ(loads(rc, "transformer"), 2);
  EXPECT_EQ(loads(rc, "vae"), 2);
  EXPECT_EQ(loads(rc, "audio_vae"), 2);
  for (const Receipt::Entry& en : rc.entries())
    if (en.name.rfind("load ", 0) == 0) {
      std::printf("%s: %llu bytes, %.1f ms\n", en.name.c_str(),
                  static_cast<unsigned long long>(en.bytes), en.wall_ms);
      EXPECT_GT(en.bytes, 0u) << en.name;
    }
  EXPECT_EQ(rc.values().at("load transformer method"), "mmap");
}

TEST_F(EngineTest, NonSequentialKeepsEverythingBetweenGenerations) {
  EngineOptions o;
  o.sequential = SequentialLoad::kOff;
  Engine e(repo_, o);
  EXPECT_FALSE(e.plan().sequential);
  Receipt rc;
  std::vector<std::string> t;
  generation(e, rc, &t);
  generation(e, rc, &t);
  const std::string all = "conditioner transformer vae audio_vae";
  const std::vector<std::string> want = {"conditioner", "conditioner", "conditioner transformer",
                                         all, all, all, all, all};
  EXPECT_EQ(t, want);
  for (const char* c : {"conditioner", "transformer", "vae", "audio_vae"})
    EXPECT_EQ(loads(rc, c), 1) << c;
}

TEST_F(EngineTest, ReleaseAllThenReload) {
  EngineOptions o;
  o.sequential = SequentialLoad::kOff;
  Engine e(repo_, o);
  Receipt rc;
  e.transformer(rc);
  e.video_vae(rc);
  EXPECT_EQ(resident(e), "transformer vae");
  e.release_all();
  EXPECT_EQ(resident(e), "");
  e.transformer(rc);
  EXPECT_EQ(resident(e), "transformer");
  EXPECT_EQ(loads(rc, "transformer"), 2);
  // A VAE loaded without its encoder is reloaded when the encoder is needed, not otherwise.
  e.video_vae(rc, false);
  e.video_vae(rc, false);
  EXPECT_EQ(loads(rc, "vae"), 2);
  e.video_vae(rc, true);
  EXPECT_EQ(loads(rc, "vae"), 3);
  e.video_vae(rc, false);
  EXPECT_EQ(loads(rc, "vae"), 3);
}

TEST_F(EngineTest, ErrorsAreNamed) {
  EngineOptions o;
  Engine e(repo_, o);
  EXPECT_THROW(e.is_loaded("scheduler"), Error);
  Receipt rc;
  if (!e.repo().has("transformer_ref")) {
    try {
      e.transformer(rc, true);
      FAIL() << "expected kNotFound";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kNotFound);
    }
  }
  EngineOptions off = o;
  off.cpu_offload = true;
  try {
    Engine bad(repo_, off);
    FAIL() << "expected kUnsupported";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(err.what()).find("--cpu-offload"), std::string::npos);
  }
  EXPECT_THROW(Engine(repo_ + "/missing", o), Error);
}

}  // namespace
}  // namespace h3::pipeline
