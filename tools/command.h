// Subcommand registry of the h3 tool. Each tools/cmd_*.cpp registers one subcommand with
// H3_COMMAND; main() dispatches. Keeps commands in separate files with no shared list to edit.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace h3::cli {

// A command receives its own arguments (argv after the subcommand name) and returns the exit code.
// It may throw h3::Error; main() prints the message and exits with 1.
using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct Command {
  std::string name;
  std::string summary;
  CommandFn run;
};

std::vector<Command>& commands();
bool register_command(Command c);

}  // namespace h3::cli

#define H3_CONCAT_INNER(a, b) a##b
#define H3_CONCAT(a, b) H3_CONCAT_INNER(a, b)
#define H3_COMMAND(name, summary, fn) \
  static const bool H3_CONCAT(h3_cmd_registered_, __LINE__) = ::h3::cli::register_command({name, summary, fn})
