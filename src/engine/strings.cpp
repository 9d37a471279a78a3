#include "engine/strings.h"

#include <fmt/format.h>
#include <re2/re2.h>
#include <wctype.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <clocale>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "tensor/text.h"

namespace metaop {

namespace {

std::string attr_string(const Node& node, const std::string& name, const std::string& fallback) {
  auto it = node.attrs.find(name);
  return it != node.attrs.end() && it->second.kind == Attribute::Kind::String ? it->second.s
                                                                              : fallback;
}

std::int64_t attr_int(const Node& node, const std::string& name, std::int64_t fallback) {
  auto it = node.attrs.find(name);
  return it != node.attrs.end() && it->second.kind == Attribute::Kind::Int ? it->second.i
                                                                           : fallback;
}

// NumPy broadcasting of two shapes: the result's shape and, per result element, the element of
// each input it reads.
struct Broadcast {
  Shape shape;
  std::vector<std::size_t> a, b;
};

Broadcast broadcast(const Node& node, const Shape& sa, const Shape& sb) {
  const std::size_t rank = std::max(sa.size(), sb.size());
  Shape pa(rank - sa.size(), 1), pb(rank - sb.size(), 1);
  pa.insert(pa.end(), sa.begin(), sa.end());
  pb.insert(pb.end(), sb.begin(), sb.end());
  Broadcast r;
  for (std::size_t d = 0; d < rank; ++d) {
    if (pa[d] != pb[d] && pa[d] != 1 && pb[d] != 1)
      fail("{}: shapes {} and {} do not broadcast", node.label(), shape_str(sa), shape_str(sb));
    r.shape.push_back(pa[d] == 1 ? pb[d] : pa[d]);
  }
  // Row-major strides of each input, 0 along a broadcast axis.
  std::vector<std::size_t> stride_a(rank, 0), stride_b(rank, 0);
  std::size_t ka = 1, kb = 1;
  for (std::size_t d = rank; d-- > 0;) {
    stride_a[d] = pa[d] == 1 ? 0 : ka;
    stride_b[d] = pb[d] == 1 ? 0 : kb;
    ka *= static_cast<std::size_t>(pa[d]);
    kb *= static_cast<std::size_t>(pb[d]);
  }
  const auto n = static_cast<std::size_t>(shape_numel(r.shape));
  std::vector<std::int64_t> index(rank, 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t ia = 0, ib = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      ia += static_cast<std::size_t>(index[d]) * stride_a[d];
      ib += static_cast<std::size_t>(index[d]) * stride_b[d];
    }
    r.a.push_back(ia);
    r.b.push_back(ib);
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < r.shape[d]) break;
      index[d] = 0;
    }
  }
  return r;
}

