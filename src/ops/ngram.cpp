// TfIdfVectorizer (opset 9): counts, in each row of integer tokens X ([C] or [N, C]), the n-grams
// of a pool given as attributes, and writes per n-gram a term frequency (TF), an indicator
// times its weight (IDF) or the count times its weight (TFIDF). The pool lists the n-grams by
// size: ngram_counts[i] is where the (i+1)-grams start in pool_int64s, and the j-th n-gram of the
// pool (counted over every size) goes to output ngram_indexes[j]. An n-gram of size n with skip s
// takes the tokens at p, p + (s + 1), ..., p + (n - 1)(s + 1); every size in [min_gram_length,
// max_gram_length] and every skip in [0, max_skip_count] is counted, unigrams once (a skip
// does not change them). Where the text leaves details open this follows ONNX's reference
// evaluator and ONNX Runtime: an n-gram listed twice counts at its last place, and weights are
// indexed by output position. Counts are exact and TFIDF's products are rounded once: exact error
// model. String pools are not supported (MetaOp has no string tensors).
#include <map>

#include "ops/kernel_util.h"

namespace metaop {

namespace {

struct NgramPool {
  std::int64_t min_n = 1, max_n = 1, max_skip = 0, outputs = 0;
  std::string mode;
  std::map<std::vector<std::int64_t>, std::int64_t> index;  // n-gram -> output position
  std::vector<double> weights;
};

NgramPool ngram_pool(const KernelContext& c) {
  NgramPool p;
  p.min_n = attr_i(c, "min_gram_length");
  p.max_n = attr_i(c, "max_gram_length");
  p.max_skip = attr_i(c, "max_skip_count");
  p.mode = attr_s(c, "mode");
  if (p.mode != "TF" && p.mode != "IDF" && p.mode != "TFIDF")
    fail("{}: mode '{}' is not TF, IDF or TFIDF", c.node.label(), p.mode);
  if (p.min_n < 1 || p.max_n < p.min_n || p.max_skip < 0)
    fail(
        "{}: min_gram_length {}, max_gram_length {}, max_skip_count {}: need 1 <= min <= max "
        "and a skip count of at least 0",
        c.node.label(), p.min_n, p.max_n, p.max_skip);
  if (auto it = c.node.attrs.find("pool_strings");
      it != c.node.attrs.end() && !it->second.strings.empty())
    throw Unsupported(c.node.label() + ": pool_strings (MetaOp has no string tensors)");
  const auto pool = attr_ints_or(c, "pool_int64s", {});
  const auto counts = attr_ints(c, "ngram_counts");
  const auto indexes = attr_ints(c, "ngram_indexes");
  for (std::int64_t i : indexes) {
    if (i < 0)
      fail("{}: ngram_indexes holds {}: output positions are at least 0", c.node.label(), i);
    p.outputs = std::max(p.outputs, i + 1);
  }
  if (auto it = c.node.attrs.find("weights"); it != c.node.attrs.end())
    p.weights = it->second.floats;
  if (!p.weights.empty() && static_cast<std::int64_t>(p.weights.size()) < p.outputs)
    fail("{}: {} weights for {} outputs", c.node.label(), p.weights.size(), p.outputs);
  std::size_t ordinal = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const auto n = static_cast<std::int64_t>(i + 1);
    const std::int64_t begin = counts[i];
    const std::int64_t end =
        i + 1 < counts.size() ? counts[i + 1] : static_cast<std::int64_t>(pool.size());
    if (begin < 0 || end < begin || end > static_cast<std::int64_t>(pool.size()))
      fail("{}: ngram_counts [{}] do not fit a pool of {}", c.node.label(), fmt::join(counts, ", "),
           pool.size());
    for (std::int64_t at = begin; at + n <= end; at += n, ++ordinal) {
      if (ordinal >= indexes.size())
        fail("{}: the pool has more n-grams than ngram_indexes' {}", c.node.label(),
             indexes.size());
      if (n < p.min_n || n > p.max_n) continue;  // not counted, but it takes its place
      p.index[{pool.begin() + at, pool.begin() + at + n}] = indexes[ordinal];
    }
  }
  return p;
}

Tensors tfidf(const KernelContext& c, const Tensors& in) {
  const Tensor& X = input(c, in, 0);
  if (X.dtype() != DType::Int32 && X.dtype() != DType::Int64)
    fail("{}: X is {}: int32 or int64 tokens", c.node.label(), dtype_name(X.dtype()));
  if (X.rank() > 2) fail("{}: X of shape {}: [C] or [N, C]", c.node.label(), shape_str(X.shape()));
  const NgramPool p = ngram_pool(c);
  const std::int64_t rows = X.rank() == 2 ? X.dim(0) : 1;
  const std::int64_t C = X.rank() == 0 ? 1 : X.dim(-1);
  const auto x = X.to_i64();
  std::vector<double> y(static_cast<std::size_t>(rows * p.outputs), 0.0);
  std::vector<std::int64_t> gram;
  for (std::int64_t r = 0; r < rows; ++r) {
    double* out = y.data() + r * p.outputs;
    for (std::int64_t n = p.min_n; n <= p.max_n; ++n)
      for (std::int64_t skip = 0; skip <= (n == 1 ? 0 : p.max_skip); ++skip)
        for (std::int64_t start = 0; start + (n - 1) * (skip + 1) < C; ++start) {
          gram.clear();
          for (std::int64_t k = 0; k < n; ++k)
            gram.push_back(x[static_cast<std::size_t>(r * C + start + k * (skip + 1))]);
          if (auto it = p.index.find(gram); it != p.index.end()) out[it->second] += 1;
        }
    for (std::int64_t i = 0; i < p.outputs; ++i) {
      const double w = p.weights.empty() ? 1.0 : p.weights[static_cast<std::size_t>(i)];
      if (p.mode == "IDF") out[i] = out[i] > 0 ? w : 0;
      if (p.mode == "TFIDF") out[i] *= w;
    }
  }
  Shape shape = X.rank() == 2 ? Shape{rows, p.outputs} : Shape{p.outputs};
  return {Tensor::from_f64(y, shape, DType::Float32)};
}

}  // namespace

