#pragma once
// What every report uses: scores for people, safe file names and JSON text.
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace metaop {

// A score for people: three digits, or "inf".
std::string fmt_score(double s);
// A value or node name made safe as a file name: plain names ([A-Za-z0-9._-], up to 120 bytes)
// as they are, others with punctuation as '_', cut short and a hash of the whole name appended,
// so that different names never share a file.
std::string safe_file_name(std::string s);
// JSON text for files (indent 1, trailing newline); names that are not UTF-8 become U+FFFD.
std::string dump_json(const nlohmann::json& j);
// What a console printer writes (to the FILE* it is given), as text: the HTML reports show the
// summaries as printed.
std::string printed(const std::function<void(std::FILE*)>& print);
// A text as JSON: null when it is empty.
nlohmann::json text_or_null(const std::string& s);

}  // namespace metaop
