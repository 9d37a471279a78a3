#include "analysis/core/onnx_tests.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "graph/graph.h"
#include "tensor/tensor_proto.h"
#include "tensor/text.h"

namespace fs = std::filesystem;

namespace metaop {

std::vector<std::string> find_conformance_tests(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    if (!fs::exists(p)) fail("{}: no such file or directory", p);
    if (fs::exists(fs::path(p) / "model.onnx")) {
      out.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx"))
        found.push_back(e.path().string());
    if (found.empty()) fail("{}: no test folders (model.onnx) found", p);
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

std::vector<fs::path> sorted_pbs(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".pb")
      v.push_back({std::stoi(name.substr(prefix.size())), e.path()});
  }
  std::sort(v.begin(), v.end());
  std::vector<fs::path> out;
  out.reserve(v.size());
  for (auto& [i, p] : v) out.push_back(p);
  return out;
}

namespace {

// bfloat16 tensors are stored as UINT16 (NumPy has no bfloat16): their bits, as declared.
Tensor as_declared(Tensor t, const ValueInfo& declared) {
  if (t.dtype() != DType::UInt16 || declared.dtype != DType::BFloat16) return t;
  Tensor b = Tensor::empty(DType::BFloat16, t.shape());
  if (t.nbytes()) std::memcpy(b.raw(), t.raw(), t.nbytes());
  return b;
}

std::string kind(const ValueInfo& v) {
  if (v.optional) return v.sequence ? "an optional sequence" : "an optional tensor";
  return "a sequence";
}

}  // namespace

Tensor read_test_tensor(const std::string& path, const ValueInfo& declared) {
  if (declared.sequence || declared.optional)
    throw Unsupported(fmt::format("{}: '{}' is {} of tensors, not a tensor", path,
                                  printable(declared.name), kind(declared)));
  return as_declared(read_tensor_pb(path), declared);
}

CompositeValue read_test_composite(const std::string& path, const ValueInfo& declared) {
  CompositeValue v = read_composite_pb(path, declared.optional, declared.sequence);
  for (auto& t : v.tensors) t = as_declared(std::move(t), declared);
  return v;
}

std::map<std::string, Tensor> load_test_inputs(const Graph& g, const std::string& dir) {
  fs::path set = fs::path(dir) / "test_data_set_0";
  if (!fs::is_directory(set)) fail("{}: no test_data_set_0 folder", dir);
  auto in_files = sorted_pbs(set, "input_");
  if (in_files.size() > g.inputs.size())
    fail("{}: {} input files for {} graph inputs", set.string(), in_files.size(), g.inputs.size());
  std::map<std::string, Tensor> inputs;
  for (std::size_t i = 0; i < in_files.size(); ++i)
    inputs[g.inputs[i].name] = read_test_tensor(in_files[i].string(), g.inputs[i]);
  return inputs;
}

}  // namespace metaop
