#include "bindings/dispatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "tensor/error.h"

namespace metaop {

const std::vector<DispatchVariable>& dispatch_variables() {
  static const std::vector<DispatchVariable> table{
      {"--onednn-isa",
       "ONEDNN_MAX_CPU_ISA",
       {"onednn", "onednn-2.6"},
       {{"all", ""},
        {"avx512_core_amx", "AVX512_CORE_AMX"},
        {"avx512_core_bf16", "AVX512_CORE_BF16"},
        {"avx512_core_vnni", "AVX512_CORE_VNNI"},
        {"avx512_core", "AVX512_CORE"},
        {"avx2_vnni", "AVX2_VNNI"},
        {"avx2", "AVX2"},
        {"avx", "AVX"},
        {"sse41", "SSE41"}},
       "Highest instruction set oneDNN's kernels may use (onednn, onednn-2.6; "
       "ONEDNN_MAX_CPU_ISA): what users of older CPUs run"},
      {"--torch-isa",
       "ATEN_CPU_CAPABILITY",
       {"torch", "torch-1.13"},
       {{"all", ""}, {"avx512", "avx512"}, {"avx2", "avx2"}, {"scalar", "default"}},
       "Vector kernels ATen dispatches to (torch, torch-1.13; ATEN_CPU_CAPABILITY): avx512, "
       "avx2, or scalar (ATen's non-vectorized ones)"},
  };
  return table;
}

void set_dispatch(const DispatchVariable& v, const std::string& value) {
  auto it = std::find_if(v.values.begin(), v.values.end(),
                         [&](const auto& p) { return p.first == value; });
  if (it == v.values.end()) fail("{} {}: not one of its values", v.option, value);
  if (!it->second.empty()) ::setenv(v.env.c_str(), it->second.c_str(), 1);
}

std::map<std::string, std::string> dispatch_environment(const std::string& binding) {
  std::map<std::string, std::string> out;
  for (const auto& v : dispatch_variables()) {
    if (std::find(v.bindings.begin(), v.bindings.end(), binding) == v.bindings.end()) continue;
    if (const char* e = std::getenv(v.env.c_str()); e && *e) out[v.env] = e;
  }
  return out;
}

void apply_dispatch_environment(const std::map<std::string, std::string>& env,
                                const std::string& where) {
  for (const auto& [name, value] : env) {
    const auto& table = dispatch_variables();
    auto v = std::find_if(table.begin(), table.end(),
                          [&](const DispatchVariable& d) { return d.env == name; });
    if (v == table.end()) fail("{}: environment variable '{}' is not one MetaOp sets", where, name);
    bool known = std::any_of(v->values.begin(), v->values.end(),
                             [&](const auto& p) { return !p.second.empty() && p.second == value; });
    if (!known) fail("{}: {}={} is not one of {}'s values", where, name, value, v->option);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
}

}  // namespace metaop
