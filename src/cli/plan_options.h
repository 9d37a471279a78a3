#pragma once
// Binding-plan options shared by the commands that run models: --bind, --bind-op, --threads.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "engine/executor.h"

namespace metaop::cli {

void add_plan_options(CLI::App* cmd, std::string& bind, std::vector<std::string>& bind_ops,
                      int& threads);
// "a,b,,c" -> {a, b, c}.
std::vector<std::string> split_list(const std::string& s);
// The framework bindings named in a comma-separated `value` of `option`; fails on an unknown
// one, on "reference", and on an empty list.
std::vector<std::string> framework_bindings(const std::string& option, const std::string& value);
// A command's default --bind list as this build has it: each binding that is not built (onednn
// without the Python environment's oneDNN 3) is replaced by another version of its framework
// (onednn-2.6), or left out; `note` says which, for the command to print once its options are
// checked (a usage error stays one line).
std::string default_bindings(const std::string& preferred, std::string& note);
// Two versions of one framework (torch and torch-1.13) never share a process (bindings/plugin.h):
// under --isolation none, `bindings` naming both fails, naming them, before anything runs.
void require_separate_processes(const std::string& option, const std::string& value,
                                const std::vector<std::string>& bindings);

// Fails (exit 2) for --threads below 1 or far past the machine's hardware threads.
void check_threads(int threads);
// bind_ops entries are OPTYPE=BINDING or NODE_NAME=BINDING.
void configure_plan(Plan& plan, const std::string& bind, const std::vector<std::string>& bind_ops,
                    int threads);
// Fails (exit 2) when a binding's framework is not installed (the ort bindings' Node.js and npm
// packages); the others are linked in.
void require_installed(const std::string& binding);
// Per binding: nodes run, and the nodes that fell back to the reference with the reason.
void print_plan_summary(const Graph& g, const std::vector<NodeRecord>& records);

}  // namespace metaop::cli
