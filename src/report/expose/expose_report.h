#pragma once
// What `metaop expose` hands to people: the exposing (and closest) inputs as .npy files with the
// `metaop run` command that shows the NaN, the console summary, the JSON document (schema in
// docs/expose.md) and the offline HTML report with each target's distance over the search.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/expose/expose.h"

namespace metaop {

// Writes, under `dir`, one folder per exposed target (every graph input as NAME.npy, the model
// with the varied weights when weights were varied, README.txt with the commands) and one per
// target not exposed with its closest point (the `max_closest` closest); fills each outcome's
// `files`. `model_path`: the model as the user named it (for the commands).
void write_expose_files(ExposeResult& r, const std::string& model_path, const std::string& dir,
                        std::size_t max_closest = 20);

// The `metaop run` command that replays an exposed target's point on the binding.
std::string expose_run_command(const ExposeResult& r, const TargetOutcome& t,
                               const std::string& model_path);

void print_expose_summary(std::FILE* out, const Graph& g, const ExposeResult& r,
                          const std::string& model_path);
nlohmann::json expose_to_json(const ExposeResult& r, const std::string& model_path);
// Writes DIR/index.html (self-contained: inline SVG and CSS, no scripts or network).
void write_expose_html(const Graph& g, const ExposeResult& r, const std::string& model_path,
                       const std::string& dir);

}  // namespace metaop
