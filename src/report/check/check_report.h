#pragma once
// What `metaop check` hands to people: the console summary, the JSON document (schema in
// docs/check.md) and the offline HTML report (reproducers: report/core/repro.h).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/check/check.h"

namespace metaop {

// A score for people: three digits, or "inf".
std::string fmt_score(double s);

// A value or node name made safe as a file name: plain names ([A-Za-z0-9._-], up to 120 bytes)
// as they are, others with punctuation as '_', cut short and a hash of the whole name appended,
// so that different names never share a file.
std::string safe_file_name(std::string s);
// JSON text for files (indent 1, trailing newline); names that are not UTF-8 become U+FFFD.
std::string dump_json(const nlohmann::json& j);

void print_check_summary(std::FILE* out, const Graph& g, const CheckResult& r);
nlohmann::json check_to_json(const Graph& g, const CheckResult& r);
// Writes DIR/index.html (self-contained: inline SVG and CSS, no scripts or network).
void write_html_report(const Graph& g, const CheckResult& r, const std::string& dir);

}  // namespace metaop
