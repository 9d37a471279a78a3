// metaop: finds, localizes and verifies numerical defects in DL models and frameworks.
#include <fmt/core.h>

#include "cli/app.h"
#include "tensor/heap.h"

int main(int argc, char** argv) {
  metaop::keep_freed_memory();
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return metaop::cli::run_command_line(args);
  } catch (...) {
    auto f = metaop::cli::describe_failure(std::current_exception());
    fmt::print(stderr, "metaop: {}: {}\n", f.label(), f.message);
    return 2;
  }
}
