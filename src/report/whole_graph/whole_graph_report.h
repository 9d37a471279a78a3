#pragma once
// What whole-graph mode hands to people: the console summary, its JSON, and the reduced model
// of each localized discrepancy as a reproducer folder.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/whole_graph/whole_graph.h"

namespace metaop {

void print_whole_graph_summary(std::FILE* out, const WholeGraphResult& r, double factor);
nlohmann::json whole_graph_to_json(const WholeGraphResult& r, double factor);
// The verdicts as a section of an HTML report: one row per binding, sample and level (a
// discrepancy or refusal marked), then the summary as the console prints it.
std::string whole_graph_html(const WholeGraphResult& r, double factor);
// Writes the reduced model (model.onnx), its inputs and the reference's outputs (.npy) and a
// README with the command that shows the discrepancy into a new folder under `root`.
std::string write_whole_graph_reproducer(const WholeGraphVerdict& v, const std::string& root,
                                         const std::vector<std::string>& extra_args);

}  // namespace metaop
