#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "graph/onnx_current.h"
#include "graph/onnx_io.h"
#include "tensor/files.h"
#include "tensor/tensor_proto.h"
#include "tensor/text.h"

namespace metaop {

namespace {

Graph convert_subgraph(const onnx::GraphProto& gp, std::int64_t opset, const std::string& base_dir,
                       const std::string& label);

// `opset`: the model's, for a GRAPH attribute's nodes.
Attribute convert_attr(const onnx::AttributeProto& a, const std::string& base_dir,
                       const std::string& what, std::int64_t opset = 0) {
  using A = onnx::AttributeProto;
  Attribute r;
  switch (a.type()) {
    case A::INT:
      r.kind = Attribute::Kind::Int;
      r.i = a.i();
      break;
    case A::FLOAT:
      r.kind = Attribute::Kind::Float;
      r.f = a.f();
      break;
    case A::STRING:
      r.kind = Attribute::Kind::String;
      r.s = a.s();
      break;
    case A::TENSOR:
      if (a.t().data_type() == onnx::TensorProto::STRING) {
        // A string tensor (a Constant's value): engine/control_flow evaluates its consumers.
        r.kind = Attribute::Kind::Unsupported;
        r.unsupported_type = "TENSOR of STRING";
        r.string_tensor =
            std::make_shared<const StringTensor>(string_tensor_from_proto(a.t(), what));
        break;
      }
      r.kind = Attribute::Kind::Tensor;
      r.t = tensor_from_proto(a.t(), base_dir, what);
      break;
    case A::INTS:
      r.kind = Attribute::Kind::Ints;
      r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case A::FLOATS:
      r.kind = Attribute::Kind::Floats;
      r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case A::STRINGS:
      r.kind = Attribute::Kind::Strings;
      r.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case A::GRAPH:
      r.kind = Attribute::Kind::Unsupported;
      r.unsupported_type = A::AttributeType_Name(a.type());
      r.graph = std::make_shared<const Graph>(convert_subgraph(a.g(), opset, base_dir, what));
      break;
    default:
      r.kind = Attribute::Kind::Unsupported;
      r.unsupported_type = A::AttributeType_Name(a.type());
  }
  return r;
}

ValueInfo convert_value_info(const onnx::ValueInfoProto& v) {
  ValueInfo r;
  r.name = v.name();
  // A subgraph's inputs and outputs may leave their type out (then it is the outer node's).
  r.is_tensor =
      v.type().has_tensor_type() || v.type().value_case() == onnx::TypeProto::VALUE_NOT_SET;
  if (!r.is_tensor) r.type_case = static_cast<int>(v.type().value_case());
  // A sequence of tensors, an optional tensor or an optional sequence of tensors: the tensors'
  // type (maps, sparse tensors and nested sequences stay unsupported).
  const onnx::TypeProto* type = &v.type();
  if (type->has_optional_type()) {
    r.optional = true;
    type = &type->optional_type().elem_type();
  }
  if (type->has_sequence_type()) {
    r.sequence = true;
    type = &type->sequence_type().elem_type();
  }
  if (!type->has_tensor_type() && type->value_case() != onnx::TypeProto::VALUE_NOT_SET)
    r.sequence = r.optional = false;
  if (type->has_tensor_type()) {
    const auto& tt = type->tensor_type();
    r.onnx_elem_type = tt.elem_type();
    r.dtype = dtype_from_onnx(tt.elem_type());
    if (tt.has_shape()) {
      std::vector<std::int64_t> dims;
      for (const auto& d : tt.shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      r.dims = dims;
    }
  }
  return r;
}

void check_known_ops(const onnx::ModelProto& m, std::int64_t opset, const std::string& label) {
  std::map<std::string, int> unknown;
  for (const auto& n : m.graph().node()) {
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (is_other_onnx_domain(n.domain()) &&
        onnx::OpSchemaRegistry::Schema(n.op_type(), std::numeric_limits<int>::max(), n.domain()))
      continue;
    if (!default_domain ||
        !onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), ""))
      ++unknown[n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type()];
  }
  if (unknown.empty()) return;
  std::string list;
  for (const auto& [op, count] : unknown)
    list += fmt::format("{}{} x{}", list.empty() ? "" : ", ", op, count);
  throw Unsupported(fmt::format("{}: unknown operators for opset {}: {}", label, opset, list));
}

std::string proto_label(const onnx::NodeProto& n) {
  return fmt::format("node '{}' ({})", printable(n.name()), printable(n.op_type(), 64));
}

void at_least(const std::string& label, const onnx::NodeProto& n, const onnx::AttributeProto& a,
              std::int64_t lo) {
  std::vector<std::int64_t> v;
  if (a.type() == onnx::AttributeProto::INT) v = {a.i()};
  if (a.type() == onnx::AttributeProto::INTS) v.assign(a.ints().begin(), a.ints().end());
  for (auto x : v)
    if (x < lo)
      fail("{}: {} attribute {} = [{}]: every value must be at least {}", label, proto_label(n),
           printable(a.name()), fmt::join(v, ", "), lo);
}

void check_permutation(const std::string& label, const onnx::NodeProto& n,
                       const onnx::AttributeProto& a) {
  std::vector<std::int64_t> perm(a.ints().begin(), a.ints().end());
  std::vector<bool> seen(perm.size(), false);
  for (auto p : perm) {
    if (p < 0 || p >= static_cast<std::int64_t>(perm.size()) || seen[p])
      fail("{}: {} attribute perm = [{}] is not a permutation of 0..{}", label, proto_label(n),
           fmt::join(perm, ", "), perm.size() - 1);
    seen[p] = true;
  }
}

// One attribute of a node of the default domain.
void check_attribute(const std::string& label, const onnx::NodeProto& n,
                     const onnx::AttributeProto& a) {
  static const std::set<std::string> windowed = {
      "Conv",        "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
      "AveragePool", "LpPool",        "MaxUnpool",   "MaxRoiPool",  "Col2Im"};
  const std::string& op = n.op_type();
  const std::string& name = a.name();
  if (windowed.count(op) &&
      (name == "strides" || name == "dilations" || name == "kernel_shape" || name == "group"))
    at_least(label, n, a, 1);
  if ((op == "DepthToSpace" || op == "SpaceToDepth") && name == "blocksize")
    at_least(label, n, a, 1);
  if (op == "LRN" && name == "size") at_least(label, n, a, 1);
  if (op == "Split" && name == "split") at_least(label, n, a, 0);
  if (op == "Transpose" && name == "perm") check_permutation(label, n, a);
}

// ONNX 1.12's Conv shape inference reads past the weight's dims when its rank differs from the
// input's (a crash; intermediate values are caught by running it in a worker). `rank`: the
// ranks known before inference.
void check_conv_ranks(const std::string& label, const onnx::NodeProto& n,
                      const std::map<std::string, int>& rank) {
  if (n.op_type() != "Conv" && n.op_type() != "ConvTranspose" && n.op_type() != "ConvInteger" &&
      n.op_type() != "QLinearConv")
    return;
  int w = n.op_type() == "QLinearConv" ? 3 : 1;
  if (n.input_size() > w && rank.count(n.input(0)) && rank.count(n.input(w)) &&
      rank.at(n.input(0)) != rank.at(n.input(w)))
    fail("{}: {}: input '{}' has rank {} but weight '{}' has rank {}", label, proto_label(n),
         printable(n.input(0)), rank.at(n.input(0)), printable(n.input(w)), rank.at(n.input(w)));
}

// Attribute values that ONNX's own shape inference divides by or indexes with unchecked (a
// stride of 0 is a SIGFPE inside it), checked before it runs on an untrusted model.
void validate_attributes(const onnx::GraphProto& graph, const std::string& label) {
  // Ranks known before inference: graph inputs and initializers.
  std::map<std::string, int> rank;
  for (const auto& v : graph.input())
    if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
      rank[v.name()] = v.type().tensor_type().shape().dim_size();
  for (const auto& t : graph.initializer()) rank[t.name()] = t.dims_size();
  for (const auto& n : graph.node()) {
    bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (default_domain) check_conv_ranks(label, n, rank);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) validate_attributes(a.g(), label);
      for (const auto& sub : a.graphs()) validate_attributes(sub, label);
      if (default_domain) check_attribute(label, n, a);
    }
  }
}

