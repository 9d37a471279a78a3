#pragma once
// The operators of string tensors, which engine/control_flow evaluates as it lowers a model (they
// have no numerics to judge, so no binding runs them): StringNormalizer, StringConcat,
// StringSplit, RegexFullMatch, Equal of strings, and Cast from and to STRING. Each follows the
// ONNX text; each fails (Error) naming the node where its input breaks it.
#include <utility>

#include "graph/graph.h"
#include "tensor/composite.h"

namespace metaop {

// Removes the stopwords (compared without case unless is_case_sensitive) from a [C] or [1, C]
// tensor, then lowers or uppers the rest (Unicode simple case mapping of UTF-8 text); nothing
// left: one empty string, of shape [1] or [1, 1].
StringTensor string_normalizer(const Node& node, const StringTensor& x);
// Element-wise concatenation, broadcast as NumPy broadcasts.
StringTensor string_concat(const Node& node, const StringTensor& x, const StringTensor& y);
// Each string split at `delimiter` (empty or absent: at runs of whitespace, none at either end),
// at most `maxsplit` times: the substrings, padded with empty strings to the longest count along
// a new last axis, and the counts.
std::pair<StringTensor, Tensor> string_split(const Node& node, const StringTensor& x);
// Whether each string matches `pattern` (RE2 syntax) whole.
Tensor regex_full_match(const Node& node, const StringTensor& x);
// Equal of two string tensors, broadcast.
Tensor equal_strings(const Node& node, const StringTensor& a, const StringTensor& b);
// Cast of strings to a floating or integer type: plain and scientific notation, and "NaN",
// "INF", "-INF" (any case) for floating types; anything else fails naming the string.
Tensor cast_from_strings(const Node& node, const StringTensor& x, DType to);
// Cast of a numeric tensor to strings: a float the shortest text that reads back as the same
// float32 (float64 for a double: 0.039187793f is "0.039187793"), "NaN", "INF" and "-INF"; an
// integer its decimal digits. bool is Unsupported (the ONNX text does not say how it is written).
StringTensor cast_to_strings(const Node& node, const Tensor& x);

}  // namespace metaop
