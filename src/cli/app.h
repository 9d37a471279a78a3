#pragma once
// The command line as a library: metaop's main runs it, and so does the Python module
// (src/python), in its own process, with a host (cli/host.h) in place of files and a terminal.
#include <exception>
#include <string>
#include <vector>

namespace metaop::cli {

// Parses `args` (the command and its options, without the program's name), applies the process
// options and runs the command: its exit code (0 clean, 1 findings, 2 bad usage or input). Other
// failures propagate as exceptions (describe_failure).
// run_command_line (main): usage errors, --help and --version are printed, as CLI11 does.
// run_command (a host): they throw metaop::Error with the line the command line prints.
int run_command_line(const std::vector<std::string>& args);
int run_command(const std::vector<std::string>& args);

// A failure that ended a command, as the user reads it: kind "error" (bad input or usage: the
// message names the file, node or value), "out of memory" (an allocation refused by the memory
// budget), or "internal error" (anything else: a bug of MetaOp's). The message is one line,
// escaped.
struct Failure {
  enum Kind { Input, Memory, Internal } kind = Internal;
  std::string message;
  const char* label() const;
};
Failure describe_failure(const std::exception_ptr& e);

}  // namespace metaop::cli
