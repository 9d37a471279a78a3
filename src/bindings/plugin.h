#pragma once
// Framework bindings as plugins. Each framework binding is a shared library (build/plugins/
// metaop-NAME.so, built only when its framework is found) that registers one description of all
// its faces: name, framework and version, node kernels, and where it has them an update kernel
// (train's optimizers), a whole-model runner (whole-graph mode) and intra-op threads. MetaOp
// itself links no framework: what it needs to know before running anything (which ops and dtypes
// a binding runs, where its kernels are declared) comes from the plugin's manifest, a JSON file
// written next to the plugin by a child process the first time it is needed (and again whenever
// the plugin changes). The library itself is loaded only where a kernel runs: in the binding's
// worker process (isolate.h), or in MetaOp's process when the user asked for no isolation or a
// whole-model run needs it. Two versions of one framework never share a process.
//
// A plugin's source file:
//   void metaop_plugin_register(metaop::PluginRegistrar& r) {
//     r.add({.name = "torch", .framework = "LibTorch", .version = TORCH_VERSION,
//            .make = [] { return std::make_unique<TorchBinding>(); }, ...});
//   }
// Plugins are found in the folders of the environment variable METAOP_PLUGIN_PATH (':'-separated
// folders or .so files; first found wins, so a plugin built against another framework build can
// stand in for the bundled one), then in the build's plugin folder.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings/binding.h"

namespace metaop {

class WholeModelRunner;  // bindings/whole_model.h

// Every face of one binding. `make` is required; the others are empty where the binding lacks
// them.
struct BindingDescription {
  std::string name;       // as --bind names it
  std::string framework;  // "LibTorch": two versions of one framework never share a process
  std::string version;    // the framework's version, as reproducers and JSON report it
  bool isolate = true;    // its kernels run in a worker process unless --isolation none
  std::function<std::unique_ptr<Binding>()> make;
  std::function<std::unique_ptr<UpdateKernel>(const OptimizerConfig&)> update;
  std::function<std::unique_ptr<WholeModelRunner>()> whole_model;
  std::function<void(int)> set_threads;
};

class PluginRegistrar {
 public:
  void add(BindingDescription d);
  std::vector<BindingDescription>& bindings() { return bindings_; }

 private:
  std::vector<BindingDescription> bindings_;
};

// Bumped whenever BindingDescription, Binding or what they pass changes shape: a plugin built
// against another value is refused with a message naming both.
inline constexpr int kPluginAbi = 1;

// What MetaOp knows of a binding without loading it.
struct BindingInfo {
  std::string name, framework, version;
  std::string plugin;  // the shared library; empty for the bindings built into MetaOp
  bool isolate = true;
  bool update = false;                                    // has an update kernel
  bool whole_model = false;                               // has a whole-model runner
  std::map<std::string, Support> support;                 // per registered op
  std::map<std::string, std::vector<std::string>> where;  // per op, where it has kernels
};

// What `b` says of every registered op: its support and where its kernels are (the manifest's
// per-op part; the built-in bindings' whole description).
void describe_ops(const Binding& b, BindingInfo& info);

// The plugins' bindings, in the order found (factory.h adds the built-in ones). Reading the
// manifests loads no plugin, except in the child that writes a missing or stale one.
const std::vector<BindingInfo>& plugin_infos();
// Plugins that were found but could not be described (the library failed to load, its ABI
// differs): file and reason, for the message of an unknown binding.
const std::vector<std::pair<std::string, std::string>>& plugin_problems();

// The description of a plugin's binding, loading the plugin into this process if needed (fails
// when another version of its framework is loaded here already).
const BindingDescription& load_plugin_binding(const BindingInfo& info);

// A binding of a plugin: supports() and where() from the manifest; forward, backward and the
// update kernel load the plugin in the process where they run (the worker, under isolation).
std::unique_ptr<Binding> plugin_binding(const BindingInfo& info);

// Intra-op threads for every framework (process-wide; 1 by default, for reproducible
// comparisons): plugins loaded later, in workers among them, start with it.
void set_framework_threads(int n);
int framework_threads();

}  // namespace metaop

// A plugin's entry points (unmangled, so MetaOp finds them by name): its registration, which
// the plugin defines, and the ABI it was built for, which every plugin gets from
// plugin_abi.cpp (metaop_plugin in CMakeLists.txt adds it).
extern "C" {
__attribute__((visibility("default"))) void metaop_plugin_register(metaop::PluginRegistrar& r);
__attribute__((visibility("default"))) int metaop_plugin_abi();
}
