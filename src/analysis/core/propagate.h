#pragma once
// The end-to-end error the error models predict for a model on given inputs: the model runs on
// the reference with every node's floating outputs moved by independent errors drawn uniformly
// within their local tolerance (what correct float32 kernels may do, op by op), `samples`
// times; per graph output, the normwise deviation max|perturbed - exact| / max|exact| of each
// sample. A real framework's end-to-end error far above these is more than rounding.
#include <map>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "ops/error_model.h"

namespace metaop {

struct PropagatedError {
  std::map<std::string, std::vector<double>> normwise;  // per output, one value per sample
};

PropagatedError propagate_tolerances(const Graph& g, const std::map<std::string, Tensor>& inputs,
                                     int samples, std::uint64_t seed,
                                     const AccumulationBound& bound = {});

}  // namespace metaop