// Every tensor of the model stored as external data (initializers, Constant and other tensor
// attributes, subgraphs): its location must stay inside the model's folder. Checked before the
// ONNX checker, which looks the files up itself.
void validate_external_data(const onnx::GraphProto& graph, const std::string& base_dir,
                            const std::string& label) {
  auto check = [&](const onnx::TensorProto& t, const std::string& what) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
    for (const auto& kv : t.external_data())
      if (kv.key() == "location") confined_path(base_dir, kv.value(), what + ": external data");
  };
  for (const auto& init : graph.initializer())
    check(init, fmt::format("{}: initializer '{}'", label, printable(init.name())));
  for (const auto& n : graph.node())
    for (const auto& a : n.attribute()) {
      std::string what =
          fmt::format("{}: {} attribute '{}'", label, proto_label(n), printable(a.name()));
      if (a.has_t()) check(a.t(), what);
      for (const auto& t : a.tensors()) check(t, what);
      if (a.has_g()) validate_external_data(a.g(), base_dir, label);
      for (const auto& sub : a.graphs()) validate_external_data(sub, base_dir, label);
    }
}

// ONNX's checker and shape inference, which add the inferred value infos to m.
void check_and_infer(onnx::ModelProto& m, const ImportOptions& options, const std::string& label) {
  if (options.run_checker) {
    bool external = false;
    for (const auto& init : m.graph().initializer())
      external |= init.data_location() == onnx::TensorProto::EXTERNAL;
    try {
      // The checker resolves external data against the model's folder only when given the path.
      if (external && !options.file_path.empty())
        onnx::checker::check_model(options.file_path);
      else
        onnx::checker::check_model(m);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      fail("{}: the ONNX checker rejects the model: {}", label, msg);
    }
  }
  if (options.infer_shapes) {
    try {
      onnx::shape_inference::InferShapes(m);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      fail("{}: ONNX shape inference fails: {}", label, msg);
    }
  }
}

