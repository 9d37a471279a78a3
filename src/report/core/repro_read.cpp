#include <filesystem>

#include "report/core/repro.h"
#include "tensor/error.h"
#include "tensor/files.h"
#include "tensor/text.h"

namespace metaop {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* type_of(const json& v) {
  return v.type_name();
}

std::string get_string(const json& j, const std::string& key, const std::string& label,
                       bool required) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) fail("{}: no '{}'", label, key);
    return "";
  }
  if (!it->is_string()) fail("{}: '{}' is {}, expected a string", label, key, type_of(*it));
  return it->get<std::string>();
}

std::vector<std::string> get_strings(const json& j, const std::string& key,
                                     const std::string& label) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) fail("{}: '{}' is {}, expected a list of strings", label, key, type_of(*it));
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_string()) fail("{}: '{}[{}]' is {}, expected a string", label, key, i, type_of(v));
    out.push_back(v.get<std::string>());
  }
  return out;
}

// The files of each role, confined to the folder.
void parse_files(const json& j, const std::string& dir, const std::string& label,
                 ReproManifest& m) {
  auto files = j.find("files");
  if (files == j.end() || files->is_null()) return;
  if (!files->is_object()) fail("{}: 'files' is {}, expected an object", label, type_of(*files));
  for (const auto& [role, list] : files->items()) {
    if (role != "inputs" && role != "outputs" && role != "output_grads" && role != "got") continue;
    if (!list.is_array()) fail("{}: 'files.{}' is {}, expected a list", label, role, type_of(list));
    auto& out = m.files[role];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const json& f = list[i];
      if (f.is_null()) {
        out.emplace_back();
        continue;
      }
      if (!f.is_string())
        fail("{}: 'files.{}[{}]' is {}, expected a file name or null", label, role, i, type_of(f));
      std::string name = f.get<std::string>();
      std::string path =
          confined_path(dir, name, fmt::format("{}: 'files.{}[{}]'", label, role, i));
      out.push_back(ReproManifest::File{name, path});
    }
  }
}

}  // namespace

ReproManifest parse_repro_manifest(const std::string& text, const std::string& dir,
                                   const std::string& label) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not valid JSON", label);
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", label, type_of(j));
  std::string schema = get_string(j, "schema", label, false);
  if (schema != "metaop-repro/1")
    fail("{}: schema '{}', expected metaop-repro/1", label, printable(schema, 80));
  ReproManifest m;
  m.phase = parse_phase(get_string(j, "phase", label, true), label);
  m.binding = get_string(j, "binding", label, true);
  if (std::string kind = get_string(j, "kind", label, false); !kind.empty())
    m.kind = parse_finding_kind(kind, label);
  m.node = get_string(j, "node", label, m.phase == Phase::Update);
  m.op_type = get_string(j, "op_type", label, false);
  m.inject = get_strings(j, "inject", label);
  m.bfloat16 = get_strings(j, "bfloat16", label);
  if (auto env = j.find("environment"); env != j.end() && !env->is_null()) {
    if (!env->is_object())
      fail("{}: 'environment' is {}, expected an object", label, type_of(*env));
    for (const auto& [name, value] : env->items()) {
      if (!value.is_string())
        fail("{}: 'environment.{}' is {}, expected a string", label, printable(name, 80),
             type_of(value));
      m.environment[name] = value.get<std::string>();
    }
  }
  if (auto level = j.find("level"); level != j.end() && !level->is_null()) {
    if (!level->is_object()) fail("{}: 'level' is {}, expected an object", label, type_of(*level));
    m.level_option = get_string(*level, "option", label + ": 'level'", true);
    m.level = get_string(*level, "value", label + ": 'level'", true);
  }
  if (m.phase == Phase::Update) {
    auto step = j.find("step");
    if (step == j.end() || !step->is_number_integer())
      fail("{}: an update needs 'step', an integer", label);
    m.step = step->get<long>();
    if (m.step < 1) fail("{}: step {} (steps count from 1)", label, m.step);
    auto opt = j.find("optimizer");
    if (opt == j.end() || !opt->is_object())
      fail("{}: an update needs 'optimizer', the optimizer's settings", label);
    m.optimizer = *opt;
  }
  parse_files(j, dir, label, m);
  return m;
}

ReproManifest read_repro_manifest(const std::string& dir) {
  std::string path = (fs::path(dir) / "repro.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    fail("{}: no repro.json (a reproducer folder of metaop check, probe or train)", dir);
  InputFile f(path);
  if (f.size() > (std::int64_t{16} << 20))
    fail("{}: {} bytes; a reproducer's manifest is far smaller", path, f.size());
  return parse_repro_manifest(f.read_all(), dir, path);
}

}  // namespace metaop