// UTF-8 <-> code points, for case mapping.
std::u32string decode_utf8(const Node& node, const std::string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xE  ? 3
                    : (c >> 3) == 0x1E ? 4
                                       : 0;
    if (len == 0 || i + static_cast<std::size_t>(len) > s.size())
      fail("{}: the string '{}' is not UTF-8 text", node.label(), printable(s, 80));
    char32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((b >> 6) != 0x2)
        fail("{}: the string '{}' is not UTF-8 text", node.label(), printable(s, 80));
      cp = (cp << 6) | (b & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// Unicode simple case mapping (the C library's, under the C.UTF-8 locale).
std::string change_case(const Node& node, const std::string& s, bool upper) {
  static const locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  if (!utf8)
    fail("{}: the C.UTF-8 locale, which case mapping uses, is not available", node.label());
  std::u32string cps = decode_utf8(node, s);
  for (auto& cp : cps)
    cp = static_cast<char32_t>(upper ? towupper_l(static_cast<wint_t>(cp), utf8)
                                     : towlower_l(static_cast<wint_t>(cp), utf8));
  return encode_utf8(cps);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Python's str.split(delimiter, maxsplit): with no delimiter, at runs of whitespace and none at
// the ends (the rest after maxsplit splits keeps its own).
std::vector<std::string> split(const std::string& s, const std::string& delimiter,
                               std::int64_t maxsplit) {
  std::vector<std::string> parts;
  std::int64_t splits = 0;
  auto more = [&] { return maxsplit < 0 || splits < maxsplit; };
  if (!delimiter.empty()) {
    std::size_t start = 0;
    for (std::size_t at; more() && (at = s.find(delimiter, start)) != std::string::npos; ++splits) {
      parts.push_back(s.substr(start, at - start));
      start = at + delimiter.size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  std::size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  while (i < s.size()) {
    if (!more()) {
      parts.push_back(s.substr(i));
      break;
    }
    std::size_t end = i;
    while (end < s.size() && !is_space(s[end])) ++end;
    parts.push_back(s.substr(i, end - i));
    ++splits;
    i = end;
    while (i < s.size() && is_space(s[i])) ++i;
  }
  return parts;
}

}  // namespace

StringTensor string_normalizer(const Node& node, const StringTensor& x) {
  const bool row = x.shape.size() == 2;
  if (!(x.shape.size() == 1 || (row && x.shape[0] == 1)))
    fail("{}: input of shape {}: StringNormalizer takes [C] or [1, C]", node.label(),
         shape_str(x.shape));
  const std::string action = attr_string(node, "case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    fail("{}: case_change_action '{}' is none of NONE, LOWER and UPPER", node.label(),
         printable(action));
  const bool sensitive = attr_int(node, "is_case_sensitive", 0) != 0;
  std::set<std::string> stops;
  if (auto it = node.attrs.find("stopwords"); it != node.attrs.end())
    for (const auto& w : it->second.strings)
      stops.insert(sensitive ? w : change_case(node, w, false));
  StringTensor y;
  for (const auto& s : x.values) {
    if (stops.count(sensitive ? s : change_case(node, s, false))) continue;
    y.values.push_back(action == "NONE" ? s : change_case(node, s, action == "UPPER"));
  }
  if (y.values.empty()) y.values.emplace_back();
  const auto c = static_cast<std::int64_t>(y.values.size());
  y.shape = row ? Shape{1, c} : Shape{c};
  return y;
}

StringTensor string_concat(const Node& node, const StringTensor& x, const StringTensor& y) {
  Broadcast b = broadcast(node, x.shape, y.shape);
  StringTensor r;
  r.shape = b.shape;
  for (std::size_t i = 0; i < b.a.size(); ++i)
    r.values.push_back(x.values[b.a[i]] + y.values[b.b[i]]);
  return r;
}

std::pair<StringTensor, Tensor> string_split(const Node& node, const StringTensor& x) {
  const std::string delimiter = attr_string(node, "delimiter", "");
  const std::int64_t maxsplit = attr_int(node, "maxsplit", -1);
  if (node.attrs.count("maxsplit") && maxsplit < 0)
    fail("{}: maxsplit {} is negative", node.label(), maxsplit);
  std::vector<std::vector<std::string>> parts;
  std::size_t longest = 0;
  for (const auto& s : x.values) {
    parts.push_back(split(s, delimiter, maxsplit));
    longest = std::max(longest, parts.back().size());
  }
  StringTensor y;
  y.shape = x.shape;
  y.shape.push_back(static_cast<std::int64_t>(longest));
  std::vector<std::int64_t> counts;
  for (auto& p : parts) {
    counts.push_back(static_cast<std::int64_t>(p.size()));
    p.resize(longest);
    for (auto& s : p) y.values.push_back(std::move(s));
  }
  return {std::move(y), Tensor::from_i64(counts, x.shape)};
}

Tensor regex_full_match(const Node& node, const StringTensor& x) {
  const std::string pattern = attr_string(node, "pattern", "");
  RE2::Options options;
  options.set_log_errors(false);
  RE2 re(pattern, options);
  if (!re.ok())
    fail("{}: pattern '{}' is not an RE2 regular expression: {}", node.label(),
         printable(pattern, 120), re.error());
  std::vector<double> v;
  v.reserve(x.values.size());
  for (const auto& s : x.values) v.push_back(RE2::FullMatch(s, re) ? 1 : 0);
  return Tensor::from_f64(v, x.shape, DType::Bool);
}

Tensor equal_strings(const Node& node, const StringTensor& a, const StringTensor& b) {
  Broadcast br = broadcast(node, a.shape, b.shape);
  std::vector<double> v;
  v.reserve(br.a.size());
  for (std::size_t i = 0; i < br.a.size(); ++i)
    v.push_back(a.values[br.a[i]] == b.values[br.b[i]] ? 1 : 0);
  return Tensor::from_f64(v, br.shape, DType::Bool);
}

Tensor cast_from_strings(const Node& node, const StringTensor& x, DType to) {
  if (to == DType::Bool)
    throw Unsupported(
        fmt::format("{}: Cast of strings to bool (the ONNX text does not say how a "
                    "string reads as one)",
                    node.label()));
  auto bad = [&](const std::string& s) {
    fail("{}: the string '{}' is not a number of type {}", node.label(), printable(s, 80),
         dtype_name(to));
  };
  if (is_floating(to)) {
    std::vector<double> v;
    for (const auto& s : x.values) {
      const char* begin = s.c_str();
      char* end = nullptr;
      errno = 0;
      // float32 read in float32 (no double rounding); the others through double.
      double d = to == DType::Float32 ? static_cast<double>(std::strtof(begin, &end))
                                      : std::strtod(begin, &end);
      if (s.empty() || end != begin + s.size()) bad(s);
      v.push_back(d);
    }
    return Tensor::from_f64(v, x.shape, to);
  }
  Tensor t = Tensor::empty(to, x.shape);
  std::vector<std::int64_t> v;
  for (const auto& s : x.values) {
    const char* begin = s.data();
    const char* first = begin + (!s.empty() && s[0] == '+' ? 1 : 0);
    if (to == DType::UInt64) {
      std::uint64_t u = 0;
      auto [p, ec] = std::from_chars(first, begin + s.size(), u);
      if (ec != std::errc() || p != begin + s.size() || s.empty()) bad(s);
      v.push_back(static_cast<std::int64_t>(u));
      continue;
    }
    std::int64_t i = 0;
    auto [p, ec] = std::from_chars(first, begin + s.size(), i);
    if (ec != std::errc() || p != begin + s.size() || s.empty() ||
        static_cast<double>(i) < integer_lowest(to) || static_cast<double>(i) > integer_largest(to))
      bad(s);
    v.push_back(i);
  }
  if (to == DType::UInt64) {
    auto* out = t.data<std::uint64_t>();
    for (std::size_t k = 0; k < v.size(); ++k) out[k] = static_cast<std::uint64_t>(v[k]);
    return t;
  }
  return Tensor::from_i64(v, x.shape, to);
}

StringTensor cast_to_strings(const Node& node, const Tensor& x) {
  if (x.dtype() == DType::Bool)
    throw Unsupported(
        fmt::format("{}: Cast of bool to strings (the ONNX text does not say how "
                    "one is written)",
                    node.label()));
  StringTensor r;
  r.shape = x.shape();
  const std::int64_t n = x.numel();
  r.values.reserve(static_cast<std::size_t>(n));
  const std::vector<std::int64_t> ints = is_floating(x.dtype()) || x.dtype() == DType::UInt64
                                             ? std::vector<std::int64_t>{}
                                             : x.to_i64();
  for (std::int64_t i = 0; i < n; ++i) {
    if (!is_floating(x.dtype())) {
      r.values.push_back(x.dtype() == DType::UInt64
                             ? fmt::format("{}", x.data<std::uint64_t>()[i])
                             : fmt::format("{}", ints[static_cast<std::size_t>(i)]));
      continue;
    }
    const double d = x.f64_at(i);
    if (std::isnan(d))
      r.values.emplace_back("NaN");
    else if (std::isinf(d))
      r.values.emplace_back(d > 0 ? "INF" : "-INF");
    else if (x.dtype() == DType::Float64)
      r.values.push_back(fmt::format("{}", d));
    else
      r.values.push_back(fmt::format("{}", static_cast<float>(d)));
  }
  return r;
}

}  // namespace metaop