// Whole buffers over a socket; false when the other end went away (or the deadline passed).
bool send_bytes(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool recv_bytes(int fd, void* data, std::size_t n, int timeout_ms) {
  char* p = static_cast<char*>(data);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (n > 0) {
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      pollfd pfd{fd, POLLIN, 0};
      int ready = left > 0 ? ::poll(&pfd, 1, static_cast<int>(left)) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
    }
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool send_message(int fd, const std::string& m) {
  std::uint64_t n = m.size();
  return send_bytes(fd, &n, sizeof n) && send_bytes(fd, m.data(), m.size());
}

bool recv_message(int fd, std::string& m, int timeout_ms) {
  std::uint64_t n = 0;
  if (!recv_bytes(fd, &n, sizeof n, timeout_ms) || n > (std::uint64_t{1} << 40)) return false;
  m.resize(n);
  return recv_bytes(fd, m.data(), n, timeout_ms);
}

// ONNX 1.12's checker and shape inference read out of bounds on some malformed models (a
// Conv-family node whose input and weight ranks differ, found by fuzzing): they run in a worker
// process, forked at the first load and kept for the next ones, so that such a crash is an
// error about the model and never takes MetaOp down. The worker sends back only what inference
// adds: the value infos and the outputs' types.
//
// Models of opsets newer than that library knows (kMaxLinkedOnnxOpset) go to a worker of the same
// protocol that runs the current `onnx` package of the project's Python environment
// (onnx_current.py), which also fills in the nodes' schema defaults, and sends the nodes back.
class OnnxWorker {
 public:
  static constexpr int kTimeoutMs = 300 * 1000;

  // python: the current ONNX package's worker instead of a fork of this process.
  explicit OnnxWorker(bool python = false) : python_(python) {}

  // The worker's answer to one model: 'O' and the inferred graph parts, or 'E' and a message.
  std::string run(const std::string& model, const ImportOptions& options,
                  const std::string& label) {
    // In a process forked from the one that started the worker (a binding's isolated worker),
    // the inherited link is not this process's: it starts its own.
    if (owner_ != ::getpid()) {
      pid_ = -1;
      sock_ = -1;
      owner_ = ::getpid();
    }
    std::string request(1, static_cast<char>(options.run_checker));
    request += static_cast<char>(options.infer_shapes);
    std::uint32_t n = static_cast<std::uint32_t>(options.file_path.size());
    request.append(reinterpret_cast<const char*>(&n), sizeof n);
    request += options.file_path;
    request += model;
    std::string reply;
    if (pid_ <= 0) start(label);
    auto t0 = std::chrono::steady_clock::now();
    if (send_message(sock_, request) && recv_message(sock_, reply, kTimeoutMs)) return reply;
    bool hung = std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(kTimeoutMs);
    // The worker died on this model, or hangs on it (then it is killed).
    ::close(sock_);
    sock_ = -1;
    int status = 0;
    for (int waited = 0; !hung && waited < 1000; waited += 2) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      ::usleep(2000);
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    if (hung)
      fail("{}: ONNX's checker and shape inference did not answer within {} s", label,
           kTimeoutMs / 1000);
    if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
      fail(
          "{}: ONNX's checker or shape inference crashed on this model ({}): the model is "
          "malformed",
          label, strsignal(WTERMSIG(status)));
    fail("{}: ONNX's checker and shape inference ended without an answer", label);
  }

 private:
  void start(const std::string& label) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      fail("{}: socketpair failed: {}", label, std::strerror(errno));
    std::fflush(stdout);
    std::fflush(stderr);
    // The Python worker's command, made before the fork (the child only calls what is safe in a
    // forked copy of a threaded process, then execs).
    std::string python = venv_python(), script = metaop_source("src/graph/onnx_current.py");
    std::vector<char*> argv{python.data(), const_cast<char*>("-s"), script.data(), nullptr};
    // Its environment: this one, with PYTHONDONTWRITEBYTECODE (the source tree stays clean).
    std::string no_bytecode = "PYTHONDONTWRITEBYTECODE=1";
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    envp.push_back(no_bytecode.data());
    envp.push_back(nullptr);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) fail("{}: fork failed: {}", label, std::strerror(errno));
    if (pid == 0 && python_) exec_python(parent, sv, argv.data(), envp.data());
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(0);
      std::signal(SIGINT, SIG_IGN);
      // A crash ends the worker plainly, whatever handlers the process installed (a sanitizer's
      // report of ONNX's bug is not ours to make).
      for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
      ::close(sv[0]);
      int keep = sv[1];
      ::close_range(3, static_cast<unsigned>(keep - 1), 0);
      ::close_range(static_cast<unsigned>(keep + 1), ~0u, 0);
      serve(keep);
    }
    ::close(sv[1]);
    sock_ = sv[0];
    pid_ = pid;
  }

  // The child becomes `python -s onnx_current.py` (argv, envp), its socket on fd 3.
  [[noreturn]] static void exec_python(pid_t parent, const int sv[2], char* const argv[],
                                       char* const envp[]) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(0);
    std::signal(SIGINT, SIG_IGN);
    // dup2 onto itself would keep close-on-exec: then clear it instead.
    if (sv[1] == 3 ? ::fcntl(3, F_SETFD, 0) < 0 : ::dup2(sv[1], 3) < 0) _exit(127);
    ::close_range(4, ~0u, 0);
    ::execve(argv[0], argv, envp);
    _exit(127);
  }

  [[noreturn]] static void serve(int sock) {
    std::string request;
    while (recv_message(sock, request, -1)) {
      std::string reply;
      try {
        if (request.size() < 6) throw Error("malformed request");
        ImportOptions options;
        options.run_checker = request[0] != 0;
        options.infer_shapes = request[1] != 0;
        std::uint32_t n = 0;
        std::memcpy(&n, request.data() + 2, sizeof n);
        if (n > request.size() - 6) throw Error("malformed request");
        options.file_path = request.substr(6, n);
        onnx::ModelProto m;
        if (!m.ParseFromArray(request.data() + 6 + n, static_cast<int>(request.size() - 6 - n)))
          throw Error("the model does not parse again");
        check_and_infer(m, options, "");
        onnx::GraphProto inferred;
        *inferred.mutable_value_info() = m.graph().value_info();
        *inferred.mutable_output() = m.graph().output();
        reply.assign(1, 'O');
        reply += inferred.SerializeAsString();
      } catch (const std::exception& e) {
        reply.assign(1, 'E');
        reply += e.what();
      }
      if (!send_message(sock, reply)) break;
    }
    _exit(0);
  }

  bool python_ = false;
  pid_t owner_ = ::getpid();
  pid_t pid_ = -1;
  int sock_ = -1;
};

