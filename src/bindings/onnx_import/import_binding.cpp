#include "bindings/onnx_import/import_binding.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "graph/onnx_io.h"
#include "ops/registry.h"

namespace metaop {

namespace {

std::atomic<int> g_threads{1};

// The level chosen per option (--ort-opt ...), shared by the bindings that have the option;
// an option not given leaves each binding at its default.
std::mutex g_levels_mutex;
std::map<std::string, std::string>& chosen_levels() {
  static std::map<std::string, std::string> m;
  return m;
}

// Data inputs (as the op declares them, ops/manifest.h) are graph inputs; the others are
// parameters (weights, shapes, axes, scales...), written as initializers as exporters write
// them -- frameworks prepack constant weights and fold constant subexpressions (ONNX Runtime,
// OpenVINO and TVM all do), which is what their users get.
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

// One-node sessions, cached per signature; one worker per binding for the whole process.
struct ImportState {
  explicit ImportState(const AdapterCommand& command) : process(command) {}
  struct Entry {
    std::uint32_t id = 0;
    std::uint64_t generation = 0, last_use = 0;
  };
  AdapterProcess process;
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

ImportState& state(const ImportBindingSpec& spec) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ImportState>> states;
  std::lock_guard<std::mutex> lock(mutex);
  auto& st = states[spec.name];
  if (!st) st = std::make_unique<ImportState>(spec.command);
  return *st;
}

int level_index(const ImportBindingSpec& spec, const std::string& level) {
  for (std::size_t i = 0; i < spec.levels.size(); ++i)
    if (spec.levels[i] == level) return static_cast<int>(i);
  fail("{} {}: expected {}", spec.level_option, level, fmt::join(spec.levels, ", "));
}

int current_level(const ImportBindingSpec& spec) {
  std::string level = spec.level_option.empty() ? "" : import_level(spec.level_option);
  return level_index(spec, level.empty() ? spec.default_level : level);
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

std::string import_level(const std::string& option) {
  std::lock_guard<std::mutex> lock(g_levels_mutex);
  auto it = chosen_levels().find(option);
  return it == chosen_levels().end() ? std::string() : it->second;
}

void set_import_level(const std::string& option, const std::string& level) {
  for (const auto& spec : import_binding_specs())
    if (spec.level_option == option) level_index(spec, level);  // fails for a wrong value
  std::lock_guard<std::mutex> lock(g_levels_mutex);
  chosen_levels()[option] = level;
}

std::pair<std::string, std::string> import_binding_level(const std::string& binding) {
  for (const auto& spec : import_binding_specs())
    if (spec.name == binding && !spec.level_option.empty())
      return {spec.level_option, spec.levels[static_cast<std::size_t>(current_level(spec))]};
  return {};
}

void set_import_threads(int n) {
  g_threads = n;
}

std::string import_binding_problem(const ImportBindingSpec& spec) {
  return AdapterProcess(spec.command).installation_problem();
}

Support ImportBinding::supports(const std::string& op_type) const {
  Support s;
  const MetaOp* op = OpRegistry::instance().find(op_type);
  if (!op) {
    s.reason = "not a meta operator";
    return s;
  }
  // Measured on ai.onnx.preview.training's Adam, Adagrad and Momentum: ONNX Runtime 1.31 says
  // "is not a registered function/op", OpenVINO, TVM and OpenCV 5 have no converter either.
  if (!op->onnx_domain.empty()) {
    s.reason =
        fmt::format("{} runs no operator of the {} domain", spec_.framework, op->onnx_domain);
    return s;
  }
  if (auto it = spec_.lacking.find(op_type); it != spec_.lacking.end()) {
    s.reason = it->second;
    return s;
  }
  s.forward = true;
  // The node goes to the framework as it comes: an op ONNX defines for integers or bool alone
  // has those, the others the floating types the framework computes in.
  s.dtypes = op->dtypes.empty() ? spec_.dtypes : op->dtypes;
  return s;
}

const std::source_location kImportForward = std::source_location::current();

std::vector<std::string> ImportBinding::where(const std::string& op_type) const {
  if (!supports(op_type).forward) return {};
  return {fmt::format("forward: {} (the node as a one-node model in the {} worker, {})",
                      location(kImportForward), spec_.framework, spec_.worker_source)};
}

Tensors ImportBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  ImportState& st = state(spec_);
  std::lock_guard<std::mutex> lock(st.mutex);
  const int level = current_level(spec_);
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
    if (auto d = spec_.declined_dtypes.find(t.dtype()); d != spec_.declined_dtypes.end())
      throw Unsupported(fmt::format("{}: {} input '{}': {}", node.label(), dtype_name(t.dtype()),
                                    node.inputs[k], d->second));
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
  key += fmt::format("{}|", fmt::join(outputs, ","));
  key += node_export_metadata_key();  // the one-node model carries the model's metadata
  const std::string what = fmt::format("{}: {}", node.label(), name());
  std::uint32_t id = st.session(
      key, level, [&] { return export_node(n, opset, spec, "metaop_node"); }, what);
  Tensors got = st.process.run(id, feeds, outputs, what);
  Tensors result;
  std::size_t k = 0;
  for (const auto& o : node.outputs) {
    if (o.empty()) {
      result.emplace_back();
      continue;
    }
    const Tensor& t = got.at(k++);
    if (auto d = spec_.declined_dtypes.find(t.dtype()); d != spec_.declined_dtypes.end())
      throw Unsupported(
          fmt::format("{}: {} output '{}': {}", node.label(), dtype_name(t.dtype()), o, d->second));
    result.push_back(t);
  }
  return result;
}

namespace {

class ImportModelRunner final : public WholeModelRunner {
 public:
  explicit ImportModelRunner(const ImportBindingSpec& spec) : spec_(spec) {}
  std::string name() const override { return spec_.name; }
  std::vector<std::string> levels() const override { return spec_.levels; }
  std::string level_option() const override { return spec_.level_option; }
  std::size_t first_fusing_level() const override { return spec_.first_fusing_level; }
  std::string users_level() const override {
    std::string level = import_level(spec_.level_option);
    return level.empty() ? spec_.default_level : level;
  }
  std::map<std::string, Tensor> run(const WholeModel& m,
                                    const std::map<std::string, Tensor>& inputs,
                                    const std::vector<std::string>& outputs,
                                    const std::string& level) override {
    ImportState& st = state(spec_);
    std::lock_guard<std::mutex> lock(st.mutex);
    int lv = level_index(spec_, level);
    std::string model = serialize_model(m);
    const std::string what = fmt::format("{}: {} whole model", m.graph.path, spec_.name);
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

 private:
  const ImportBindingSpec& spec_;
};

}  // namespace

std::unique_ptr<WholeModelRunner> make_import_model_runner(const ImportBindingSpec& spec) {
  return std::make_unique<ImportModelRunner>(spec);
}

const ImportBindingSpec* find_import_spec(const std::string& name) {
  for (const auto& s : import_binding_specs())
    if (s.name == name) return &s;
  return nullptr;
}

ImportBindingSpec python_import_spec(const std::string& binding, const std::string& framework,
                                     const std::string& distribution, const std::string& what,
                                     const std::string& adapter_path) {
  ImportBindingSpec s;
  s.name = binding;
  s.framework = framework;
  s.source = fmt::format("PyPI {}, {}", distribution, what);
  // dist-info folders spell the distribution with underscores.
  std::string dist = distribution;
  std::replace(dist.begin(), dist.end(), '-', '_');
  s.version = pypi_version(dist);
  s.command = python_adapter(binding, framework, adapter_path, dist);
  s.worker_source = adapter_path;
  return s;
}

std::string pypi_version(const std::string& distribution) {
  namespace fs = std::filesystem;
  // .venv/lib/python3.X/site-packages/<distribution>-<version>.dist-info
  std::error_code ec;
  fs::path lib = fs::path(venv_python()).parent_path().parent_path() / "lib";
  for (const auto& py : fs::directory_iterator(lib, ec)) {
    if (!py.path().filename().string().starts_with("python")) continue;  // lib/ holds libraries too
    std::error_code ec2;
    for (const auto& e : fs::directory_iterator(py.path() / "site-packages", ec2)) {
      std::string f = e.path().filename().string();
      const std::string suffix = ".dist-info";
      if (f.size() > distribution.size() + suffix.size() + 1 && f.starts_with(distribution + "-") &&
          f.ends_with(suffix))
        return f.substr(distribution.size() + 1,
                        f.size() - distribution.size() - 1 - suffix.size());
    }
  }
  return "";
}

AdapterCommand python_adapter(const std::string& binding, const std::string& framework,
                              const std::string& module_path, const std::string& distribution) {
  AdapterCommand c;
  c.framework = framework;
  std::string worker = metaop_source("src/bindings/onnx_import/metaop_adapter.py");
  // METAOP_ADAPTER_<BINDING> (ORT, OPENVINO, ...) stands another adapter module in.
  std::string var = "METAOP_ADAPTER_";
  for (char ch : binding)
    var += std::isalnum(static_cast<unsigned char>(ch))
               ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch)))
               : '_';
  const char* own = std::getenv(var.c_str());
  std::string module = own && *own ? own : metaop_source(module_path);
  c.argv = {venv_python(), "-s", worker, module};
  c.need_files = {worker, module};
  if (pypi_version(distribution).empty())
    c.missing = fmt::format("the Python package {} is not in the project's environment ({})",
                            distribution, venv_python());
  c.install_hint =
      "run scripts/install-deps.sh (it makes the project's Python environment, .venv), or set "
      "METAOP_PYTHON to a Python that has " +
      distribution;
  // The worker and adapters are read from the source tree, which stays clean.
  c.env = {"PYTHONDONTWRITEBYTECODE=1"};
  return c;
}

}  // namespace metaop
