#include "bindings/ort/ort_binding.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "bindings/ort/ort_process.h"
#include "graph/onnx_io.h"
#include "ops/registry.h"

namespace metaop {

namespace {

std::atomic<int> g_level{3};
std::atomic<int> g_threads{1};

// Meta operators ONNX Runtime 1.30's CPU and WebAssembly builds have no kernel for, as the
// binding tests found (session creation fails with NOT_IMPLEMENTED for every case), with why.
const std::map<std::string, std::string>& lacking(bool wasm) {
  static const std::map<std::string, std::string> cpu = {};
  static const std::map<std::string, std::string> web = {};
  return wasm ? web : cpu;
}

// Data inputs (as the op declares them, ops/manifest.h) are graph inputs; the others are
// parameters (weights, shapes, axes, scales...), written as initializers as exporters write
// them -- ONNX Runtime prepacks constant weights and folds constant subexpressions, which is what
// its users get.
bool is_data_input(const std::string& op, std::size_t k, const Tensor& t) {
  const MetaOp* m = OpRegistry::instance().find(op);
  return m ? m->inputs.is_data(k, t.dtype()) : k == 0;
}

std::uint64_t hash_bytes(const void* p, std::size_t n) {
  return XXH3_64bits(p, n);
}

void key_tensor(std::string& key, const Tensor& t, bool contents) {
  key += fmt::format("{}{}", dtype_name(t.dtype()), shape_str(t.shape()));
  if (contents) key += fmt::format("#{:x}", hash_bytes(t.raw(), t.nbytes()));
}

// One-node sessions, cached per signature; one worker per flavor for the whole process.
struct OrtState {
  explicit OrtState(const std::string& flavor) : process(flavor) {}
  struct Entry {
    std::uint32_t id = 0;
    std::uint64_t generation = 0, last_use = 0;
  };
  OrtProcess process;
  std::unordered_map<std::string, Entry> sessions;
  std::uint64_t clock = 0;
  std::mutex mutex;
  static constexpr std::size_t kMaxSessions = 2048;