OnnxWorker& current_onnx_worker() {
  static auto* python = new OnnxWorker(true);  // lives as long as the process
  return *python;
}

// The linked ONNX library's checker and shape inference in a forked worker, or (current) the
// current ONNX package's, which also sends the nodes back with their schema defaults filled in.
void check_and_infer_isolated(onnx::ModelProto& m, const std::string& bytes,
                              const ImportOptions& options, const std::string& label,
                              std::int64_t opset, bool use_current = false) {
  const bool current = use_current || opset > kMaxLinkedOnnxOpset;
  static auto* worker = new OnnxWorker();  // lives as long as the process
  if (current && ::access(venv_python().c_str(), X_OK) != 0)
    throw Unsupported(fmt::format(
        "{}: opset {} is newer than the ONNX library MetaOp links knows (opsets up to {}): it "
        "needs the current onnx package of the project's Python environment, {} (run "
        "scripts/install-deps.sh, or set METAOP_PYTHON)",
        label, opset, kMaxLinkedOnnxOpset, venv_python()));
  std::string reply = (current ? &current_onnx_worker() : worker)->run(bytes, options, label);
  if (reply.empty() || (reply[0] != 'O' && reply[0] != 'E'))
    fail("{}: ONNX's checker and shape inference ended without an answer", label);
  // The worker's messages start with ": " where the label goes.
  if (reply[0] == 'E') throw Error(label + reply.substr(1));
  onnx::GraphProto inferred;
  if (!inferred.ParseFromString(reply.substr(1)))
    fail("{}: ONNX shape inference's answer is unreadable", label);
  *m.mutable_graph()->mutable_value_info() = inferred.value_info();
  *m.mutable_graph()->mutable_output() = inferred.output();
  if (opset > kMaxLinkedOnnxOpset) {
    if (inferred.node_size() != m.graph().node_size())
      fail("{}: the current ONNX package sent {} nodes back for {}", label, inferred.node_size(),
           m.graph().node_size());
    *m.mutable_graph()->mutable_node() = inferred.node();
  }
}

