#pragma once
// Options every subcommand takes, about the process rather than the model: --max-memory (the
// memory budget every tensor is checked against before it is allocated), --isolation (framework
// kernels in worker processes, or in MetaOp's own) and --kernel-timeout (seconds before a kernel
// run out of process is killed and reported as a hang).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace metaop::cli {

struct ProcessOptions {
  std::string max_memory;  // empty: half of physical memory
  std::string isolation = "process";
  double kernel_timeout = 120;
};

void add_process_options(CLI::App* cmd, ProcessOptions& o);
// Checks and applies them (exit 2 naming the flag and value when one is bad).
void apply_process_options(const ProcessOptions& o);
// A CLI11 check for counts and seeds: "-1" is refused (an unsigned option would wrap it).
CLI::Validator non_negative();
// "8G", "512MiB", "1.5e9", "50%" (of physical memory) -> bytes; fails naming `option`.
std::int64_t parse_bytes(const std::string& option, const std::string& value);

}  // namespace metaop::cli
