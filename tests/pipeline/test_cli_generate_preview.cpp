// `h3 generate --preview`: a truecolor half-block picture per step on a terminal, a note and no
// picture otherwise; the generation is the same either way.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "models/tiny_model.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace h3::test {
namespace {

TEST(GeneratePreviewCli, DrawsOnATerminalAndSaysSoOtherwise) {
  H3_REQUIRE_BIN();
  TempDir dir("h3_preview");
  const std::string tiny = (dir.path() / "tiny").string();
  models::make_tiny(tiny, {});
  const std::string args = "generate --model " + shell_quote(tiny) +
                           " --prompt hi --height 32 --width 64 --num-frames 22 --steps 3"
                           " --allow-any-duration --preview --out " +
                           shell_quote((dir.path() / "a.mp4").string());
  const RunResult piped = run_h3(args);
  ASSERT_EQ(piped.status, 0) << piped.output;
  EXPECT_NE(piped.output.find("--preview draws on a terminal"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find("\x1b[48;2;"), std::string::npos);
  // util-linux `script` gives the command a terminal.
  if (std::system("command -v script >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no `script` to make a terminal";
  const std::string cmd = "script -qec " +
                          shell_quote(shell_quote(std::getenv("H3_BIN")) + " " + args) +
                          " /dev/null 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << out.substr(0, 2000);
  }
  EXPECT_NE(out.find("\x1b[48;2;"), std::string::npos) << "no truecolor cells";
  EXPECT_NE(out.find("\xe2\x96\x80"), std::string::npos) << "no half blocks";
}

}  // namespace
}  // namespace h3::test
