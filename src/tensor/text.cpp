#include "tensor/text.h"

#include <fmt/format.h>

namespace metaop {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (0: invalid). Overlong forms, surrogates
// and code points past U+10FFFF are invalid, as in RFC 3629.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
  if (c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogates
  if (c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
  if (c == 0xF4 && b(i + 1) >= 0x90) return 0;  // past U+10FFFF
  return n;
}

bool is_control(unsigned char c) {
  return c < 0x20 || c == 0x7F;
}

}  // namespace

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  std::size_t i = 0, shown = std::min(s.size(), max);
  while (i < shown) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (std::size_t n = is_control(c) ? 0 : utf8_length(s, i); n == 0) {
      out += fmt::format("\\x{:02x}", c);  // a control byte, or not valid UTF-8
    } else {
      // C1 controls (U+0080..U+009F) act as terminal controls too.
      if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
        out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
      } else {
        out.append(s.substr(i, n));
      }
      i += n;
      continue;
    }
    ++i;
  }
  if (shown < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

bool is_plain_text(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (is_control(c)) return false;
    std::size_t n = utf8_length(s, i);
    if (n == 0) return false;
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;
    i += n;
  }
  return true;
}

std::string shell_quote(std::string_view s) {
  static constexpr std::string_view safe =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@+%";
  if (!s.empty() && s.find_first_not_of(safe) == std::string_view::npos) return std::string(s);
  if (!is_plain_text(s)) {
    // $'...' (bash, zsh, ksh): control characters and stray bytes as \xNN keep the command on
    // one line.
    std::string out = "$'";
    for (std::size_t i = 0; i < s.size();) {
      auto c = static_cast<unsigned char>(s[i]);
      std::size_t n = is_control(c) ? 0 : utf8_length(s, i);
      if (c == '\\' || c == '\'') {
        out += '\\';
        out += static_cast<char>(c);
        ++i;
      } else if (n == 0 || (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0)) {
        out += fmt::format("\\x{:02x}", c);
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
    }
    return out + "'";
  }
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

}  // namespace metaop
