#pragma once
// Reproducer folders, written and read. check, probe and train --check write one per finding:
// the node alone (model.onnx) or the optimizer's settings, the .npy files the judgement needs,
// repro.json and a README with the commands that show it. `metaop repro DIR` reads repro.json
// back: every field checked for its type, every file it names confined to the folder. A
// repro.json comes with bug reports, so it is untrusted like a model.
// Written in repro.cpp; read in repro_read.cpp, which links on its own (tests/fuzz).
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/core/finding.h"

namespace metaop {

struct Graph;
struct Finding;
struct ProbeFinding;
struct TrainFinding;
struct OptimizerConfig;

// A check finding's folder under `root`: the one-node model, its inputs, the reference's and the
// binding's outputs, repro.json and a README; returns it. `inject`: the --inject specs of an
// evaluation run, passed on to each command. `name`: the folder's name (default
// BINDING_KIND_NODE).
std::string write_check_reproducer(const Graph& g, const Finding& f, const std::string& root,
                                   const std::vector<std::string>& inject = {},
                                   const std::string& name = "");

// A training finding's folder under `root`: repro.json (what, where, the binding, the injected
// faults that applied, the optimizer and step for an update), the .npy files the judgement
// needs (the node's or update's inputs, for backward also the forward outputs and the output
// gradients, and what the binding produced), model.onnx (the node alone, for forward and
// backward) and a README. `h` is the training graph (the model with its loss); `inject` the
// --inject specs that applied to the finding. Returns the folder.
std::string write_train_reproducer(const Graph& h, const TrainFinding& f,
                                   const OptimizerConfig& optimizer,
                                   const std::vector<std::string>& inject, const std::string& model,
                                   const std::string& root);

// A probe finding's folder under `root`: an op's as check writes it (named
// BINDING_KIND_NODE_CLASS: one op's findings of one kind may differ in class), an update's as
// train does.
std::string write_probe_reproducer(const ProbeFinding& f, const std::string& root);

// The optimizer's settings as repro.json (and diagnose's JSON) has them, and back (throws on a
// missing key).
nlohmann::json optimizer_to_json(const OptimizerConfig& c);
OptimizerConfig optimizer_from_json(const nlohmann::json& j);

struct ReproManifest {
  Phase phase = Phase::Forward;
  std::string binding;              // the binding whose finding it is
  std::optional<FindingKind> kind;  // absent in hand-written manifests
  std::string node, op_type;
  std::vector<std::string> inject;
  long step = 0;                      // update: the optimizer step
  nlohmann::json optimizer;           // update: the optimizer's settings (optimizer_from_json)
  std::vector<std::string> bfloat16;  // files (as named) stored as float32 for bfloat16 tensors
  // The framework's dispatch variables the finding was made under (bindings/dispatch.h), as
  // written: checked and set by `metaop repro`.
  std::map<std::string, std::string> environment;
  // The ONNX-import binding's level option and the level the finding was made at ("--ort-opt",
  // "basic"; bindings/onnx_import/import_binding.h), as written; empty without one.
  std::string level_option, level;
  // Role ("inputs", "outputs", "output_grads", "got") -> files in order: the name as written
  // and its path resolved inside the folder; nullopt for an omitted tensor.
  struct File {
    std::string name, path;
  };
  std::map<std::string, std::vector<std::optional<File>>> files;
};

// Parses the text of DIR/repro.json; `label` names it in messages. Fails (Error) with one line
// naming the field for anything malformed, and for a file outside the folder.
ReproManifest parse_repro_manifest(const std::string& text, const std::string& dir,
                                   const std::string& label);
// Reads and parses DIR/repro.json.
ReproManifest read_repro_manifest(const std::string& dir);

}  // namespace metaop
