#pragma once
// Names from models and files are printed and written as data, never as terminal controls or
// extra lines: printable() escapes control characters, DEL and bytes that are not UTF-8 as
// \xNN (and newline, tab, carriage return as \n, \t, \r) and shortens very long names;
// shell_quote() makes a word one shell argument.
#include <cstddef>
#include <string>
#include <string_view>

namespace metaop {

// At most `max` bytes of the input are shown; a longer name gets "... (N bytes)".
std::string printable(std::string_view s, std::size_t max = 256);
// Whether s is valid UTF-8 without control characters (printable(s) == s for short names).
bool is_plain_text(std::string_view s);
// One shell argument on one line, whatever the bytes: plain words as they are, text in
// '...' quotes ('it'\''s'), and anything with control characters or bytes that are not UTF-8
// as $'...' with \xNN escapes (bash, zsh, ksh).
std::string shell_quote(std::string_view s);

}  // namespace metaop
