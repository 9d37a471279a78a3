#pragma once
// What `metaop check` hands to people: the console summary, the JSON document (schema in
// docs/check.md) and the offline HTML report (reproducers: report/core/repro.h).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/check/check.h"

namespace metaop {

void print_check_summary(std::FILE* out, const Graph& g, const CheckResult& r);
nlohmann::json check_to_json(const Graph& g, const CheckResult& r);
// Writes DIR/index.html (self-contained: inline SVG and CSS, no scripts or network).
void write_html_report(const Graph& g, const CheckResult& r, const std::string& dir);

}  // namespace metaop
