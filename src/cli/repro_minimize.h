#pragma once
// Minimizing a reproducer folder's forward finding (metaop repro --minimize, check and probe
// --minimize):
// its inputs shrunk by delta debugging (analysis/core/minimize.h) for as long as the binding
// stays outside the error model with the same kind and class.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "analysis/core/finding.h"

namespace metaop::cli {

struct MinimizedRepro {
  bool reproduced = false;  // the finding showed on the folder's inputs
  std::string folder;       // the minimized reproducer's folder ("" when not reproduced)
  std::string summary;      // what was done, in words, for the console (one or more lines)
};

// Reads DIR/repro.json (a forward finding of check or probe; anything else fails with one line),
// judges `bind` (the finding's binding when empty) and, when the finding shows, writes the
// smallest inputs found as a reproducer folder under `out_root`. At most `budget` runs of the
// binding.
MinimizedRepro minimize_reproducer(const std::string& dir, const std::string& out_root, int budget,
                                   const std::string& bind = "");

// --minimize of check and probe: `repro` minimized into REPRO/minimized; returns that folder,
// "" when the finding did not show again or could not be minimized (said on stderr, with
// `what` naming the command: the run goes on).
std::string minimize_in_place(const std::string& repro, int budget, const std::string& what);

// check's and probe's --minimize and --minimize-budget.
struct MinimizeArgs {
  bool on = false;
  int budget = 400;
};
void add_minimize_options(CLI::App* cmd, MinimizeArgs& m);

// With --minimize: each numerical forward finding that has a reproducer gets its minimized copy
// (FindingCore::minimized); `what` names the command in the progress lines.
template <typename Findings>
void minimize_findings(Findings& findings, const MinimizeArgs& m, const std::string& what) {
  if (!m.on) return;
  std::vector<FindingCore*> todo;
  for (auto& f : findings)
    if (!f.repro.empty() && f.phase == Phase::Forward && f.numerical()) todo.push_back(&f);
  for (std::size_t k = 0; k < todo.size(); ++k) {
    fmt::print(stderr, "{}: minimizing {} of {}: {}\n", what, k + 1, todo.size(), todo[k]->repro);
    todo[k]->minimized = minimize_in_place(todo[k]->repro, m.budget, what);
  }
}

}  // namespace metaop::cli
