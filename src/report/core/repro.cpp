#include "report/core/repro.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "analysis/check/check.h"
#include "analysis/core/train_check.h"
#include "analysis/probe/probe.h"
#include "bindings/dispatch.h"
#include "bindings/factory.h"
#include "bindings/onnx_import/import_binding.h"
#include "graph/onnx_io.h"
#include "ops/optimizer.h"
#include "ops/registry.h"
#include "report/core/format.h"
#include "report/core/native_onednn.h"
#include "report/core/tracker_report.h"
#include "tensor/error.h"
#include "tensor/npy.h"
#include "tensor/text.h"

namespace metaop {

namespace fs = std::filesystem;
using nlohmann::json;

// Generated from native/reproduce.py and native/reproduce.js (CMakeLists.txt).
extern const char* const kReproducePy;
extern const char* const kReproduceJs;

namespace {

// The source model as a reproducer names it: its folder and file name only
// ("test_maxpool_2d_pads/model.onnx"), so that no path of the machine that made it travels with
// a bug report.
std::string model_name(const std::string& path) {
  fs::path p(path);
  fs::path folder = p.parent_path().filename();
  return (folder.empty() ? p.filename() : folder / p.filename()).string();
}

// What every repro.json says: the finding, where (`node`: a node's name, or an update's
// weight), the model (model_name) and the injected faults that applied.
json manifest_head(const FindingCore& f, const std::string& node, const std::string& model,
                   const std::vector<std::string>& inject) {
  json j = {{"schema", "metaop-repro/1"},
            {"phase", to_string(f.phase)},
            {"kind", to_string(f.kind)},
            {"binding", f.binding},
            {"node", node},
            {"op_type", f.op_type},
            {"model", model_name(model)},
            {"detail", f.detail},
            {"inject", inject}};
  // The framework's version the finding was made with (torch and torch-1.13 are two LibTorches).
  if (std::string v = binding_version(f.binding); !v.empty()) j["binding_version"] = v;
  // The kernels it dispatched to, where a variable chose them (--onednn-isa, --torch-isa).
  if (auto env = dispatch_environment(f.binding); !env.empty()) j["environment"] = env;
  // The level an ONNX-import binding's framework ran at (--ort-opt ...): its kernels and
  // rewrites differ by level (ONNX Runtime's NCHWc convolutions only at "all").
  if (auto [option, level] = import_binding_level(f.binding); !option.empty())
    j["level"] = {{"option", option}, {"value", level}};
  if (f.cls != FindingClass::None) {
    j["class"] = to_string(f.cls);
    j["class_basis"] = f.class_basis;
  }
  return j;
}

// The Python package a binding's framework-native script needs, and the framework's name in
// reproduce.py; empty for the bindings whose script is not reproduce.py (oneDNN's is a C++
// program, native_onednn.h; the npm builds of ONNX Runtime run reproduce.js) or that have none.
struct NativeFramework {
  const char* framework;
  const char* package;
};
std::optional<NativeFramework> native_framework(const std::string& binding) {
  if (binding == "ort") return NativeFramework{"onnxruntime", "onnxruntime"};
  if (binding == "openvino") return NativeFramework{"openvino", "openvino"};
  if (binding == "tvm") return NativeFramework{"tvm", "apache-tvm and onnx"};
  if (binding == "opencv") return NativeFramework{"opencv", "opencv-python-headless"};
  // PyTorch eager, from repro.json's `node` (the ops reproduce.py maps to the ATen calls of the
  // torch binding; any torch release, 1.13 for torch-1.13).
  if (binding == "torch" || binding == "torch-1.13") return NativeFramework{"torch", "torch"};
  return std::nullopt;
}

bool onednn_binding(const std::string& binding) {
  return binding == "onednn" || binding.starts_with("onednn-");
}

// Whether repro.json carries the node itself (`onnx_node`, with the initializers as .npy): for the
// scripts that do not read model.onnx (PyTorch eager, the oneDNN program).
bool node_in_manifest(const std::string& binding) {
  auto nf = native_framework(binding);
  return (nf && std::string(nf->framework) == "torch") || onednn_binding(binding);
}

// The node's inputs, one per node input: `in` where defined, else the model's initializer.
Tensors with_initializers(const Graph& g, const Node& node, Tensors in) {
  in.resize(node.inputs.size());
  for (std::size_t i = 0; i < node.inputs.size(); ++i)
    if (!in[i].defined())
      if (auto it = g.initializers.find(node.inputs[i]); it != g.initializers.end())
        in[i] = it->second;
  return in;
}

// The node for a script that does not read model.onnx (PyTorch eager): its op, opset, every
// attribute (the schema's defaults filled in) and each input's file, the initializers written as
// initializer_K_NAME.npy.
json node_json(const fs::path& dir, const Graph& g, const Node& node, const json& input_files,
               const Tensors& in) {
  Node full = node;
  fill_schema_defaults(full, g.opset);
  json attrs = json::object();
  for (const auto& [name, a] : full.attrs) {
    using K = Attribute::Kind;
    switch (a.kind) {
      case K::Int:
        attrs[name] = a.i;
        break;
      case K::Float:
        attrs[name] = json_number(a.f);
        break;
      case K::String:
        attrs[name] = a.s;
        break;
      case K::Ints:
        attrs[name] = a.ints;
        break;
      case K::Floats:
        attrs[name] = a.floats;
        break;
      case K::Strings:
        attrs[name] = a.strings;
        break;
      default:
        break;  // tensors and graphs: no eager op here reads them
    }
  }
  json inputs = json::array();
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    json file = i < input_files.size() ? input_files[i] : json();
    if (file.is_null() && i < in.size() && in[i].defined() && in[i].dtype() != DType::BFloat16) {
      file = fmt::format("initializer_{}_{}.npy", i, safe_file_name(node.inputs[i]));
      write_npy((dir / file.get<std::string>()).string(), in[i]);
    }
    inputs.push_back(file);
  }
  // The outputs by position ("" for one the node leaves out): the eager call returns them so.
  return {{"op_type", node.op_type},
          {"opset", g.opset},
          {"attributes", attrs},
          {"inputs", inputs},
          {"outputs", node.outputs}};
}

// A reproducer's framework-native script: what it needs, the framework's name, and the commands
// that run it in the folder (one per line).
struct NativeScript {
  std::string needs, framework, commands;
};

// reproduce_onednn.cpp for a forward finding of a oneDNN binding (none for an op the program has
// no primitive for).
std::optional<NativeScript> write_onednn_program(const fs::path& dir, const Graph& g,
                                                 const Finding& f, const json& manifest) {
  if (f.phase != Phase::Forward) return std::nullopt;
  const Node& node = g.nodes[f.node];
  std::vector<std::string> files;
  for (const auto& file : manifest["onnx_node"]["inputs"])
    files.push_back(file.is_string() ? file.get<std::string>() : "");
  std::vector<NativeOutput> outputs;
  for (const auto& o : manifest["outputs"])
    if (o["reference"].is_string() && o["got"].is_string())
      outputs.push_back({o["name"], o["reference"], o["got"]});
  std::string program = onednn_program(node, g.opset, with_initializers(g, node, f.inputs), files,
                                       outputs, dispatch_environment(f.binding));
  if (program.empty()) return std::nullopt;
  write_file((dir / "reproduce_onednn.cpp").string(), program);
  bool wheel = binding_version(f.binding).starts_with("3.");
  return NativeScript{
      "a C++17 compiler and oneDNN", "oneDNN",
      fmt::format("DNNL={}  # the folder holding oneDNN's include/ and lib/: {}\n"
                  "c++ -std=c++17 reproduce_onednn.cpp -I\"$DNNL/include\" -L\"$DNNL/lib\" "
                  "-Wl,--disable-new-dtags,-rpath,\"$DNNL/lib\" -ldnnl -o reproduce_onednn && "
                  "./reproduce_onednn\n",
                  wheel ? "$(python3 -c 'import sys; print(sys.prefix)')" : "/usr",
                  wheel ? "the Python environment of PyPI's onednn-devel"
                        : "/usr for Debian's libdnnl-dev")};
}

// reproduce_BINDING.js (src/report/core/native/reproduce.js) for the npm builds of ONNX Runtime:
// Node.js with onnxruntime-node (ort-1.30) or onnxruntime-web (ort-wasm).
std::optional<NativeScript> write_node_script(const fs::path& dir, const std::string& binding) {
  bool wasm = binding == "ort-wasm";
  std::string package = wasm ? "onnxruntime-web" : "onnxruntime-node";
  std::string script = kReproduceJs;
  for (auto [key, value] : {std::pair<std::string, std::string>{"%PACKAGE%", package},
                            {"%PROVIDER%", wasm ? "wasm" : "cpu"}})
    script.replace(script.find(key), key.size(), value);
  std::string name = fmt::format("reproduce_{}.js", safe_file_name(binding));
  write_file((dir / name).string(), script);
  std::string version = binding_version(binding);
  version = version.substr(0, version.find(' '));
  return NativeScript{
      fmt::format("Node.js and the npm package {} {}", package, version), "onnxruntime",
      fmt::format("npm install --ignore-scripts {}@{}  # or NODE_PATH naming a node_modules "
                  "that has it\nnode {}\n",
                  package, version, name)};
}

// The binding's framework-native script in `dir`: reproduce_BINDING.py
// (src/report/core/native/reproduce.py) for a framework run from Python, reproduce_BINDING.js
// for the npm builds of ONNX Runtime, reproduce_onednn.cpp for oneDNN.
std::optional<NativeScript> write_native_script(const fs::path& dir, const Graph& g,
                                                const Finding& f, const json& manifest) {
  if (onednn_binding(f.binding)) return write_onednn_program(dir, g, f, manifest);
  if (f.binding == "ort-1.30" || f.binding == "ort-wasm") return write_node_script(dir, f.binding);
  auto nf = native_framework(f.binding);
  if (!nf) return std::nullopt;
  std::string script = kReproducePy;
  auto at = script.find("%FRAMEWORK%");
  if (at != std::string::npos) script.replace(at, 11, nf->framework);
  std::string name = fmt::format("reproduce_{}.py", safe_file_name(f.binding));
  write_file((dir / name).string(), script);
  return NativeScript{fmt::format("Python 3 with numpy and {}", nf->package), nf->framework,
                      fmt::format("python3 {}\n", name)};
}

// The README's lines about the native script ("" without one).
std::string native_readme(const std::optional<NativeScript>& s, const Finding& f) {
  if (!s)
    return onednn_binding(f.binding)
               ? fmt::format(
                     "\nNo oneDNN program for {} {} findings yet: metaop repro . replays it.\n",
                     printable(f.op_type), to_string(f.phase))
               : "";
  std::string commands;
  for (std::size_t at = 0; at < s->commands.size();) {
    std::size_t end = std::min(s->commands.find('\n', at), s->commands.size());
    commands += "  " + s->commands.substr(at, end - at) + "\n";
    at = end + 1;
  }
  return fmt::format(
      "\nWithout MetaOp (needs {}; prints {}'s values, the exact ones\n"
      "and the error in ULPs; exit 1 while the finding reproduces):\n{}",
      s->needs, s->framework, commands);
}

// " --onednn-isa sse41", " --ort-opt basic": the options that set the dispatch variables and the
// level `binding` runs under.
std::string dispatch_args(const std::string& binding) {
  std::string out;
  auto env = dispatch_environment(binding);
  for (const auto& v : dispatch_variables()) {
    auto it = env.find(v.env);
    if (it == env.end()) continue;
    for (const auto& [name, value] : v.values)
      if (value == it->second) out += fmt::format(" {} {}", v.option, name);
  }
  if (auto [option, level] = import_binding_level(binding); !option.empty())
    out += fmt::format(" {} {}", option, level);
  return out;
}

// "class float32-limit: BASIS" and a line break, for a README (with what the other frameworks
// gave, when known); "" without a class.
std::string class_line(const FindingCore& f) {
  if (f.cls == FindingClass::None) return "";
  std::string line =
      fmt::format("class {}: {}\n", to_string(f.cls), printable(f.class_basis, 4000));
  if (!f.agreement.empty())
    line += fmt::format("other frameworks on these inputs, {}\n", printable(f.agreement, 4000));
  return line;
}

// "torch (2.15.0)": the binding and its framework's version, for a README's first line.
std::string binding_with_version(const std::string& binding) {
  std::string v = binding_version(binding);
  return v.empty() ? binding : fmt::format("{} ({})", binding, v);
}

// A check finding's inputs: the files in node order (null: an initializer of model.onnx, or an
// omitted input). The commands pass them by position, in the order they are model.onnx's graph
// inputs (first use in the node; a value used twice is one input): names never need quoting.
json save_check_inputs(const fs::path& dir, const Graph& g, const Node& node, const Tensors& in,
                       const std::set<std::string>& constants, std::string& input_args,
                       std::string& input_list) {
  std::vector<std::string> files(node.inputs.size());
  std::map<std::string, std::string> file_of;
  for (std::size_t i = 0; i < node.inputs.size() && i < in.size(); ++i) {
    if (node.inputs[i].empty() || !in[i].defined() || g.initializers.count(node.inputs[i]) ||
        constants.count(node.inputs[i]))
      continue;
    std::string file = fmt::format("input_{}_{}.npy", i, safe_file_name(node.inputs[i]));
    write_npy((dir / file).string(), in[i]);
    files[i] = file;
    if (file_of.emplace(node.inputs[i], file).second) {
      input_args += " --input " + shell_quote(file);
      input_list += fmt::format("  {} <- '{}'\n", file, printable(node.inputs[i]));
    }
  }
  json list = json::array();
  for (const auto& file : files) list.push_back(file.empty() ? json() : json(file));
  return list;
}

// A check finding's outputs, WHO_INDEX_NAME.npy; bfloat16 ones are left out (null).
json save_check_outputs(const fs::path& dir, const Node& node, const Tensors& ts,
                        const std::string& who) {
  json list = json::array();
  for (std::size_t i = 0; i < ts.size() && i < node.outputs.size(); ++i) {
    std::string file = fmt::format("{}_{}_{}.npy", who, i, safe_file_name(node.outputs[i]));
    bool kept = ts[i].defined() && ts[i].dtype() != DType::BFloat16;
    if (kept) write_npy((dir / file).string(), ts[i]);
    list.push_back(kept ? json(file) : json());
  }
  return list;
}

// A training finding's tensors of one role, ROLE_INDEX_NAME.npy; null for an omitted or absent
// tensor. .npy has no bfloat16: such tensors are stored as float32 (exactly) and listed in
// "bfloat16", for `metaop repro` to convert back.
void save_role(json& j, const fs::path& dir, const std::string& role, const Tensors& ts,
               const std::vector<std::string>& names) {
  json list = json::array();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (!ts[i].defined()) {
      list.push_back(nullptr);
      continue;
    }
    std::string file = safe_file_name(
        fmt::format("{}_{}_{}.npy", role, i, i < names.size() ? names[i] : std::string()));
    bool bf16 = ts[i].dtype() == DType::BFloat16;
    write_npy((dir / file).string(), bf16 ? ts[i].to(DType::Float32) : ts[i]);
    if (bf16) j["bfloat16"].push_back(file);
    list.push_back(file);
  }
  j["files"][role] = list;
}

