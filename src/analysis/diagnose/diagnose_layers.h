#pragma once
// The dense layers of a model being diagnosed and how they feed each other: what the width
// check (diagnose_width) widens and the symmetry check (diagnose_static) reads.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace metaop {

// A dense layer: Gemm, or MatMul with its weight as input 1; the weight 2-D and trainable.
struct Dense {
  std::size_t index = 0;
  std::string weight, bias;         // bias: Gemm's C, or the Add after a MatMul ("" when none)
  std::size_t bias_add = SIZE_MAX;  // the MatMul's bias Add
  bool out_rows = false;  // the weight holds one row per output ([out, in]: Gemm transB=1)
  std::int64_t fan_in = 0, fan_out = 0;
  std::string output;  // the layer's output value, after its bias Add
};

class DenseLayers {
 public:
  explicit DenseLayers(const Graph& g);

  // By node index.
  const std::map<std::size_t, Dense>& all() const { return by_node_; }

  // The dense layer that `layer`'s output feeds through unit-wise activations alone (each the
  // only consumer of its input: Relu, LeakyRelu, Tanh, Sigmoid, Elu, Selu, Gelu, Softplus,
  // Identity), with the values on the way; layer SIZE_MAX when it feeds anything else.
  struct Feed {
    std::size_t layer = SIZE_MAX;
    std::vector<std::string> path;
  };
  Feed next(const Dense& layer) const;

 private:
  std::optional<Dense> dense(std::size_t k) const;

  const Graph& g_;
  std::set<std::string> train_;
  std::map<std::string, std::vector<std::size_t>> consumers_;
  std::map<std::size_t, Dense> by_node_;
};

// Element (unit, input) of a dense layer's weight, whichever way it is stored.
double dense_weight(const Dense& d, const std::vector<double>& w, std::int64_t unit,
                    std::int64_t input);

// A hidden dense layer whose units start identical -- every unit's weights and bias the same --
// and that the layer it feeds (through unit-wise activations) weighs alike, unit by unit: each
// unit then gets the same gradient at every step, under any optimizer that works element by
// element (SGD, momentum, Adam, weight decay), so the units stay identical and the layer computes
// one feature however long it trains. A constant initialization makes them.
struct SymmetricLayer {
  std::size_t index = 0;  // the layer's node
  std::size_t next = 0;   // the layer it feeds
  std::int64_t units = 0;
  double value = 0;  // its first weight, which every unit shares
};
std::vector<SymmetricLayer> symmetric_layers(const Graph& g);

}  // namespace metaop