// The opset of the default domain, which MetaOp must follow.
std::int64_t default_opset(const onnx::ModelProto& m, const std::string& label) {
  std::int64_t opset = 0;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  // A model of another domain's operators alone (a training step of ai.onnx.preview.training)
  // imports no default opset: its graph is read, checked and inferred at the linked library's.
  bool others_only = m.opset_import_size() > 0;
  for (const auto& o : m.opset_import())
    others_only = others_only && is_other_onnx_domain(o.domain());
  if (opset == 0 && others_only) return kMaxLinkedOnnxOpset;
  if (opset == 0) {
    std::string domains;
    for (const auto& o : m.opset_import()) domains += (domains.empty() ? "" : ", ") + o.domain();
    throw Unsupported(fmt::format(
        "{}: the model imports no opset of the default ONNX domain (only {})", label, domains));
  }
  if (opset < kMinOpset || opset > kMaxOpset)
    throw Unsupported(fmt::format("{}: opset {} is not supported (MetaOp follows opsets {} to {})",
                                  label, opset, kMinOpset, kMaxOpset));
  return opset;
}

// The graph's initializers, inputs (those that are not initializers), outputs and value infos;
// inputs and outputs must be tensors.
void convert_values(const onnx::GraphProto& gp, const std::string& base_dir,
                    const std::string& label, Graph& g) {
  for (const auto& init : gp.initializer())
    g.initializers[init.name()] =
        tensor_from_proto(init, base_dir, fmt::format("{}: initializer '{}'", label, init.name()));
  for (const auto& v : gp.input())
    if (!g.initializers.count(v.name())) g.inputs.push_back(convert_value_info(v));
  for (const auto& v : gp.output()) g.outputs.push_back(convert_value_info(v));
  for (const auto& v : gp.value_info()) g.value_info[v.name()] = convert_value_info(v);
  for (const auto* list : {&g.inputs, &g.outputs})
    for (const auto& v : *list)
      if (!v.is_tensor && !v.sequence && !v.optional)
        throw Unsupported(
            fmt::format("{}: graph input or output '{}' is neither a tensor nor a sequence or "
                        "optional of tensors (maps, sparse tensors and nested sequences are not "
                        "supported)",
                        label, v.name));
  if (gp.sparse_initializer_size() > 0) fail("{}: sparse initializers are not supported", label);
}

