#pragma once
// Minimizing a reproducer folder's forward finding (metaop repro --minimize, probe --minimize):
// its inputs shrunk by delta debugging (analysis/core/minimize.h) for as long as the binding
// stays outside the error model with the same kind and class.
#include <string>

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

}  // namespace metaop::cli
