#pragma once
// Framework kernels run out of MetaOp's process, so that a crash (SIGSEGV, SIGFPE, abort) or a
// hang of a framework is a finding about one node and the run goes on.
//
// IsolatedBinding wraps any Binding from outside: its forward and backward run in a persistent
// worker process, forked from MetaOp's process when first needed, that holds the binding (and
// whatever the binding caches) for the rest of the run. Tensors go both ways through a shared
// memory region (a memfd both processes map); the socket carries only small headers. Large
// tensors are kept by the worker for as long as MetaOp holds them (a model's weights, the
// activation a node made and the next one reads), so they cross once; large outputs are written
// by the worker into its arena (a second memfd, isolate_wire.h) and MetaOp reads them there in
// place, each block reused only after MetaOp's tensor over it died. Train's update kernels run
// in the same workers (IsolatedUpdate). A worker
// that dies is a Crash for the node it was running, one that does not answer within the kernel
// timeout is killed and reported as a Hang; either way the next call forks a fresh one.
// Workers are shared per binding name, so every plan of a run uses the same one.
//
// run_isolated runs one function in a one-off child (whole-model runs; planted faults when the
// user asked for in-process kernels).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "bindings/binding.h"
#include "bindings/update_kernel.h"

namespace metaop {

// Process (the default): framework bindings made by make_binding run in workers. None: in
// MetaOp's own process (faster, but a crash of a framework ends the run). Set from --isolation.
enum class Isolation { Process, None };
void set_isolation(Isolation mode);
Isolation isolation();
// Bytes of address space a new mapping may still take under RLIMIT_AS (ulimit -v); the size_t
// maximum without a limit. Workers' shared-memory arenas are sized within it.
std::size_t address_space_left();
// Empty, or why MetaOp cannot run under the address-space limit (the CLI refuses to start: a
// run would hang).
std::string address_space_problem();

class IsolatedBinding final : public Binding {
 public:
  explicit IsolatedBinding(std::unique_ptr<Binding> inner);
  std::string name() const override { return name_; }
  Support supports(const std::string& op_type) const override;
  Tensors forward(const Node& node, std::int64_t opset, const Tensors& inputs) override;
  Tensors backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                   const Tensors& outputs, const Tensors& output_grads) override;
  std::vector<std::string> where(const std::string& op_type) const override {
    return inner_->where(op_type);
  }
  // The node sent to the worker as forward() would send it, but the worker commits `fault`
  // ("segv", "abort" or "hang") where the kernel would run: evaluation of the isolation.
  Tensors forward_with_fault(const std::string& fault, const Node& node, std::int64_t opset,
                             const Tensors& inputs);

 private:
  std::unique_ptr<Binding> inner_;
  std::string name_;
};

// An update kernel (train's optimizer: update_kernel.h) run in the worker of its binding, as
// IsolatedBinding runs node kernels there: a crash or hang of the optimizer is a Crash or Hang
// of the step, and the run goes on. The worker holds the optimizer's state; MetaOp keeps each
// weight's state as the worker last gave it (read in place), so that a fresh worker, after any
// crash of that binding's worker, starts the weight's next step from it.
class IsolatedUpdate final : public UpdateKernel {
 public:
  // `binding`: what a worker forked for this kernel serves (one of the binding's name).
  IsolatedUpdate(std::unique_ptr<Binding> binding, OptimizerConfig c);
  ~IsolatedUpdate() override;
  IsolatedUpdate(const IsolatedUpdate&) = delete;
  IsolatedUpdate& operator=(const IsolatedUpdate&) = delete;
  std::string name() const override { return name_; }
  Tensor step(const std::string& weight, long t, const Tensor& w, const Tensor& g) override;
  Tensors state(const std::string& weight) const override;
  void set_state(const std::string& weight, long t, const Tensors& slots) override;
  // The step sent as step() would send it, but the worker commits `fault` ("segv", "abort" or
  // "hang") where the optimizer would run.
  Tensor step_with_fault(const std::string& fault, const std::string& weight, long t,
                         const Tensor& w, const Tensor& g);

 private:
  struct Saved {
    long t = 0;
    Tensors slots;
  };
  Tensors call(std::uint8_t fault, const std::string& weight, long t, const Tensors* wg,
               const Saved* set_to);
  std::unique_ptr<Binding> binding_;
  std::string name_;
  OptimizerConfig c_;
  std::uint64_t id_;
  std::map<std::string, Saved> saved_;
  // The worker (by its start count) that holds the states of `in_worker_`.
  std::uint64_t worker_ = 0;
  std::set<std::string> in_worker_;
};

// Wraps `b` in an IsolatedBinding when isolation() is Process.
std::unique_ptr<Binding> isolated(std::unique_ptr<Binding> b);
// Stops every worker (the next call forks a fresh one): after a setting the workers copied
// when they were forked (threads) changes.
void stop_workers();
// Workers forked so far for a binding name (tests and benchmarks).
std::uint64_t worker_starts(const std::string& binding);
// Bytes of kept outputs a binding's workers wrote in their arenas, that MetaOp reads in place,
// so far (tests and benchmarks).
std::uint64_t worker_in_place_bytes(const std::string& binding);
// Bytes of tensors copied to a binding's workers so far: those the worker keeps (64 kB and more,
// a quarter of the memory budget in all) cross once while MetaOp holds them (tests).
std::uint64_t worker_sent_bytes(const std::string& binding);

// What a worker or a one-off child does in place of a kernel for a planted fault: SIGSEGV,
// abort() or sleeping for ever.
[[noreturn]] void commit_planted_fault(const std::string& fault);

Tensors run_isolated(const std::string& what, const std::function<Tensors()>& kernel);

// Seconds a kernel run out of process may take before it is killed and reported as a Hang
// (0: no limit). Process-wide; set from --kernel-timeout.
void set_kernel_timeout(double seconds);
double kernel_timeout();

}  // namespace metaop
