// Running the built `h3` binary from tests, as a user would (path from $H3_BIN, set by ctest).
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace h3::test {

struct RunResult {
  int status = -1;     // exit code; -1 when the process did not exit normally
  std::string output;  // stdout (and stderr when merged)
};

std::string shell_quote(const std::string& s);
// Runs `$H3_BIN args` through the shell; stderr is merged into output unless merge_stderr is false.
// A non-empty `cwd` is the working folder (H3_BIN is absolute under ctest).
RunResult run_h3(const std::string& args, bool merge_stderr = true, const std::string& cwd = "");

}  // namespace h3::test

#define H3_REQUIRE_BIN() \
  if (!std::getenv("H3_BIN")) GTEST_SKIP() << "H3_BIN is not set (run through ctest)"
