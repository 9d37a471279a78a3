#pragma once
// What `metaop check` hands to people: the console summary, the JSON document (schema in
// docs/check.md) and the offline HTML report (reproducers: report/core/repro.h).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/check/check.h"

namespace metaop {

void print_check_summary(std::FILE* out, const Graph& g, const CheckResult& r);
nlohmann::json check_to_json(const Graph& g, const CheckResult& r);
// Writes DIR/index.html, self-contained (inline SVG, CSS and the graph view's pan-and-zoom
// script; no network): the verdict, `extra_html` (the whole-graph verdicts), the model as a graph
// with each node marked by its worst finding (report/core/graph_view.h), the findings (defects
// first, unsupported nodes one row per binding, op and reason), a section per finding, the
// error charts, time per node, and the console summary as printed.
struct CheckReportExtra {
  std::string html;                // a section after the verdict (the whole-graph verdicts)
  std::string verdict;             // a line beside the verdict ("1 whole-graph discrepancy")
  std::vector<std::string> nodes;  // nodes to mark on the graph (the reduced windows)
};
void write_html_report(const Graph& g, const CheckResult& r, const std::string& dir,
                       const CheckReportExtra& extra = {});

}  // namespace metaop