// An update's files and settings; returns what the folder holds, in words.
std::string save_update(json& j, const fs::path& dir, const TrainFinding& f,
                        const OptimizerConfig& optimizer) {
  std::vector<std::string> names{"weight", "grad"};
  for (const auto& s : optimizer_slots(optimizer)) names.push_back(s);
  save_role(j, dir, "inputs", f.inputs, names);
  names.erase(names.begin() + 1);
  save_role(j, dir, "got", f.got, names);
  j["optimizer"] = optimizer_to_json(optimizer);
  return fmt::format(
      "the {} update of weight '{}' at step {}: inputs_0 is the weight before the step, "
      "inputs_1 its gradient, the others the optimizer's state before the step (none at the "
      "first step); got_* are what {} made of them (the new weight, then the new state)",
      optimizer.kind, f.node, f.step, f.binding);
}

// A node's forward or backward: the node alone and its files; returns what the folder holds.
std::string save_node(json& j, const fs::path& dir, const Graph& h, const TrainFinding& f) {
  std::size_t k = 0;
  while (k < h.nodes.size() && h.nodes[k].name != f.node) ++k;
  if (k == h.nodes.size()) fail("reproducer: node '{}' is not in {}", f.node, h.path);
  const Node& node = h.nodes[k];
  bool backward = f.phase == Phase::Backward;
  SubgraphSpec spec;
  spec.nodes = {k};
  for (std::size_t i = 0; i < node.inputs.size() && i < f.inputs.size(); ++i)
    if (!node.inputs[i].empty() && f.inputs[i].defined()) spec.values[node.inputs[i]] = f.inputs[i];
  const Tensors& outs = backward ? f.outputs : f.got;
  for (std::size_t i = 0; i < node.outputs.size() && i < outs.size(); ++i)
    if (!node.outputs[i].empty() && outs[i].defined()) spec.values[node.outputs[i]] = outs[i];
  write_file((dir / "model.onnx").string(), export_subgraph(h, spec));
  save_role(j, dir, "inputs", f.inputs, node.inputs);
  if (backward) {
    save_role(j, dir, "outputs", f.outputs, node.outputs);
    save_role(j, dir, "output_grads", f.output_grads, node.outputs);
    save_role(j, dir, "got", f.got, node.inputs);
    return fmt::format(
        "the backward of node '{}' ({}) at step {}: model.onnx is the node alone, inputs_* its "
        "inputs, outputs_* its forward outputs, output_grads_* the gradients that reached them; "
        "got_* are the input gradients {} computed",
        f.node, f.op_type, f.step, f.binding);
  }
  save_role(j, dir, "got", f.got, node.outputs);
  return fmt::format(
      "the forward of node '{}' ({}) at step {}: model.onnx is the node alone, inputs_* its "
      "inputs; got_* are its outputs under {}",
      f.node, f.op_type, f.step, f.binding);
}

