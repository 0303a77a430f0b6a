// Logging: level parsing, filtering, the line format, and whole lines under concurrent writers.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"

namespace h3 {
namespace {

struct Captured {
  std::mutex mu;
  std::vector<std::string> lines;
};

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = log_level();
    set_log_sink([this](LogLevel, const std::string& line) {
      std::lock_guard<std::mutex> lock(cap_.mu);
      cap_.lines.push_back(line);
    });
  }
  void TearDown() override {
    set_log_sink(nullptr);
    set_log_level(saved_);
  }
  LogLevel saved_ = LogLevel::kWarn;
  Captured cap_;
};

TEST(LogLevelParse, NamesAndNumbers) {
  LogLevel l = LogLevel::kError;
  EXPECT_TRUE(parse_log_level("debug", &l));
  EXPECT_EQ(l, LogLevel::kDebug);
  EXPECT_TRUE(parse_log_level("WARNING", &l));
  EXPECT_EQ(l, LogLevel::kWarn);
  EXPECT_TRUE(parse_log_level("2", &l));
  EXPECT_EQ(l, LogLevel::kInfo);
  EXPECT_TRUE(parse_log_level("Error", &l));
  EXPECT_EQ(l, LogLevel::kError);
  EXPECT_FALSE(parse_log_level("verbose", &l));
  EXPECT_FALSE(parse_log_level("", &l));
  EXPECT_STREQ(log_level_name(LogLevel::kInfo), "info");
}

TEST_F(LogTest, FiltersByLevelAndFormats) {
  set_log_level(LogLevel::kWarn);
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  H3_LOG_INFO("hidden ", count());
  H3_LOG_DEBUG("hidden ", count());
  EXPECT_EQ(evaluated, 0) << "disabled levels must not format their arguments";
  H3_LOG_WARN("tensor ", "x", " has ", 3, " dims");
  H3_LOG_ERROR("bad");
  ASSERT_EQ(cap_.lines.size(), 2u);
  EXPECT_EQ(cap_.lines[0].rfind("[h3 W +", 0), 0u) << cap_.lines[0];
  EXPECT_NE(cap_.lines[0].find("] tensor x has 3 dims"), std::string::npos) << cap_.lines[0];
  EXPECT_EQ(cap_.lines[1].rfind("[h3 E +", 0), 0u);
  set_log_level(LogLevel::kDebug);
  H3_LOG_DEBUG("now ", count());
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(cap_.lines.size(), 3u);
}

TEST_F(LogTest, ConcurrentWritersKeepLinesWhole) {
  set_log_level(LogLevel::kInfo);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) H3_LOG_INFO("thread ", t, " message ", i, " end");
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(cap_.lines.size(), 800u);
  for (const auto& l : cap_.lines) {
    EXPECT_EQ(l.rfind("[h3 I +", 0), 0u) << l;
    EXPECT_EQ(l.substr(l.size() - 4), " end") << l;
  }
}

}  // namespace
}  // namespace h3
