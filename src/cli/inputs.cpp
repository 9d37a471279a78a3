#include "cli/inputs.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "cli/host.h"
#include "engine/control_flow.h"
#include "tensor/heap.h"
#include "tensor/npy.h"
#include "tensor/tensor_proto.h"
#include "tensor/text.h"

namespace metaop::cli {

std::pair<double, double> parse_range(const std::string& s) {
  auto comma = s.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument(s);
    std::size_t used_lo = 0, used_hi = 0;
    std::string a = s.substr(0, comma), b = s.substr(comma + 1);
    double lo = std::stod(a, &used_lo), hi = std::stod(b, &used_hi);
    if (used_lo != a.size() || used_hi != b.size()) throw std::invalid_argument(s);
    if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) throw std::invalid_argument(s);
    return {lo, hi};
  } catch (const std::exception&) {
    fail("--range '{}': expected LO,HI, finite numbers with LO <= HI", printable(s, 80));
  }
}

Tensor load_tensor_file(const std::string& path) {
  if (std::string name = array_name(path); !name.empty()) {
    if (Host* h = host())
      if (auto it = h->arrays.find(name); it != h->arrays.end()) return it->second;
    fail("{}: no such array was given", printable(path, 200));
  }
  auto ext = std::filesystem::path(path).extension().string();
  if (ext == ".npy") return read_npy(path);
  if (ext == ".pb") return read_tensor_pb(path);
  fail("{}: unknown input format (expected .npy or .pb)", path);
}

namespace {

Tensor random_tensor(const ValueInfo& vi, std::mt19937_64& rng, std::pair<double, double> range) {
  if (!vi.dtype)
    fail("input '{}': cannot make random values of type {}", vi.name,
         onnx_type_name(vi.onnx_elem_type));
  Shape s;
  if (vi.dims)
    for (auto d : *vi.dims) s.push_back(d < 0 ? 1 : d);  // symbolic dims become 1
  // Checked before the values are made (overflow, memory budget).
  const std::string what =
      fmt::format("random values for input '{}' {}", printable(vi.name), shape_str(s));
  std::int64_t bytes = 0;
  try {
    bytes = shape_nbytes(s, DType::Float64);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  check_budget(bytes, what);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(s)));
  if (is_floating(*vi.dtype)) {
    std::uniform_real_distribution<double> dist(range.first, range.second);
    for (auto& x : v) x = dist(rng);
  } else if (*vi.dtype == DType::Bool) {
    std::bernoulli_distribution dist(0.5);
    for (auto& x : v) x = dist(rng);
  } else {
    // Integers of the range that the dtype holds; a range without one is refused (an empty
    // distribution draws garbage such as 1e18).
    double lo = std::ceil(range.first), hi = std::floor(range.second);
    // Up to 2^53 (exact in the doubles below) for int64 and uint64.
    double tlo = integer_lowest(*vi.dtype);
    double thi = std::min(integer_largest(*vi.dtype), 9007199254740992.0);
    if (lo > hi || lo < tlo || hi > thi)
      fail("input '{}' is {}: --range {},{} {} (give a range of integers within [{:.0f}, {:.0f}])",
           printable(vi.name), dtype_name(*vi.dtype), range.first, range.second,
           lo > hi ? "holds no integer" : "goes past what the type holds", tlo, thi);
    std::uniform_int_distribution<std::int64_t> dist(static_cast<std::int64_t>(lo),
                                                     static_cast<std::int64_t>(hi));
    for (auto& x : v) x = static_cast<double>(dist(rng));
  }
  return Tensor::from_f64(v, s, *vi.dtype);
}

}  // namespace

std::pair<std::map<std::string, Tensor>, std::map<std::string, std::string>> gather_inputs(
    const Graph& g, const InputSpec& spec) {
  for (const auto& vi : g.inputs)
    if (vi.sequence || vi.optional)
      throw Unsupported(fmt::format(
          "{}: input '{}' is {}: --input and --random-inputs give tensors (conform reads such "
          "inputs from ONNX test data)",
          g.path, printable(vi.name),
          vi.optional ? (vi.sequence ? "an optional sequence" : "an optional tensor")
                      : "a sequence of tensors"));
    else if (is_string_value(vi))
      throw Unsupported(fmt::format(
          "{}: input '{}' is a string tensor: --input and --random-inputs give numeric tensors "
          "(conform reads string inputs from ONNX test data)",
          g.path, printable(vi.name)));
  std::map<std::string, Tensor> inputs;
  std::map<std::string, std::string> sources;
  std::size_t next_positional = 0;
  for (const auto& arg : spec.args) {
    std::string name, path = arg;
    // NAME=FILE: the longest input name followed by '=' (names may hold '=' themselves).
    for (const auto& vi : g.inputs)
      if (arg.size() > vi.name.size() && arg.compare(0, vi.name.size(), vi.name) == 0 &&
          arg[vi.name.size()] == '=' && vi.name.size() >= name.size()) {
        name = vi.name;
        path = arg.substr(vi.name.size() + 1);
      }
    auto eq = arg.find('=');
    std::error_code ec;
    if (name.empty() && eq != std::string::npos && !std::filesystem::exists(arg, ec))
      fail("--input {}: the model {} has no input named '{}'", printable(arg), g.path,
           printable(arg.substr(0, eq)));
    if (name.empty()) {
      while (next_positional < g.inputs.size() && inputs.count(g.inputs[next_positional].name))
        ++next_positional;
      if (next_positional >= g.inputs.size())
        fail("--input {}: more input files than the model's {} inputs", arg, g.inputs.size());
      name = g.inputs[next_positional++].name;
    }
    if (inputs.count(name)) fail("--input {}: input '{}' given twice", arg, name);
    inputs[name] = load_tensor_file(path);
    sources[name] = path;
  }
  std::mt19937_64 rng(spec.seed);
  for (const auto& vi : g.inputs) {
    if (inputs.count(vi.name)) continue;
    if (!spec.random)
      fail("{}: no value for input '{}' (give --input FILE or --random-inputs)", g.path, vi.name);
    inputs[vi.name] = random_tensor(vi, rng, spec.range);
    sources[vi.name] = "random input '" + vi.name + "'";
  }
  return {inputs, sources};
}

Graph inline_for_inputs(const Graph& g, const std::map<std::string, Tensor>& inputs) {
  InlinedGraph in = inline_control_flow(g, inputs);
  for (const auto& p : in.path) fmt::print(stderr, "control flow: {}\n", p);
  return std::move(in.graph);
}

}  // namespace metaop::cli