// Node i of the graph (named "<op>_i" when it has no name), with the schema's defaults for the
// attributes it leaves out.
Node convert_node(const onnx::NodeProto& np, int i, std::int64_t opset, const std::string& base_dir,
                  const std::string& label) {
  Node n;
  n.op_type = np.op_type();
  n.domain = np.domain();
  n.name = np.name().empty() ? fmt::format("{}_{}", n.op_type, i) : np.name();
  n.inputs.assign(np.input().begin(), np.input().end());
  n.outputs.assign(np.output().begin(), np.output().end());
  for (const auto& a : np.attribute())
    n.attrs[a.name()] = convert_attr(
        a, base_dir, fmt::format("{}: {} attribute '{}'", label, n.label(), a.name()), opset);
  // Fill in the schema's defaults so kernels read every attribute from one place (past the
  // linked ONNX library's opsets, the current ONNX package filled them in).
  if (opset <= kMaxLinkedOnnxOpset) fill_schema_defaults(n, opset);
  return n;
}

// A GRAPH attribute (the body of If, Loop, Scan): its values and nodes, named as in the model
// (engine/control_flow renames them as it inlines the body); `label` names the attribute.
Graph convert_subgraph(const onnx::GraphProto& gp, std::int64_t opset, const std::string& base_dir,
                       const std::string& label) {
  Graph sub;
  sub.path = label;
  sub.name = gp.name();
  sub.opset = opset;
  convert_values(gp, base_dir, label, sub);
  sub.nodes.reserve(static_cast<std::size_t>(gp.node_size()));
  for (int i = 0; i < gp.node_size(); ++i)
    sub.nodes.push_back(convert_node(gp.node(i), i, opset, base_dir, label));
  return sub;
}

}  // namespace

namespace {

// The schema defaults of `op_type` at an opset past the linked library's, from the current ONNX
// package (a one-node model it fills in), cached per (op, opset); none without that package.
const std::map<std::string, Attribute>& current_schema_defaults(const std::string& op_type,
                                                                std::int64_t opset) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::int64_t>, std::map<std::string, Attribute>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = cache.try_emplace({op_type, opset});
  if (!fresh || ::access(venv_python().c_str(), X_OK) != 0) return it->second;
  onnx::ModelProto m;
  m.set_ir_version(onnx::IR_VERSION);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("schema_defaults");
  m.mutable_graph()->add_node()->set_op_type(op_type);
  ImportOptions options;
  options.run_checker = false;
  options.infer_shapes = false;
  std::string label = fmt::format("the schema defaults of {} at opset {}", op_type, opset);
  std::string reply = current_onnx_worker().run(m.SerializeAsString(), options, label);
  onnx::GraphProto g;
  if (reply.empty() || reply[0] != 'O' || !g.ParseFromString(reply.substr(1)) || g.node_size() != 1)
    return it->second;
  for (const auto& a : g.node(0).attribute()) it->second[a.name()] = convert_attr(a, ".", a.name());
  return it->second;
}

}  // namespace

