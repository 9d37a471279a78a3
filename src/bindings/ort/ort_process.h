#pragma once
// The ONNX Runtime worker process (ort_worker.js, run by Node.js with the npm packages
// onnxruntime-node or onnxruntime-web) and MetaOp's side of its protocol. ONNX Runtime runs in
// that process only: a crash of it is a Crash here, an answer later than the kernel timeout a
// Hang (the process is killed); either way the next request starts a fresh worker. Sessions
// are created once per model and kept in the worker, named by ids that this side hands out.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings/binding.h"

namespace metaop {

// "cpu" (onnxruntime-node, MLAS kernels) or "wasm" (onnxruntime-web, WebAssembly kernels).
class OrtProcess {
 public:
  explicit OrtProcess(std::string flavor);
  ~OrtProcess();
  OrtProcess(const OrtProcess&) = delete;
  OrtProcess& operator=(const OrtProcess&) = delete;

  // Creates a session for the serialized model at optimization level 0..3 (disabled, basic,
  // extended, all). Throws Unsupported with ONNX Runtime's message when it refuses the model.
  std::uint32_t load(const std::string& model, int level, int threads, const std::string& what);
  // Runs a session: the named inputs in, the named outputs back (undefined where the name is
  // empty). Throws Error when ONNX Runtime fails while running.
  Tensors run(std::uint32_t session, const std::vector<std::pair<std::string, Tensor>>& inputs,
              const std::vector<std::string>& outputs, const std::string& what);
  void forget(std::uint32_t session);
  // Counts worker starts: session ids of an earlier generation are gone.
  std::uint64_t generation() const { return generation_; }
  std::string versions();

 private:
  void start();
  void stop();
  // Sends one frame (header pieces and raw tensor data) and reads the reply's kind and body.
  std::string exchange(const std::vector<std::pair<const void*, std::size_t>>& parts,
                       const std::string& what, Tensors* outputs);
  [[noreturn]] void died(const std::string& what, const std::string& during);

  std::string flavor_;
  int pid_ = -1;
  int sock_ = -1;
  int log_fd_ = -1;  // the worker's stdout and stderr, for messages when it dies
  std::uint32_t next_id_ = 1;
  std::uint64_t generation_ = 0;
};

// Empty when Node.js and the package of `flavor` are found; else what is missing and how to
// install it.
std::string ort_installation_problem(const std::string& flavor);

}  // namespace metaop
