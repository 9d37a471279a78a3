#pragma once
// Which kernels a framework dispatches to on this CPU, chosen by the framework's own environment
// variable: oneDNN's ONEDNN_MAX_CPU_ISA (--onednn-isa) and ATen's ATEN_CPU_CAPABILITY
// (--torch-isa). Users on older CPUs run the kernels these select; a defect can live in one of
// them only (oneDNN's SSE4.1 LogSoftmax). Workers inherit the variables; reproducers record
// the ones set for their binding (repro.json `environment`) and `metaop repro` sets them again.
#include <map>
#include <string>
#include <vector>

namespace metaop {

struct DispatchVariable {
  std::string option;                 // the command-line option ("--onednn-isa")
  std::string env;                    // the framework's variable ("ONEDNN_MAX_CPU_ISA")
  std::vector<std::string> bindings;  // the bindings whose framework reads it
  // The option's values and what each sets the variable to; "all" leaves it as it is.
  std::vector<std::pair<std::string, std::string>> values;
  std::string help;
};

const std::vector<DispatchVariable>& dispatch_variables();

// Sets the variable for `value` (one of the option's; "all" changes nothing).
void set_dispatch(const DispatchVariable& v, const std::string& value);

// The dispatch variables set in this process that `binding`'s framework reads: VAR -> value.
std::map<std::string, std::string> dispatch_environment(const std::string& binding);

// Sets variables read back from a reproducer; each must be one of the table's with one of its
// values (Error naming `where` otherwise: a repro.json is untrusted).
void apply_dispatch_environment(const std::map<std::string, std::string>& env,
                                const std::string& where);

}  // namespace metaop
