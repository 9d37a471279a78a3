#include "cli/process_options.h"

#include <cctype>
#include <cmath>
#include <string>

#include "bindings/isolate.h"
#include "tensor/error.h"
#include "tensor/heap.h"
#include "tensor/text.h"

namespace metaop::cli {

void add_process_options(CLI::App* cmd, ProcessOptions& o) {
  cmd->add_option("--max-memory", o.max_memory,
                  "Memory budget: a tensor that would take memory in use past it is refused "
                  "before it is allocated (exit 2 naming the node and size); e.g. 8G, 512MiB, "
                  "50% (of physical memory; default 50%)");
  cmd->add_option("--isolation", o.isolation,
                  "Where framework kernels run: process (worker processes: a crash or hang is a "
                  "finding and the run goes on) or none (in MetaOp's process: faster, a crash "
                  "ends the run)")
      ->capture_default_str();
  cmd->add_option("--kernel-timeout", o.kernel_timeout,
                  "Seconds a kernel run out of process may take before it is killed and reported "
                  "as a hang; 0: no limit")
      ->capture_default_str();
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        auto first = s.find_first_not_of(" \t");
        return first != std::string::npos && s[first] == '-' ? "must be 0 or more, not " + s
                                                             : std::string();
      },
      "NON-NEGATIVE");
}

std::int64_t parse_bytes(const std::string& option, const std::string& value) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(value, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string unit = value.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (pos == 0 || !std::isfinite(v) || v <= 0) {
    scale = 0;
  } else if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "%") {
    scale = static_cast<double>(physical_memory()) / 100;
    if (v > 100) scale = 0;
  } else {
    const std::string prefixes = "KMGT";
    auto p = unit.empty() ? std::string::npos : prefixes.find(unit[0]);
    std::string rest = p == std::string::npos ? "" : unit.substr(1);
    if (p != std::string::npos && (rest.empty() || rest == "B"))
      scale = std::pow(1000.0, static_cast<double>(p + 1));
    else if (p != std::string::npos && rest == "IB")
      scale = std::pow(1024.0, static_cast<double>(p + 1));
  }
  double bytes = v * scale;
  if (scale == 0 || !(bytes >= 1) || bytes > 9e18)
    fail("{} '{}': expected a size such as 8G, 512MiB, 1e9 or 50% (of physical memory)", option,
         printable(value, 64));
  return static_cast<std::int64_t>(bytes);
}

void apply_process_options(const ProcessOptions& o) {
  if (!o.max_memory.empty()) set_memory_budget(parse_bytes("--max-memory", o.max_memory));
  if (std::string why = address_space_problem(); !why.empty()) fail("{}", why);
  if (o.isolation == "process")
    set_isolation(Isolation::Process);
  else if (o.isolation == "none")
    set_isolation(Isolation::None);
  else
    fail("--isolation '{}': expected process or none", printable(o.isolation, 64));
  set_kernel_timeout(o.kernel_timeout);
}

}  // namespace metaop::cli
