// The timing receipt: nesting, wall times, bytes and GB/s, key/values, the table and the JSON.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/cuda_stream.h"
#include "core/device.h"
#include "core/receipt.h"
#include "core/status.h"

namespace h3 {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

TEST(Receipt, NestedStagesAndWallTimes) {
  Receipt r;
  {
    auto load = r.stage("load");
    sleep_ms(5);
    load.add_bytes(uint64_t{3} << 20);
  }
  {
    auto denoise = r.stage("denoise");
    for (int i = 0; i < 3; ++i) {
      auto step = r.stage("step " + std::to_string(i));
      sleep_ms(2);
    }
  }
  r.add("decode", 12.5, -1, 0);
  const auto es = r.entries();
  ASSERT_EQ(es.size(), 6u);
  EXPECT_EQ(es[0].name, "load");
  EXPECT_EQ(es[0].depth, 0);
  EXPECT_GE(es[0].wall_ms, 4.0);
  EXPECT_EQ(es[0].bytes, uint64_t{3} << 20);
  EXPECT_GT(es[0].gb_per_s(), 0.0);
  EXPECT_LT(es[0].gb_per_s(), 1.0);  // 3 MiB in >= 5 ms is < 0.7 GB/s
  EXPECT_EQ(es[1].name, "denoise");
  for (int i = 2; i < 5; ++i) {
    EXPECT_EQ(es[i].parent, 1);
    EXPECT_EQ(es[i].depth, 1);
    EXPECT_GE(es[i].wall_ms, 1.5);
  }
  EXPECT_GE(es[1].wall_ms, es[2].wall_ms + es[3].wall_ms + es[4].wall_ms);
  EXPECT_EQ(es[5].parent, -1);
  EXPECT_EQ(es[5].wall_ms, 12.5);
  EXPECT_LT(es[5].gpu_ms, 0);
  for (const auto& e : es) EXPECT_FALSE(e.open) << e.name;
}

TEST(Receipt, EndIsIdempotentAndMovable) {
  Receipt r;
  auto a = r.stage("a");
  auto b = std::move(a);
  a.end();  // moved-from: no effect
  EXPECT_TRUE(r.entries()[0].open);
  b.end();
  b.end();
  EXPECT_FALSE(r.entries()[0].open);
  auto c = r.stage("c");  // top level again: "a" was closed
  EXPECT_EQ(r.entries()[1].depth, 0);
}

TEST(Receipt, TableIsAligned) {
  Receipt r;
  r.add("load dit", 1234.5, -1, uint64_t{66} << 30);
  {
    auto d = r.stage("denoise");
    r.add("step 0", 10.25, 9.5);
  }
  r.set("attention", "flash");
  r.set("steps", 50);
  r.set("cfg", 4.5);
  r.set("offload", true);
  const std::string table = r.table();
  std::printf("%s", table.c_str());
  const auto lines = lines_of(table);
  ASSERT_GE(lines.size(), 8u);
  // The header and the stage rows have the same width and the numeric columns end together.
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(lines[i].size(), lines[0].size()) << lines[i];
  EXPECT_EQ(lines[0].find("stage"), 0u);
  EXPECT_NE(lines[1].find("1234.500"), std::string::npos);
  EXPECT_NE(lines[1].find("66.00 GiB"), std::string::npos);
  EXPECT_NE(lines[1].find("57.41"), std::string::npos);  // 66 GiB / 1.2345 s
  EXPECT_EQ(lines[3].find("  step 0"), 0u);              // indented by depth
  EXPECT_NE(lines[3].find("9.500"), std::string::npos);
  EXPECT_NE(table.find("attention = flash"), std::string::npos);
  EXPECT_NE(table.find("steps     = 50"), std::string::npos);
  EXPECT_NE(table.find("offload   = true"), std::string::npos);
}

TEST(Receipt, JsonRoundTrip) {
  Receipt r;
  {
    auto d = r.stage("denoise");
    r.add("step 0", 3.0, 2.0);
  }
  r.add("load", 1000.0, -1, 2000000000);
  r.set("backend", "cpu");
  const nlohmann::json j = r.to_json();
  ASSERT_EQ(j["stages"].size(), 3u);
  EXPECT_EQ(j["stages"][1]["path"], "denoise/step 0");
  EXPECT_EQ(j["stages"][1]["parent"], 0);
  EXPECT_EQ(j["stages"][1]["gpu_ms"], 2.0);
  EXPECT_TRUE(j["stages"][0]["gpu_ms"].is_null());
  EXPECT_DOUBLE_EQ(j["stages"][2]["gb_per_s"].get<double>(), 2.0);
  EXPECT_EQ(j["values"]["backend"], "cpu");

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("h3_receipt_" + std::to_string(::getpid()) + ".json"))
                               .string();
  r.write_json(path);
  std::ifstream f(path);
  const nlohmann::json back = nlohmann::json::parse(f);
  EXPECT_EQ(back, j);
  std::filesystem::remove(path);
  try {
    r.write_json("/nonexistent-dir/receipt.json");
    FAIL() << "writing into a missing folder should throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(e.message().find("/nonexistent-dir/receipt.json"), std::string::npos);
  }
}

TEST(Receipt, OpenStagesAreMarked) {
  Receipt r;
  auto s = r.stage("running");
  EXPECT_NE(r.table().find("running (open)"), std::string::npos);
  EXPECT_TRUE(r.to_json()["stages"][0]["open"].get<bool>());
  EXPECT_DOUBLE_EQ(r.total_wall_ms("missing"), 0.0);
}

TEST(Receipt, GpuTimesFromStreamEvents) {
  if (!cuda_available()) {
    // Without CUDA a stage on a stream cannot be timed: it says so instead of inventing a time.
    Receipt r;
    Stream none;
    EXPECT_THROW(r.stage("gpu", &none), Error);
    EXPECT_TRUE(r.entries().empty());
    GTEST_SKIP() << "no CUDA device: GPU event timing not exercised";
  }
  Receipt r;
  Stream s = Stream::create(0);
  {
    auto st = r.stage("gpu stage", &s);
    sleep_ms(1);
  }
  const auto es = r.entries();
  ASSERT_EQ(es.size(), 1u);
  std::printf("gpu stage: wall %.3f ms, gpu %.3f ms\n", es[0].wall_ms, es[0].gpu_ms);
  EXPECT_GE(es[0].gpu_ms, 0.0);
}

}  // namespace
}  // namespace h3
