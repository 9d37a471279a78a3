#pragma once
// Pieces of the offline HTML reports: escaping (charts: report/core/chart.h).
#include <string>

namespace metaop {

std::string html_escape(const std::string& s);

}  // namespace metaop
