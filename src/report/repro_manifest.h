#pragma once
// Reading a reproducer's repro.json (written by check, probe and train --check): every field
// checked for its type, every file it names confined to the reproducer's folder. A repro.json
// comes with bug reports, so it is untrusted like a model.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace metaop {

struct ReproManifest {
  std::string phase;    // forward, backward or update
  std::string binding;  // the binding whose finding it is
  std::string kind, node, op_type;
  std::vector<std::string> inject;
  long step = 0;                      // update: the optimizer step
  nlohmann::json optimizer;           // update: the optimizer's settings (optimizer_from_json)
  std::vector<std::string> bfloat16;  // files (as named) stored as float32 for bfloat16 tensors
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