// What a script without MetaOp reads from repro.json: model.onnx's graph inputs in order with
// their files (`feeds`), its outputs with the reference's and the binding's files (`outputs`),
// and for PyTorch eager the node itself (`onnx_node`).
void add_script_fields(json& manifest, const fs::path& dir, const Graph& g, const Finding& f,
                       const json& reference) {
  const Node& node = g.nodes[f.node];
  manifest["feeds"] = json::array();
  std::set<std::string> fed;
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    const json& file = manifest["files"]["inputs"][i];
    if (!file.is_null() && fed.insert(node.inputs[i]).second)
      manifest["feeds"].push_back({node.inputs[i], file});
  }
  manifest["outputs"] = json::array();
  const json got = manifest["files"]["got"];
  auto file_at = [](const json& list, std::size_t i) { return i < list.size() ? list[i] : json(); };
  for (std::size_t i = 0; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty())
      manifest["outputs"].push_back({{"name", node.outputs[i]},
                                     {"reference", file_at(reference, i)},
                                     {"got", file_at(got, i)}});
  if (node_in_manifest(f.binding))
    manifest["onnx_node"] =
        node_json(dir, g, node, manifest["files"]["inputs"], with_initializers(g, node, f.inputs));
}

// report.md's case: the node, its inputs (initializers included) and which came from files.
TrackerCase tracker_case(const Graph& g, const Finding& f, const json& manifest,
                         const std::optional<NativeScript>& script) {
  const Node& node = g.nodes[f.node];
  TrackerCase tc;
  tc.node = &node;
  tc.opset = g.opset;
  tc.inputs = with_initializers(g, node, f.inputs);
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    const json& file = manifest["files"]["inputs"][i];
    tc.fed.push_back(!file.is_null());
    tc.input_files.push_back(file.is_null() ? "" : file.get<std::string>());
  }
  tc.reference = f.reference_outputs;
  tc.got = f.binding_outputs;
  if (script) {
    tc.framework = script->framework;
    tc.script_needs = script->needs;
    tc.script_commands = script->commands;
  }
  return tc;
}

}  // namespace

