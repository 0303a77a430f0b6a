// The h3 command line. Thin: finds the subcommand and runs it; every error becomes a message on
// stderr and a non-zero exit code, never a crash.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "command.h"
#include "core/status.h"

namespace h3::cli {

std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}

bool register_command(Command c) {
  commands().push_back(std::move(c));
  return true;
}

}  // namespace h3::cli

static void usage(FILE* out) {
  std::fprintf(out, "h3 %s: MiniMax-H3 joint video+audio generation\n\nusage: h3 <command> [options]\n\n",
               H3_VERSION);
  for (const auto& c : h3::cli::commands()) {
    std::fprintf(out, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  }
  std::fprintf(out, "\nRun 'h3 <command> --help' for a command's options.\n");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("h3 %s\n", H3_VERSION);
    return 0;
  }
  // A two-word command ("bench vae") is matched before a one-word one.
  const std::string two_words = argc > 2 ? name + " " + argv[2] : std::string();
  int skip = 2;
  for (const auto& c : h3::cli::commands()) {
    if (!two_words.empty() && c.name == two_words) skip = 3;
  }
  const std::string& wanted = skip == 3 ? two_words : name;
  for (const auto& c : h3::cli::commands()) {
    if (c.name != wanted) continue;
    const std::vector<std::string> args(argv + skip, argv + argc);
    try {
      return c.run(args);
    } catch (const h3::Error& e) {
      std::fprintf(stderr, "h3 %s: error: %s\n", wanted.c_str(), e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "h3 %s: error: out of host memory\n", wanted.c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "h3 %s: error: %s\n", wanted.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "h3: unknown command '%s'\n\n", name.c_str());
  usage(stderr);
  return 2;
}