void fill_schema_defaults(Node& n, std::int64_t opset) {
  // The other domains MetaOp reads (is_other_onnx_domain) have one version each, which the linked
  // ONNX library knows; the default domain past its opsets is the current ONNX package's.
  const bool other = is_other_onnx_domain(n.domain);
  if (!other && opset > kMaxLinkedOnnxOpset) {
    for (const auto& [name, a] : current_schema_defaults(n.op_type, opset))
      if (!n.attrs.count(name)) n.attrs[name] = a;
    return;
  }
  const auto* schema =
      other ? onnx::OpSchemaRegistry::Schema(n.op_type, std::numeric_limits<int>::max(), n.domain)
            : onnx::OpSchemaRegistry::Schema(n.op_type, static_cast<int>(opset), "");
  if (!schema) return;
  for (const auto& [aname, adef] : schema->attributes()) {
    if (n.attrs.count(aname) || adef.required) continue;
    if (adef.default_value.type() == onnx::AttributeProto::UNDEFINED) continue;
    n.attrs[aname] = convert_attr(adef.default_value, ".", aname);
  }
}

std::optional<Attribute> schema_default(const std::string& op_type, std::int64_t opset,
                                        const std::string& name) {
  if (opset > kMaxLinkedOnnxOpset) {
    const auto& defaults = current_schema_defaults(op_type, opset);
    auto it = defaults.find(name);
    if (it == defaults.end()) return std::nullopt;
    return it->second;
  }
  const auto* schema = onnx::OpSchemaRegistry::Schema(op_type, static_cast<int>(opset), "");
  if (!schema) return std::nullopt;
  auto it = schema->attributes().find(name);
  if (it == schema->attributes().end() || it->second.required ||
      it->second.default_value.type() == onnx::AttributeProto::UNDEFINED)
    return std::nullopt;
  return convert_attr(it->second.default_value, ".", name);
}

namespace {

// The metadata of the model read last (set_node_export_metadata, onnx_io.h), and a number that
// changes whenever it does: the key of the import bindings' session cache, which asks for it at
// every node they run.
struct NodeMetadata {
  ModelMetadata meta;
  std::string text;  // all of it, to tell a change
  std::uint64_t generation = 0;
};
std::mutex g_node_metadata_mutex;
NodeMetadata& node_metadata() {
  static NodeMetadata m;
  return m;
}

std::string metadata_text(const ModelMetadata& m) {
  std::string text = fmt::format("{}:{}|{}:{}|{}|{}:{}|", m.producer_name.size(), m.producer_name,
                                 m.producer_version.size(), m.producer_version, m.model_version,
                                 m.domain.size(), m.domain);
  for (const auto& [domain, version] : m.opset_imports)
    text += fmt::format("{}={};", domain, version);
  for (const auto& [k, v] : m.metadata_props)
    text += fmt::format("{}:{}={}:{};", k.size(), k, v.size(), v);
  return text + fmt::format("{}:{}", m.doc_string.size(), m.doc_string);
}

}  // namespace

void set_node_export_metadata(const ModelMetadata& meta) {
  std::string text = metadata_text(meta);
  std::lock_guard<std::mutex> lock(g_node_metadata_mutex);
  NodeMetadata& n = node_metadata();
  if (text == n.text) return;
  n.meta = meta;
  n.text = std::move(text);
  ++n.generation;
}

ModelMetadata node_export_metadata() {
  std::lock_guard<std::mutex> lock(g_node_metadata_mutex);
  return node_metadata().meta;
}

std::string node_export_metadata_key() {
  std::lock_guard<std::mutex> lock(g_node_metadata_mutex);
  return fmt::format("meta#{}", node_metadata().generation);
}

namespace {

ModelMetadata model_metadata(const onnx::ModelProto& m) {
  ModelMetadata meta;
  meta.producer_name = m.producer_name();
  meta.producer_version = m.producer_version();
  meta.domain = m.domain();
  meta.doc_string = m.doc_string();
  meta.model_version = m.model_version();
  for (const auto& o : m.opset_import())
    meta.opset_imports[o.domain() == "ai.onnx" ? "" : o.domain()] = o.version();
  for (const auto& p : m.metadata_props()) meta.metadata_props.emplace_back(p.key(), p.value());
  return meta;
}

}  // namespace