std::string write_check_reproducer(const Graph& g, const Finding& f, const std::string& root,
                                   const std::vector<std::string>& inject,
                                   const std::string& name) {
  std::string extra_args;
  for (const auto& s : inject) extra_args += " --inject " + shell_quote(s);
  extra_args += dispatch_args(f.binding);
  const Node& node = g.nodes[f.node];
  json manifest = manifest_head(f, node.name, g.path, inject);
  fs::path dir =
      fs::path(root) /
      safe_file_name(!name.empty() ? name : fmt::format("{}_{}_{}", f.binding, f.kind, node.name));
  fs::create_directories(dir);
  SubgraphSpec spec;
  spec.nodes = {f.node};
  // The node's parameters (shapes, axes, split sizes, slopes ...: not data, ops/manifest.h) are
  // initializers, as exporters write them and as the ONNX-import bindings ran the node: a
  // framework may fold or refuse a node by whether they are constant (TVM's Split).
  const MetaOp* op = OpRegistry::instance().find(node.op_type);
  for (std::size_t i = 0; i < node.inputs.size() && i < f.inputs.size(); ++i) {
    if (node.inputs[i].empty() || !f.inputs[i].defined()) continue;
    spec.values[node.inputs[i]] = f.inputs[i];
    if (op && !op->inputs.is_data(i, f.inputs[i].dtype())) spec.constants.insert(node.inputs[i]);
  }
  for (std::size_t i = 0; i < node.outputs.size() && i < f.reference_outputs.size(); ++i)
    if (!node.outputs[i].empty() && f.reference_outputs[i].defined())
      spec.values[node.outputs[i]] = f.reference_outputs[i];
  write_file((dir / "model.onnx").string(), export_subgraph(g, spec));
  std::string input_args, input_list;
  manifest["files"]["inputs"] =
      save_check_inputs(dir, g, node, f.inputs, spec.constants, input_args, input_list);
  input_args += extra_args;
  json reference = save_check_outputs(dir, node, f.reference_outputs, "reference");
  manifest["files"]["got"] = save_check_outputs(dir, node, f.binding_outputs, f.binding);
  add_script_fields(manifest, dir, g, f, reference);
  write_file((dir / "repro.json").string(), dump_json(manifest));
  auto script = write_native_script(dir, g, f, manifest);
  std::string native = native_readme(script, f);
  write_file((dir / "report.md").string(), tracker_report(f, tracker_case(g, f, manifest, script)));
  std::string b = shell_quote(f.binding);
  // Names and details are data: escaped, one line each; every command is one line.
  write_file(
      (dir / "README.txt").string(),
      fmt::format(
          "metaop check finding: {} under {} at node '{}' ({}) of {}\n\n{}\n{}{}\n\n"
          "model.onnx is the node alone; initializers are embedded, the other inputs are the .npy\n"
          "files (in the order the commands pass them):\n{}reference_*.npy are the float64\n"
          "reference's outputs on these inputs (rounded once), {}_*.npy the binding's.\n"
          "report.md has it all written for the framework's issue tracker.\n\n"
          "Show it:\n"
          "  metaop repro .\n"
          "  metaop check model.onnx{} --bind {}\n"
          "  metaop run model.onnx{} --bind {} --out out-{}\n"
          "  metaop run model.onnx{} --bind reference --out out-reference\n{}",
          f.kind, binding_with_version(f.binding), printable(node.name), printable(node.op_type),
          printable(model_name(g.path)), printable(f.detail, 4000), class_line(f),
          printable(f.verification, 4000), input_list, f.binding, input_args, b, input_args, b,
          safe_file_name(f.binding), input_args, native));
  return dir.string();
}

