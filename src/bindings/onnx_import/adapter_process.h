#pragma once
// An adapter worker: a process that runs ONNX models in one framework, started by MetaOp and
// spoken to over a socket (fd 3 in the worker). The worker is a script in the framework's own
// language -- Node.js for ONNX Runtime's npm packages (ort/ort_worker.js), Python for the
// frameworks MetaOp takes from PyPI (onnx_import/metaop_adapter.py with one adapter module per
// framework) -- and the framework runs in that process only: a crash of it is a Crash here, an
// answer later than the kernel timeout a Hang (the process is killed); either way the next
// request starts a fresh worker. Sessions are created once per model and kept in the worker,
// named by ids that this side hands out.
//
// Frames are little-endian and length-prefixed: u32 length, then the body. Requests:
//   'L' u32 session, u8 level, u32 threads, bytes model      -> create and keep a session
//   'R' u32 session, u32 n, n x tensor, u32 m, m x string    -> run; the m outputs by name
//   'F' u32 session                                          -> forget a session
//   'V'                                                      -> versions (a handshake)
// Replies: 'O' then the payload ('R': u32 n, n x tensor; 'V': string), or 'U' (the framework
// refuses the model: no kernel, a type or attribute it lacks) or 'E' (it failed while running)
// followed by the message. A string is u32 length + UTF-8; a tensor is a string (name), u8 ONNX
// element type, u32 rank, rank x i64 dims, u64 byte count, padding to 8 bytes from the start of
// the body, then the raw little-endian data.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings/binding.h"

namespace metaop {

// How to start a worker and what it needs.
struct AdapterCommand {
  std::string framework;                // "ONNX Runtime", for messages
  std::vector<std::string> argv;        // program (searched on PATH) and arguments
  std::vector<std::string> env;         // "NAME=value" entries set for the worker
  std::vector<std::string> need_files;  // must exist, else installation_problem() names them
  std::string missing;                  // what else is known to be missing, if anything
  std::string install_hint;             // how to get what is missing
};

class AdapterProcess {
 public:
  explicit AdapterProcess(AdapterCommand command);
  ~AdapterProcess();
  AdapterProcess(const AdapterProcess&) = delete;
  AdapterProcess& operator=(const AdapterProcess&) = delete;

  // Creates a session for the serialized model at the framework's optimization level `level`
  // (an index into its levels). Throws Unsupported with the framework's message when it refuses
  // the model.
  std::uint32_t load(const std::string& model, int level, int threads, const std::string& what);
  // Runs a session: the named inputs in, the named outputs back. Throws Error when the
  // framework fails while running.
  Tensors run(std::uint32_t session, const std::vector<std::pair<std::string, Tensor>>& inputs,
              const std::vector<std::string>& outputs, const std::string& what);
  void forget(std::uint32_t session);
  // Counts worker starts: session ids of an earlier generation are gone.
  std::uint64_t generation() const { return generation_; }
  std::string versions();

  // Empty when the worker's program and files are found; else what is missing and how to get it.
  std::string installation_problem() const;

 private:
  void start();
  void stop();
  // Sends one frame (header pieces and raw tensor data) and reads the reply's kind and body.
  std::string exchange(const std::vector<std::pair<const void*, std::size_t>>& parts,
                       const std::string& what, Tensors* outputs);
  [[noreturn]] void died(const std::string& what, const std::string& during);

  AdapterCommand command_;
  int pid_ = -1;
  int sock_ = -1;
  int log_fd_ = -1;  // the worker's stdout and stderr, for messages when it dies
  std::uint32_t next_id_ = 1;
  std::uint64_t generation_ = 0;
};

// Whether `program` names an executable file, directly (with a '/') or on PATH.
bool program_found(const std::string& program);

}  // namespace metaop