  // The cached session of `key`, or a new one from `model()` (evicting the least recently
  // used beyond kMaxSessions).
  template <typename ModelFn>
  std::uint32_t session(const std::string& key, int level, const ModelFn& model,
                        const std::string& what) {
    ++clock;
    auto it = sessions.find(key);
    if (it != sessions.end() && it->second.generation == process.generation()) {
      it->second.last_use = clock;
      return it->second.id;
    }
    if (sessions.size() >= kMaxSessions) {
      auto oldest = sessions.begin();
      for (auto i = sessions.begin(); i != sessions.end(); ++i)
        if (i->second.last_use < oldest->second.last_use) oldest = i;
      if (oldest->second.generation == process.generation()) process.forget(oldest->second.id);
      sessions.erase(oldest);
    }
    std::string bytes = model();
    std::uint32_t id = process.load(bytes, level, g_threads, what);
    sessions[key] = Entry{id, process.generation(), clock};
    return id;
  }
};

OrtState& state(bool wasm) {
  static OrtState cpu("cpu"), web("wasm");
  return wasm ? web : cpu;
}

// The attributes, in a form that tells different values apart.
void key_attrs(std::string& key, const Node& n) {
  for (const auto& [name, a] : n.attrs) {
    key += name + "=";
    switch (a.kind) {
      case Attribute::Kind::Int:
        key += fmt::format("i{}", a.i);
        break;
      case Attribute::Kind::Float:
        key += fmt::format("f{:a}", a.f);
        break;
      case Attribute::Kind::String:
        key += fmt::format("s{}:{}", a.s.size(), a.s);
        break;
      case Attribute::Kind::Tensor:
        key_tensor(key, a.t, true);
        break;
      case Attribute::Kind::Ints:
        key += fmt::format("I{}", fmt::join(a.ints, ","));
        break;
      case Attribute::Kind::Floats:
        for (double f : a.floats) key += fmt::format("{:a},", f);
        break;
      case Attribute::Kind::Strings:
        for (const auto& s : a.strings) key += fmt::format("{}:{},", s.size(), s);
        break;
      case Attribute::Kind::Unsupported:
        throw Unsupported(
            fmt::format("{}: attribute '{}' of type {}", n.label(), name, a.unsupported_type));
    }
    key += ";";
  }
}

}  // namespace

const std::vector<std::string>& ort_levels() {
  static const std::vector<std::string> l = {"disabled", "basic", "extended", "all"};
  return l;
}

int ort_level_index(const std::string& level) {
  const auto& l = ort_levels();
  for (std::size_t i = 0; i < l.size(); ++i)
    if (l[i] == level) return static_cast<int>(i);
  fail("--ort-opt {}: expected disabled, basic, extended or all", level);
}

void OrtBinding::set_level(const std::string& level) {
  g_level = ort_level_index(level);
}
std::string OrtBinding::level() {
  return ort_levels()[static_cast<std::size_t>(g_level.load())];
}
void OrtBinding::set_threads(int n) {
  g_threads = n;
}

std::string ort_binding_problem(const std::string& binding) {
  return ort_installation_problem(binding == "ort-wasm" ? "wasm" : "cpu");
}

Support OrtBinding::supports(const std::string& op_type) const {
  Support s;
  if (!OpRegistry::instance().find(op_type)) {
    s.reason = "not a meta operator";
    return s;
  }
  if (auto it = lacking(wasm_).find(op_type); it != lacking(wasm_).end()) {
    s.reason = it->second;
    return s;
  }
  s.forward = true;
  s.dtypes = {DType::Float32};
  return s;
}

const std::source_location kOrtForward = std::source_location::current();

std::vector<std::string> OrtBinding::where(const std::string& op_type) const {
  if (!supports(op_type).forward) return {};
  return {
      fmt::format("forward: {} (the node as a one-node session in the ONNX Runtime worker, "
                  "src/bindings/ort/ort_worker.js)",
                  location(kOrtForward))};
}

Tensors OrtBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  OrtState& st = state(wasm_);
  std::lock_guard<std::mutex> lock(st.mutex);
  const int level = g_level;
  // The node under canonical value names, so that nodes alike share one session.
  Node n = node;
  n.name = node.op_type;
  std::map<std::string, std::string> renamed;
  std::vector<std::pair<std::string, Tensor>> feeds;
  SubgraphSpec spec;
  spec.nodes = {0};
  std::string key =
      fmt::format("{}|{}|{}|{}|{}|", level, g_threads.load(), opset, node.domain, node.op_type);
  key_attrs(key, node);
  for (std::size_t k = 0; k < node.inputs.size(); ++k) {
    if (node.inputs[k].empty()) {
      key += "-|";
      continue;
    }
    if (k >= inputs.size() || !inputs[k].defined())
      fail("{}: input '{}' has no value", node.label(), node.inputs[k]);
    const Tensor& t = inputs[k];
    if (t.dtype() == DType::BFloat16)
      throw Unsupported(node.label() +
                        ": ONNX Runtime's JavaScript API has no bfloat16 tensor type");
    auto [it, fresh] = renamed.emplace(node.inputs[k], fmt::format("in{}", k));
    n.inputs[k] = it->second;
    if (!fresh) {
      key += fmt::format("={}|", it->second);
      continue;
    }
    bool data = is_data_input(node.op_type, k, t);
    spec.values[it->second] = t;
    if (data)
      feeds.emplace_back(it->second, t);
    else
      spec.constants.insert(it->second);
    key += data ? "d" : "c";
    key_tensor(key, t, !data);
    key += "|";
  }
  std::vector<std::string> outputs;
  for (std::size_t j = 0; j < n.outputs.size(); ++j) {
    if (n.outputs[j].empty()) continue;
    n.outputs[j] = fmt::format("out{}", j);
    outputs.push_back(n.outputs[j]);
  }
  key += fmt::format("{}", fmt::join(outputs, ","));
  const std::string what = fmt::format("{}: {}", node.label(), name());
  std::uint32_t id = st.session(
      key, level,
      [&] {
        Graph g;
        g.path = node.label();
        g.name = "metaop_ort";
        g.opset = opset;
        g.nodes = {n};
        return export_subgraph(g, spec);
      },
      what);
  Tensors got = st.process.run(id, feeds, outputs, what);
  Tensors result;
  std::size_t k = 0;
  for (const auto& o : node.outputs) result.push_back(o.empty() ? Tensor() : got.at(k++));
  return result;
}

std::map<std::string, Tensor> ort_run_model(const std::string& flavor, const std::string& model,
                                            const std::map<std::string, Tensor>& inputs,
                                            const std::vector<std::string>& outputs,
                                            const std::string& level, const std::string& what) {
  OrtState& st = state(flavor == "wasm");
  std::lock_guard<std::mutex> lock(st.mutex);
  int lv = ort_level_index(level);
  std::string key = fmt::format("model|{}|{}|{:x}|{}", lv, g_threads.load(),
                                hash_bytes(model.data(), model.size()), model.size());
  std::uint32_t id = st.session(
      key, lv, [&] { return model; }, what);
  std::vector<std::pair<std::string, Tensor>> feeds(inputs.begin(), inputs.end());
  Tensors got = st.process.run(id, feeds, outputs, what);
  std::map<std::string, Tensor> out;
  for (std::size_t i = 0; i < outputs.size(); ++i) out[outputs[i]] = got.at(i);
  return out;
}

}  // namespace metaop
