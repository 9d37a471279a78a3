#include "bindings/binding.h"

#include <fmt/format.h>

#include "bindings/update_kernel.h"

namespace metaop {

Tensors Binding::backward(const Node& node, std::int64_t, const Tensors&, const Tensors&,
                          const Tensors&) {
  throw Unsupported(node.label() + ": binding '" + name() + "' has no backward for this op");
}

std::vector<std::string> Binding::where(const std::string&) const {
  return {};
}

std::unique_ptr<UpdateKernel> Binding::update_kernel(const OptimizerConfig&) const {
  return nullptr;
}

std::string location(const std::source_location& where) {
  return fmt::format("{}:{}", where.file_name(), where.line());
}

}  // namespace metaop
