#include "support/cli.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

namespace h3::test {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

RunResult run_h3(const std::string& args, bool merge_stderr, const std::string& cwd) {
  RunResult r;
  const char* bin = std::getenv("H3_BIN");
  if (!bin) return r;
  const std::string cmd = (cwd.empty() ? "" : "cd " + shell_quote(cwd) + " && ") +
                          shell_quote(bin) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace h3::test
