#include "report/core/format.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace metaop {

std::string safe_file_name(std::string s) {
  auto ok = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
  };
  // Plain names stay as they are; any other gets its punctuation replaced, is cut to 80 bytes
  // and gets '~' and a hash of the whole name. No plain name holds '~', so two different names
  // never share a file ('a/b' and 'a_b', or two 10 kB names that differ at the end).
  if (!s.empty() && s.size() <= 120 && s[0] != '.' && std::all_of(s.begin(), s.end(), ok)) return s;
  std::string base = s.substr(0, 80);
  for (auto& ch : base)
    if (!ok(ch)) ch = '_';
  if (!base.empty() && base[0] == '.') base[0] = '_';
  return fmt::format("{}~{:016x}", base, XXH64(s.data(), s.size(), 0));
}

std::string dump_json(const nlohmann::json& j) {
  // Names that are not UTF-8 are legal in ONNX; JSON gets U+FFFD in their place.
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string fmt_score(double s) {
  return std::isfinite(s) ? fmt::format("{:.3g}", s) : "inf";
}

nlohmann::json text_or_null(const std::string& s) {
  return s.empty() ? nlohmann::json() : nlohmann::json(s);
}

std::string printed(const std::function<void(std::FILE*)>& print) {
  char* buf = nullptr;
  std::size_t size = 0;
  std::FILE* f = ::open_memstream(&buf, &size);
  if (!f) return "";
  print(f);
  std::fclose(f);
  std::string out(buf, size);
  std::free(buf);
  return out;
}

}  // namespace metaop