Graph load_onnx_from_bytes(const std::string& bytes, const std::string& label,
                           const std::string& base_dir, const ImportOptions& options) {
  onnx::ModelProto m;
  if (bytes.empty()) fail("{}: empty file, not an ONNX model", label);
  if (!m.ParseFromString(bytes))
    fail("{}: not a valid ONNX model (corrupt or truncated protobuf)", label);
  if (!m.has_graph()) fail("{}: not a valid ONNX model (no graph; truncated?)", label);

  Graph g;
  g.path = label;
  g.name = m.graph().name();
  g.opset = default_opset(m, label);
  // Past the linked ONNX library's opsets, the current ONNX package checks the model, infers its
  // shapes and fills in the schema defaults (always: the nodes need their defaults).
  const bool current = g.opset > kMaxLinkedOnnxOpset;
  if (!current) check_known_ops(m, g.opset, label);
  validate_external_data(m.graph(), base_dir, label);
  validate_attributes(m.graph(), label);

  if (current)
    check_and_infer_isolated(m, bytes, options, label, g.opset);
  else if (options.run_checker || options.infer_shapes) {
    try {
      if (options.isolate_onnx)
        check_and_infer_isolated(m, bytes, options, label, g.opset);
      else
        check_and_infer(m, options, label);
    } catch (const Error& e) {
      // The linked ONNX 1.12's shape inference has bugs fixed since (STFT's frame count is one
      // too many), and its checker refuses the IR versions newer than its own that current
      // exporters write at any opset: a model it alone rejects so is checked and inferred again
      // by the current onnx package, whose verdict stands (its message, if it rejects the model
      // too).
      const std::string what = e.what();
      const bool newer_ir =
          m.ir_version() > onnx::Version::IR_VERSION &&
          what.find(": the ONNX checker rejects the model: ") != std::string::npos;
      if ((what.find(": ONNX shape inference fails: ") == std::string::npos && !newer_ir) ||
          !current_onnx_available())
        throw;
      check_and_infer_isolated(m, bytes, options, label, g.opset, true);
    }
  }

  g.meta = model_metadata(m);
  // The one-node models the ONNX-import bindings run carry it: the model under test is the one
  // read last.
  set_node_export_metadata(g.meta);
  const auto& gp = m.graph();
  convert_values(gp, base_dir, label, g);
  g.nodes.reserve(static_cast<std::size_t>(gp.node_size()));
  for (int i = 0; i < gp.node_size(); ++i)
    g.nodes.push_back(convert_node(gp.node(i), i, g.opset, base_dir, label));
  return g;
}

Graph load_onnx(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{}: is a directory, not an ONNX model", path);
  std::string bytes = InputFile(path).read_all();
  ImportOptions with_path = options;
  with_path.file_path = path;
  return load_onnx_from_bytes(bytes, path, std::filesystem::path(path).parent_path().string(),
                              with_path);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("{}: cannot open for writing", path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("{}: write failed", path);
}

bool current_onnx_available() {
  return ::access(venv_python().c_str(), X_OK) == 0;
}

void infer_outputs_with_current_onnx(onnx::ModelProto& m, const std::string& label) {
  if (::access(venv_python().c_str(), X_OK) != 0)
    throw Unsupported(fmt::format(
        "{}: typing a model of an opset past {} needs the current onnx package of the project's "
        "Python environment, {} (run scripts/install-deps.sh, or set METAOP_PYTHON)",
        label, kMaxLinkedOnnxOpset, venv_python()));
  ImportOptions options;
  options.run_checker = false;
  std::string reply = current_onnx_worker().run(m.SerializeAsString(), options, label);
  if (reply.empty() || reply[0] != 'O')
    fail("{}{}", label,
         reply.empty() ? ": the current ONNX package did not answer" : reply.substr(1));
  onnx::GraphProto inferred;
  if (!inferred.ParseFromString(reply.substr(1)))
    fail("{}: ONNX shape inference's answer is unreadable", label);
  *m.mutable_graph()->mutable_value_info() = inferred.value_info();
  *m.mutable_graph()->mutable_output() = inferred.output();
}

}  // namespace metaop
