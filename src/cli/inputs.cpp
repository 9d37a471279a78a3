#include "cli/inputs.h"

#include <filesystem>
#include <random>

#include "tensor/npy.h"
#include "tensor/tensor_proto.h"

namespace metaop::cli {

std::pair<double, double> parse_range(const std::string& s) {
  auto comma = s.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument(s);
    double lo = std::stod(s.substr(0, comma)), hi = std::stod(s.substr(comma + 1));
    if (!(lo <= hi)) throw std::invalid_argument(s);
    return {lo, hi};
  } catch (const std::exception&) {
    fail("--range '{}': expected LO,HI with LO <= HI", s);
  }
}

Tensor load_tensor_file(const std::string& path) {
  if (!std::filesystem::exists(path)) fail("{}: no such file", path);
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
  std::vector<double> v(static_cast<std::size_t>(shape_numel(s)));
  if (is_floating(*vi.dtype)) {
    std::uniform_real_distribution<double> dist(range.first, range.second);
    for (auto& x : v) x = dist(rng);
  } else if (*vi.dtype == DType::Bool) {
    std::bernoulli_distribution dist(0.5);
    for (auto& x : v) x = dist(rng);
  } else {
    std::uniform_int_distribution<std::int64_t> dist(
        static_cast<std::int64_t>(std::ceil(range.first)),
        static_cast<std::int64_t>(std::floor(range.second)));
    for (auto& x : v) x = static_cast<double>(dist(rng));
  }
  return Tensor::from_f64(v, s, *vi.dtype);
}

}  // namespace

std::pair<std::map<std::string, Tensor>, std::map<std::string, std::string>> gather_inputs(
    const Graph& g, const InputSpec& spec) {
  std::map<std::string, Tensor> inputs;
  std::map<std::string, std::string> sources;
  std::size_t next_positional = 0;
  for (const auto& arg : spec.args) {
    std::string name, path = arg;
    auto eq = arg.find('=');
    if (eq != std::string::npos) {
      std::string maybe = arg.substr(0, eq);
      for (const auto& vi : g.inputs)
        if (vi.name == maybe) {
          name = maybe;
          path = arg.substr(eq + 1);
        }
      if (name.empty() && !std::filesystem::exists(arg))
        fail("--input {}: the model {} has no input named '{}'", arg, g.path, maybe);
    }
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

}  // namespace metaop::cli
