#pragma once
// One framework in several versions under one run (`--bind torch-1.13,torch`,
// `onednn-2.6,onednn`, `ort-1.30,ort`): for each finding, whether each version has it -- present
// in all, fixed in a later version, new in a later version -- so that a defect found in an old
// release is known to be fixed or still there in the current one.
#include <string>
#include <vector>

namespace metaop {

// The bindings of one framework that a run names, oldest version first.
struct VersionGroup {
  std::string framework;
  std::vector<std::string> bindings;
};
// Groups of two or more bindings of one framework among `bindings` (a framework's versions are
// ordered by their numbers: 1.13 < 2.15, 1.30.0 < 1.31.1).
std::vector<VersionGroup> version_groups(const std::vector<std::string>& bindings);
// <0, 0, >0 as version a is older, the same, newer than b (numbers compared part by part;
// anything after the leading numbers is ignored).
int compare_versions(const std::string& a, const std::string& b);

// How one binding of a group stands towards a finding.
enum class VersionState {
  Present,  // it has the finding
  Absent,   // it ran the node and was within its error model
  NotRun,   // it did not run the node (unsupported there, fell back): nothing to say
};
const char* to_string(VersionState s);

// The states of a finding in each binding of its group (the group's order), in one phrase:
// "present in torch-1.13 and torch", "fixed in torch (2.15)", "new in torch (2.15)".
std::string across_versions_phrase(const VersionGroup& group,
                                   const std::vector<VersionState>& states);
// The word for JSON: "present", "fixed", "new", or "mixed" (a version in between differs, or
// some did not run it).
std::string across_versions_word(const std::vector<VersionState>& states);

}  // namespace metaop
