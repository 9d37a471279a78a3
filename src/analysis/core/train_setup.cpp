#include "analysis/core/train_setup.h"

#include <fmt/format.h>

#include "bindings/factory.h"

namespace metaop {

void configure_update(TrainConfig& c, const Graph& g, const std::string& bind,
                      const std::vector<std::string>& specs) {
  c.update_binding = has_update_kernel(bind) ? bind : "reference";
  c.update_bind.clear();
  auto trainable = trainable_initializers(g);
  for (const auto& spec : specs) {
    auto eq = spec.find('=');
    std::string b = eq == std::string::npos ? spec : spec.substr(eq + 1);
    if (!has_update_kernel(b))
      fail("--bind-update '{}': '{}' has no optimizer (update kernels: {})", spec, b,
           fmt::join(update_binding_names(), ", "));
    if (eq == std::string::npos) {
      c.update_binding = b;
      continue;
    }
    auto ws = weights_named(g, trainable, spec.substr(0, eq));
    if (ws.empty())
      fail("--bind-update '{}': '{}' is no trainable weight, node or op type of {}", spec,
           spec.substr(0, eq), g.path);
    for (const auto& w : ws) c.update_bind[w] = b;
  }
}

InjectedFaults::InjectedFaults(const Graph& g, const std::vector<std::string>& specs,
                               const std::string& model)
    : specs_(specs) {
  auto trainable = trainable_initializers(g);
  for (const auto& s : specs) {
    FaultSpec f = parse_fault(s);
    parsed_.push_back(f);
    if (f.phase != Phase::Update) {
      kernel_.push_back(f);
      continue;
    }
    auto weights = weights_named(g, trainable, f.target);
    if (weights.empty())
      fail("--inject '{}': '{}' is no trainable weight, node or op type of {}", s, f.target, model);
    // One fault per weight and update kernel.
    for (const auto& b : update_binding_names()) {
      if (b == "reference" || (!f.binding.empty() && f.binding != b)) continue;
      for (const auto& w : weights)
        if (auto [it, fresh] = update_[b].emplace(w, f); !fresh)
          fail("--inject {}:{}: weight '{}' of {} already has the update fault {}", f.target,
               f.fault, w, b, it->second.fault);
    }
  }
}

Plan InjectedFaults::plan(const TrainSetup& setup, bool track) {
  Plan p = setup.make_plan(setup.bind);
  for (const auto& b : binding_names()) {
    if (b == "reference") continue;
    std::vector<FaultSpec> mine;
    for (const auto& f : kernel_)
      if (f.binding.empty() || f.binding == b) mine.push_back(f);
    if (mine.empty()) continue;
    auto fb = std::make_unique<FaultyBinding>(make_binding(b), mine);
    if (track) bindings_.push_back(fb.get());
    p.add_binding(std::move(fb));
  }
  return p;
}

TrainConfig InjectedFaults::config(const TrainConfig& c, bool track) {
  TrainConfig out = c;
  if (update_.empty()) return out;
  auto faults = update_;
  auto tracked = track ? updates_ : nullptr;
  out.make_update = [faults, tracked](const std::string& b,
                                      const OptimizerConfig& o) -> std::shared_ptr<UpdateKernel> {
    auto k = make_update_kernel(b, o);
    auto f = faults.find(b);
    if (f == faults.end()) return k;
    auto fk = std::make_shared<FaultyUpdate>(std::move(k), f->second);
    if (tracked) tracked->push_back(fk);
    return fk;
  };
  return out;
}

std::vector<std::string> InjectedFaults::log() const {
  std::vector<std::string> out;
  for (auto* fb : bindings_)
    for (const auto& [node, note] : fb->log())
      out.push_back(fmt::format("injected {}/{}: {}", fb->name(), node, note));
  std::map<std::string, std::string> updates;  // weight -> "binding: what was done"
  for (const auto& f : *updates_)
    for (const auto& [w, note] : f->log()) updates[w] = f->name() + ": " + note;
  for (const auto& [w, note] : updates)
    out.push_back(fmt::format("injected update of {} under {}", w, note));
  return out;
}

std::vector<std::string> InjectedFaults::applied(Phase phase, const std::string& binding) const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < parsed_.size(); ++i)
    if (parsed_[i].phase == phase && (parsed_[i].binding.empty() || parsed_[i].binding == binding))
      out.push_back(specs_[i]);
  return out;
}

}  // namespace metaop