std::string write_train_reproducer(const Graph& h, const TrainFinding& f,
                                   const OptimizerConfig& optimizer,
                                   const std::vector<std::string>& inject, const std::string& model,
                                   const std::string& root) {
  fs::path dir = fs::path(root) /
                 safe_file_name(fmt::format("{}_{}_{}_{}", f.binding, f.phase, f.kind, f.node));
  fs::create_directories(dir);
  json j = manifest_head(f, f.node, model, inject);
  j["step"] = f.step;
  OptimizerConfig at_step = optimizer;  // the learning rate of the finding's step
  if (f.lr > 0) at_step.lr = f.lr;
  std::string what =
      f.phase == Phase::Update ? save_update(j, dir, f, at_step) : save_node(j, dir, h, f);
  write_file((dir / "repro.json").string(), dump_json(j));
  std::string inject_text;
  for (const auto& s : inject) inject_text += " (injected: " + printable(s) + ")";
  write_file(
      (dir / "README.txt").string(),
      fmt::format(
          "metaop train finding: {} {} under {}{} in {}\n\n{}\n{}{}\n\nThis folder holds {}.\n\n"
          "Judge it again against the float64 reference and the error model (exit 1 when the "
          "defect reproduces):\n  metaop repro .\nor under another binding:\n  metaop repro . "
          "--bind reference\n",
          f.phase, f.kind, binding_with_version(f.binding), inject_text,
          printable(model_name(model)), printable(f.detail, 4000), class_line(f),
          printable(f.verification, 4000), printable(what, 4000)));
  return dir.string();
}

