#include "report/core/tracker_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "analysis/core/accuracy.h"
#include "bindings/dispatch.h"
#include "bindings/factory.h"
#include "ops/registry.h"
#include "tensor/text.h"

namespace metaop {

namespace {

std::string num(double v) {
  return fmt::format("{:.9g}", v);
}

// "1, -2.5, 3e-35"
std::string numbers(const std::vector<double>& v) {
  std::string out;
  for (double e : v) out += (out.empty() ? "" : ", ") + num(e);
  return out;
}

// One unit in the last place of `x` in `dtype` (subnormal spacing below the smallest normal).
double ulp(double x, DType dtype) {
  int digits = 24, emin = -126;
  switch (dtype) {
    case DType::Float64:
      digits = 53, emin = -1022;
      break;
    case DType::Float16:
      digits = 11, emin = -14;
      break;
    case DType::BFloat16:
      digits = 8, emin = -126;
      break;
    default:
      break;
  }
  int e = x == 0 ? emin : std::max(std::ilogb(x), emin);
  return std::ldexp(1.0, e - (digits - 1));
}

struct Worst {
  std::size_t output = 0;
  std::int64_t index = -1;
  double ref = 0, got = 0, ulps = 0;
  bool integer = false;  // an output of integers (indices, booleans): a value that differs
  std::int64_t over4 = 0, nonfinite = 0, elements = 0;
};

// The element of the outputs with the largest error in ULPs of the output's dtype (a value
// non-finite on one side only, or an integer that differs, counts as infinitely many).
Worst worst_element(const Tensors& ref, const Tensors& got) {
  Worst w;
  for (std::size_t k = 0; k < ref.size() && k < got.size(); ++k) {
    if (!ref[k].defined() || !got[k].defined() || ref[k].shape() != got[k].shape()) continue;
    const bool floating = is_floating(ref[k].dtype());
    auto r = ref[k].to_f64(), g = got[k].to_f64();
    for (std::size_t i = 0; i < r.size(); ++i) {
      ++w.elements;
      double e = 0;
      bool same = r[i] == g[i] || (std::isnan(r[i]) && std::isnan(g[i]));
      if (!same && floating && std::isfinite(r[i]) && std::isfinite(g[i]))
        e = std::abs(g[i] - r[i]) / ulp(std::abs(r[i]), ref[k].dtype());
      else if (!same)
        e = INFINITY, w.nonfinite += floating ? 1 : 0;
      if (e > 4) ++w.over4;
      if (w.index < 0 || e > w.ulps) {
        w.output = k, w.index = static_cast<std::int64_t>(i), w.ref = r[i], w.got = g[i];
        w.ulps = e, w.integer = !floating;
      }
    }
  }
  return w;
}

std::string ulps_text(const Worst& w) {
  if (w.integer) return w.ulps > 0 ? "a different value" : "the same value";
  return std::isinf(w.ulps) ? "non-finite on one side only" : fmt::format("{:.3g} ULPs", w.ulps);
}

// The exact value at the worst element: the reference run on the inputs widened to float64
// (the definition in float64), when the op takes them; nullopt otherwise.
std::optional<double> float64_value(const TrackerCase& c, const Worst& w) {
  const MetaOp* op = OpRegistry::instance().find(c.node->op_type);
  if (!op || w.index < 0) return std::nullopt;
  Tensors wide = c.inputs;
  for (auto& t : wide)
    if (t.defined() && is_floating(t.dtype())) t = t.to(DType::Float64);
  try {
    Tensors out = op->reference(KernelContext{*c.node, c.opset}, wide);
    if (w.output >= out.size() || !out[w.output].defined() || out[w.output].numel() <= w.index ||
        out[w.output].dtype() != DType::Float64)
      return std::nullopt;
    return out[w.output].f64_at(w.index);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string attribute_text(const Attribute& a) {
  using K = Attribute::Kind;
  switch (a.kind) {
    case K::Int:
      return std::to_string(a.i);
    case K::Float:
      return num(a.f);
    case K::String:
      return fmt::format("\"{}\"", printable(a.s, 200));
    case K::Ints:
      return fmt::format("[{}]", fmt::join(a.ints, ", "));
    case K::Floats:
      return fmt::format("[{}]", numbers(a.floats));
    case K::Strings:
      return fmt::format("[{} strings]", a.strings.size());
    case K::Tensor:
      return fmt::format("tensor {}{}", dtype_name(a.t.dtype()), shape_str(a.t.shape()));
    default:
      return a.unsupported_type;
  }
}

// "x = [-9]" or "x: float32[3, 4, 5] in [-20, 20]".
std::string value_text(const std::string& name, const Tensor& t, std::int64_t full_up_to) {
  if (!t.defined()) return fmt::format("{}: omitted", printable(name, 200));
  std::string type = fmt::format("{}{}", dtype_name(t.dtype()), shape_str(t.shape()));
  auto v = t.to_f64();
  if (t.numel() <= full_up_to)
    return fmt::format("{} = [{}]  ({})", printable(name, 200), numbers(v), type);
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{}: {} in [{}, {}]", printable(name, 200), type, num(*lo), num(*hi));
}

std::string graph_text(const TrackerCase& c) {
  const Node& n = *c.node;
  std::string out = fmt::format("opset {}\n", c.opset);
  for (std::size_t i = 0; i < n.inputs.size() && i < c.inputs.size(); ++i)
    if (!n.inputs[i].empty() && c.inputs[i].defined())
      out += fmt::format("{} {}: {}{}\n", c.fed[i] ? "input" : "initializer",
                         printable(n.inputs[i], 200), dtype_name(c.inputs[i].dtype()),
                         shape_str(c.inputs[i].shape()));
  std::vector<std::string> attrs;
  attrs.reserve(n.attrs.size());
  for (const auto& [k, a] : n.attrs) attrs.push_back(fmt::format("{}={}", k, attribute_text(a)));
  std::vector<std::string> ins, outs;
  ins.reserve(n.inputs.size());
  outs.reserve(n.outputs.size());
  for (const auto& i : n.inputs) ins.push_back(i.empty() ? "<omitted>" : printable(i, 200));
  for (const auto& o : n.outputs) outs.push_back(printable(o, 200));
  out += fmt::format("{} = {}({}){}\n", fmt::join(outs, ", "), n.op_type, fmt::join(ins, ", "),
                     attrs.empty() ? "" : fmt::format(" {{{}}}", fmt::join(attrs, ", ")));
  for (std::size_t k = 0; k < n.outputs.size() && k < c.reference.size(); ++k)
    if (c.reference[k].defined())
      out += fmt::format("output {}: {}{}\n", printable(n.outputs[k], 200),
                         dtype_name(c.reference[k].dtype()), shape_str(c.reference[k].shape()));
  return out;
}

}  // namespace

namespace {

// The first line of /proc/cpuinfo for each of `keys`, as key -> value.
std::map<std::string, std::string> cpuinfo(const std::set<std::string>& keys) {
  std::ifstream in("/proc/cpuinfo");
  std::map<std::string, std::string> found;
  std::string line;
  while (found.size() < keys.size() && std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (keys.count(key)) found.emplace(key, colon + 2 <= line.size() ? line.substr(colon + 2) : "");
  }
  return found;
}

}  // namespace

std::set<std::string> cpu_flags() {
  std::istringstream fs(cpuinfo({"flags"})["flags"]);
  std::set<std::string> have;
  for (std::string f; fs >> f;) have.insert(f);
  return have;
}

std::string cpu_description() {
  std::string model = cpuinfo({"model name"})["model name"];
  if (model.empty()) return "unknown CPU";
  std::set<std::string> have = cpu_flags();
  std::vector<std::string> isa;
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                        "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"})
    if (have.count(f)) isa.push_back(f);
  return fmt::format(
      "{}; instruction sets: {}", printable(model, 200),
      isa.empty() ? "none of SSE4.2 and later" : fmt::format("{}", fmt::join(isa, " ")));
}

namespace {

// The output element the report is about, in words ("y[1, 0, 3]"); "" without one.
std::string where_text(const TrackerCase& c, const Worst& w) {
  const Node& n = *c.node;
  if (w.index < 0 || w.output >= n.outputs.size()) return "";
  return fmt::format("{}{}", printable(n.outputs[w.output], 200),
                     index_str(c.reference[w.output].shape(), w.index));
}

// The title: the framework and version, the op, the value it gives against the exact one, and
// the inputs (their values when there are a few, else those at the element).
std::string title_text(const FindingCore& f, const TrackerCase& c, const Worst& w,
                       const std::string& who) {
  const Node& n = *c.node;
  std::int64_t fed_elements = 0;
  std::vector<std::string> short_inputs, shapes;
  for (std::size_t i = 0; i < c.inputs.size() && i < n.inputs.size(); ++i)
    if (c.fed[i] && c.inputs[i].defined()) {
      fed_elements += c.inputs[i].numel();
      shapes.push_back(shape_str(c.inputs[i].shape()));
      std::string values = numbers(c.inputs[i].to_f64());
      short_inputs.push_back(
          fmt::format("{} = {}", printable(n.inputs[i], 60),
                      c.inputs[i].numel() == 1 ? values : fmt::format("[{}]", values)));
    }
  std::string on = fed_elements <= 4 ? fmt::format("for {}", fmt::join(short_inputs, ", "))
                   : w.index >= 0
                       ? fmt::format("at {} ({})", where_text(c, w),
                                     describe_inputs(n, c.inputs, c.reference[w.output], w.index))
                       : fmt::format("on inputs of shapes {}", fmt::join(shapes, ", "));
  // The version alone ("1.31.1"); the build's words go under Versions.
  std::string version = binding_version(f.binding);
  version = version.substr(0, version.find(" ("));
  if (w.index < 0)
    return fmt::format("{} {}: {} {}: {}", who, version, n.op_type, to_string(f.kind),
                       printable(f.detail, 300));
  return fmt::format("{} {}: {} gives {} {}, exact {} ({})", who, version, n.op_type, num(w.got),
                     on, num(w.ref), ulps_text(w));
}

std::string versions_section(const FindingCore& f, const TrackerCase& c, const std::string& who) {
  std::string version = binding_version(f.binding);
  std::string kernels;
  for (const auto& [name, value] : dispatch_environment(f.binding))
    kernels += fmt::format("- Kernels chosen by `{}={}`\n", name, value);
  return fmt::format(
      "## Versions\n\n- {} {} (MetaOp binding `{}`)\n- CPU: {}\n{}- ONNX opset {}\n\n", who,
      version.empty() ? "(version unknown)" : version, f.binding, cpu_description(), kernels,
      c.opset);
}

std::string observed_section(const FindingCore& f, const TrackerCase& c, const Worst& w,
                             const std::string& who) {
  const Node& n = *c.node;
  std::string md = "## Observed and exact\n\n";
  if (w.index < 0) return fmt::format("{}{}\n\n", md, printable(f.detail, 4000));
  std::optional<double> exact = float64_value(c, w);
  const Float32Definition* def = nullptr;
  if (const MetaOp* op = OpRegistry::instance().find(n.op_type)) def = &op->float32;
  md += fmt::format(
      "| element | {} | exact, rounded to {} | exact in float64 | error |\n|---|---|---|---|---|\n"
      "| `{}` | {} | {} | {} | {} |\n\n",
      who, dtype_name(c.reference[w.output].dtype()), where_text(c, w), num(w.got), num(w.ref),
      exact ? fmt::format("{:.17g}", *exact) : "-", ulps_text(w));
  md += fmt::format(
      "{} of {} output elements are off by more than 4 ULPs or differ, {} non-finite on one "
      "side only. The exact value is the ONNX definition of {} evaluated in float64 on these "
      "inputs (the reference of MetaOp){}.\n\n",
      w.over4, w.elements, w.nonfinite, n.op_type,
      def && !def->formula.empty()
          ? fmt::format("; the class above compares the kernel with `{}` evaluated in float32",
                        printable(def->formula, 300))
          : "");
  return md;
}

}  // namespace

std::string tracker_report(const FindingCore& f, const TrackerCase& c) {
  const Node& n = *c.node;
  Worst w = worst_element(c.reference, c.got);
  std::string who = c.framework.empty() ? f.binding : c.framework;
  std::string md = fmt::format("# {}\n\n", title_text(f, c, w, who));
  if (f.cls != FindingClass::None)
    md += fmt::format("**Class: {}.** {}\n\n", to_string(f.cls), printable(f.class_basis, 4000));
  md += versions_section(f, c, who);
  md += fmt::format("## The graph (model.onnx in this folder)\n\n```\n{}```\n\n", graph_text(c));
  md += "## Input\n\n";
  for (std::size_t i = 0; i < c.inputs.size() && i < n.inputs.size(); ++i)
    if (c.fed[i])
      md += fmt::format("- {}{}\n", value_text(n.inputs[i], c.inputs[i], 64),
                        i < c.input_files.size() && !c.input_files[i].empty()
                            ? fmt::format(", file `{}`", c.input_files[i])
                            : "");
  md += '\n';
  md += observed_section(f, c, w, who);
  if (!f.agreement.empty())
    md += fmt::format("Other frameworks on the same inputs, {}.\n\n", printable(f.agreement, 4000));
  md += "## Reproduce\n\n";
  if (!c.script_commands.empty())
    md += fmt::format(
        "Without MetaOp (needs {}), in this folder (exit 1 while it reproduces):\n\n```\n{}```\n\n",
        c.script_needs, c.script_commands);
  md += "With MetaOp: `metaop repro .` (exit 1 while it reproduces).\n";
  return md;
}

}  // namespace metaop