void register_ngram_ops(OpRegistry& r) {
  // Bigrams and trigrams with skips over a row where some repeat, and unigrams with weights.
  Attribute weights;
  weights.kind = Attribute::Kind::Floats;
  weights.floats = {0.5, 1.25, 2.0, 0.1, 3.0, 0.7};
  auto attrs = [weights](std::int64_t min_n, std::int64_t max_n, std::int64_t skip,
                         const char* mode) {
    return std::map<std::string, Attribute>{
        {"min_gram_length", Attribute::of_int(min_n)},
        {"max_gram_length", Attribute::of_int(max_n)},
        {"max_skip_count", Attribute::of_int(skip)},
        {"mode", Attribute::of_string(mode)},
        {"ngram_counts", Attribute::of_ints({0, 3, 7})},
        {"ngram_indexes", Attribute::of_ints({0, 1, 2, 3, 4, 5})},
        {"pool_int64s", Attribute::of_ints({2, 3, 5, 2, 3, 5, 7, 2, 5, 3})},
        {"weights", weights}};
  };
  const CaseInput tokens{{2, 8}, DType::Int64, {2, 3, 5, 7, 2, 3, 5, 3, 5, 2, 5, 3, 2, 7, 7, 2}};
  r.op("TfIdfVectorizer", Family::reduce, tfidf)
      .error(error_models::exact("exact: n-gram counts; TFIDF's count x weight rounded once"))
      .float32_rounded()
      .cases({{9, {tokens}, attrs(1, 3, 2, "TFIDF")},
              {9, {tokens}, attrs(2, 2, 0, "TF")},
              {9, {case_input::ints({8}, {5, 3, 2, 3, 5, 7, 2, 3})}, attrs(1, 2, 1, "IDF")}});
}

}  // namespace metaop