std::string write_probe_reproducer(const ProbeFinding& f, const std::string& root) {
  if (f.phase == Phase::Update) {
    TrainFinding tf;
    static_cast<FindingCore&>(tf) = f;
    tf.node = f.op_type;  // names the reproducer folder
    tf.step = static_cast<std::size_t>(f.step);
    tf.verification = fmt::format("probe: {}, pattern {}", f.test, f.pattern);
    tf.inputs = f.inputs;
    tf.got = f.binding_outputs;
    return write_train_reproducer(Graph{}, tf, f.optimizer, {}, "metaop probe", root);
  }
  Finding fin;
  static_cast<FindingCore&>(fin) = f;
  fin.node = 0;
  fin.node_name = f.graph.nodes.empty() ? "" : f.graph.nodes[0].name;
  fin.verification = fmt::format("probe: test {}, pattern {}", f.test, f.pattern);
  fin.inputs = f.inputs;
  fin.reference_outputs = f.reference_outputs;
  fin.binding_outputs = f.binding_outputs;
  std::string name = fmt::format("{}_{}_{}", f.binding, f.kind, fin.node_name);
  if (f.cls != FindingClass::None) name += fmt::format("_{}", to_string(f.cls));
  return write_check_reproducer(f.graph, fin, root, {}, name);
}

nlohmann::json optimizer_to_json(const OptimizerConfig& c) {
  return {{"kind", c.kind},
          {"lr", c.lr},
          {"momentum", c.momentum},
          {"nesterov", c.nesterov},
          {"weight_decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps}};
}

OptimizerConfig optimizer_from_json(const nlohmann::json& j) {
  OptimizerConfig c;
  c.kind = j.at("kind").get<std::string>();
  c.lr = j.at("lr").get<double>();
  c.momentum = j.at("momentum").get<double>();
  c.nesterov = j.at("nesterov").get<bool>();
  c.weight_decay = j.at("weight_decay").get<double>();
  c.beta1 = j.at("beta1").get<double>();
  c.beta2 = j.at("beta2").get<double>();
  c.eps = j.at("eps").get<double>();
  return c;
}

}  // namespace metaop
