// The h3 command line. Thin: parses flags and calls the library.
#include <cstdio>
#include <string>

#include "core/status.h"

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--version") {
    std::printf("h3 %s\n", H3_VERSION);
    return argc < 2 ? 2 : 0;
  }
  std::fprintf(stderr, "h3: unknown command '%s'\n", argv[1]);
  return 2;
}
