#include "bindings/onnx_import/adapter_process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "bindings/isolate.h"
#include "bindings/worker_io.h"

extern char** environ;

namespace metaop {

namespace fs = std::filesystem;

namespace {

bool on_path_impl(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::string p = path;
  std::size_t start = 0;
  while (start <= p.size()) {
    auto colon = p.find(':', start);
    std::string dir = p.substr(start, colon - start);
    if (!dir.empty()) {
      std::string file = dir;
      file += '/';
      file += program;
      if (::access(file.c_str(), X_OK) == 0) return true;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return false;
}

using Clock = WorkerClock;

template <typename T>
void put(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& b, const std::string& s) {
  put(b, static_cast<std::uint32_t>(s.size()));
  b += s;
}

// The reply body, read piece by piece; tensor data goes straight into the tensors.
class ReplyReader {
 public:
  ReplyReader(int fd, std::size_t length, Clock::time_point deadline)
      : fd_(fd), left_(length), deadline_(deadline) {}
  void read(void* p, std::size_t n) {
    if (n > left_) throw Error("adapter worker: malformed reply (past its length)");
    Io io = recv_all(fd_, p, n, deadline_);
    if (io != Io::Ok) throw io == Io::Timeout ? 1 : 2;
    left_ -= n;
    pos_ += n;
  }
  template <typename T>
  T get() {
    T v;
    read(&v, sizeof v);
    return v;
  }
  std::string str() {
    std::string s(get<std::uint32_t>(), '\0');
    if (!s.empty()) read(s.data(), s.size());
    return s;
  }
  void align() {
    char pad[8];
    std::size_t n = (8 - pos_ % 8) % 8;
    if (n) read(pad, n);
  }
  std::size_t left() const { return left_; }

 private:
  int fd_;
  std::size_t left_, pos_ = 0;
  Clock::time_point deadline_;
};

// One output of a run reply: name, ONNX element type, shape, byte count, then the data
// (8-aligned).
Tensor read_output(ReplyReader& r, const std::string& what) {
  std::string name = r.str();
  auto elem = r.get<std::uint8_t>();
  auto rank = r.get<std::uint32_t>();
  Shape s(rank);
  for (auto& d : s) d = r.get<std::int64_t>();
  auto nbytes = r.get<std::uint64_t>();
  r.align();
  auto dt = dtype_from_onnx(elem);
  if (!dt) {
    std::string skip(nbytes, '\0');
    if (nbytes) r.read(skip.data(), nbytes);
    throw Unsupported(fmt::format("{}: output '{}' has ONNX type {}, which MetaOp lacks", what,
                                  name, onnx_type_name(elem)));
  }
  Tensor t = Tensor::empty(*dt, s);
  if (t.nbytes() != nbytes)
    fail("{}: the worker's output '{}' has {} bytes for shape {}", what, name, nbytes,
         shape_str(s));
  if (nbytes) r.read(t.raw(), nbytes);
  return t;
}

}  // namespace

bool program_found(const std::string& program) {
  return on_path_impl(program);
}

std::string AdapterProcess::installation_problem() const {
  const std::string& program = command_.argv.at(0);
  if (!on_path_impl(program))
    return fmt::format("'{}' is not installed: {}", program, command_.install_hint);
  if (!command_.missing.empty())
    return fmt::format("{}: {}", command_.missing, command_.install_hint);
  for (const auto& f : command_.need_files)
    if (!fs::exists(f)) return fmt::format("{} not found: {}", f, command_.install_hint);
  return "";
}

AdapterProcess::AdapterProcess(AdapterCommand command) : command_(std::move(command)) {}

AdapterProcess::~AdapterProcess() {
  stop();
}

void AdapterProcess::start() {
  const std::string& fw = command_.framework;
  if (std::string p = installation_problem(); !p.empty()) fail("{}: {}", fw, p);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    fail("{} worker: socketpair failed: {}", fw, std::strerror(errno));
  for (int s : sv) {
    int size = 4 << 20;
    ::setsockopt(s, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    ::setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  // The child's end must not be fd 3 already (dup2 onto itself would keep close-on-exec).
  int child = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  ::close(sv[1]);
  char log_name[] = "/tmp/metaop-adapter-XXXXXX";
  log_fd_ = ::mkostemp(log_name, O_CLOEXEC);
  if (log_fd_ >= 0) ::unlink(log_name);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (log_fd_ >= 0) {
    posix_spawn_file_actions_adddup2(&fa, log_fd_, 1);
    posix_spawn_file_actions_adddup2(&fa, log_fd_, 2);
  }
  posix_spawn_file_actions_adddup2(&fa, child, 3);

  // The worker's environment: MetaOp's, with the command's entries in place of any of the same
  // name.
  std::vector<std::string> env_store;
  auto overridden = [&](const char* e) {
    for (const auto& c : command_.env) {
      auto eq = c.find('=');
      if (std::strncmp(e, c.data(), eq + 1) == 0) return true;
    }
    return false;
  };
  for (char** e = environ; *e; ++e)
    if (!overridden(*e)) env_store.emplace_back(*e);
  env_store.insert(env_store.end(), command_.env.begin(), command_.env.end());
  std::vector<char*> envp;
  envp.reserve(env_store.size() + 1);
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_store = command_.argv;
  std::vector<char*> argv;
  argv.reserve(args_store.size() + 1);
  for (auto& a : args_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(child);
  if (rc != 0) {
    ::close(sv[0]);
    fail("{} worker: cannot start '{}': {}", fw, args_store[0], std::strerror(rc));
  }
  pid_ = pid;
  sock_ = sv[0];
  ++generation_;
  next_id_ = 1;
}

void AdapterProcess::stop() {
  if (sock_ >= 0) ::close(sock_);  // the worker sees end of input and exits
  sock_ = -1;
  ++generation_;  // its sessions are gone with it
  if (pid_ > 0) {
    // A worker stuck in a kernel does not read its input: give it a moment, then kill it.
    for (int i = 0; i < 50; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) != 0) {
        pid_ = -1;
        break;
      }
      ::usleep(2000);
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  pid_ = -1;
  if (log_fd_ >= 0) ::close(log_fd_);
  log_fd_ = -1;
}

void AdapterProcess::died(const std::string& what, const std::string& during) {
  // The worker closed its end: it crashed (a signal) or exited. Its own last words, if any,
  // are in its log.
  std::string how = "exited";
  if (pid_ > 0) {
    how = reap_worker(pid_);
    pid_ = -1;
  }
  std::string tail;
  if (log_fd_ >= 0) {
    off_t end = ::lseek(log_fd_, 0, SEEK_END);
    off_t from = std::max<off_t>(0, end - 400);
    std::string buf(static_cast<std::size_t>(end - from), '\0');
    if (::pread(log_fd_, buf.data(), buf.size(), from) > 0) {
      for (char& c : buf)
        if (c == '\n' || c == '\r') c = ' ';
      tail = buf;
    }
  }
  stop();
  throw Crash(fmt::format("{}: {}'s worker {} during {}{}", what, command_.framework, how, during,
                          tail.empty() ? "" : "; its last output: " + tail));
}

std::string AdapterProcess::exchange(const std::vector<std::pair<const void*, std::size_t>>& parts,
                                     const std::string& what, Tensors* outputs) {
  if (sock_ < 0) start();
  auto deadline = worker_deadline();
  std::size_t total = 0;
  for (const auto& p : parts) total += p.second;
  if (total > 0xffffffffu) throw Unsupported(what + ": tensors over 4 GiB in one request");
  auto len = static_cast<std::uint32_t>(total);
  std::string request_kind(1, static_cast<const char*>(parts.at(0).first)[0]);
  std::string during = request_kind == "L" ? "session creation" : "the run";
  auto hang = [&] {
    stop();
    throw Hang(
        fmt::format("{}: {} did not answer within {:g} s (--kernel-timeout) "
                    "during {}; its worker was killed",
                    what, command_.framework, kernel_timeout(), during));
  };
  Io io = send_all(sock_, &len, sizeof len, deadline);
  for (std::size_t i = 0; io == Io::Ok && i < parts.size(); ++i)
    if (parts[i].second) io = send_all(sock_, parts[i].first, parts[i].second, deadline);
  if (io == Io::Timeout) hang();
  if (io == Io::Closed) died(what, during);
  std::uint32_t reply_len = 0;
  io = recv_all(sock_, &reply_len, sizeof reply_len, deadline);
  if (io == Io::Timeout) hang();
  if (io == Io::Closed) died(what, during);
  ReplyReader r(sock_, reply_len, deadline);
  try {
    char kind = r.get<char>();
    if (kind != 'O') {
      std::string msg = r.str();
      if (kind == 'U')
        throw Unsupported(fmt::format("{}: {} refuses it: {}", what, command_.framework, msg));
      throw Error(fmt::format("{}: {} failed: {}", what, command_.framework, msg));
    }
    std::string rest;
    if (outputs) {
      auto n = r.get<std::uint32_t>();
      for (std::uint32_t i = 0; i < n; ++i) outputs->push_back(read_output(r, what));
    } else {
      rest.resize(r.left());
      if (!rest.empty()) r.read(rest.data(), rest.size());
    }
    return rest;
  } catch (int code) {
    if (code == 1) hang();
    died(what, during);
  }
}

std::uint32_t AdapterProcess::load(const std::string& model, int level, int threads,
                                   const std::string& what) {
  if (sock_ < 0) start();
  std::uint32_t id = next_id_++;
  std::string head(1, 'L');
  put(head, id);
  put(head, static_cast<std::uint8_t>(level));
  put(head, static_cast<std::uint32_t>(threads));
  exchange({{head.data(), head.size()}, {model.data(), model.size()}}, what, nullptr);
  return id;
}

void AdapterProcess::forget(std::uint32_t session) {
  if (sock_ < 0) return;
  std::string head(1, 'F');
  put(head, session);
  exchange({{head.data(), head.size()}}, command_.framework + " worker", nullptr);
}

std::string AdapterProcess::versions() {
  std::string head(1, 'V');
  std::string r = exchange({{head.data(), head.size()}}, command_.framework + " worker", nullptr);
  return r.size() >= 4 ? r.substr(4) : r;
}

Tensors AdapterProcess::run(std::uint32_t session,
                            const std::vector<std::pair<std::string, Tensor>>& inputs,
                            const std::vector<std::string>& outputs, const std::string& what) {
  // Header pieces live in `heads` (reserved, so the pointers stay valid); each tensor's data
  // is sent from its own storage, 8-aligned from the start of the body.
  std::vector<std::string> heads;
  heads.reserve(inputs.size() + 2);
  std::vector<std::pair<const void*, std::size_t>> parts;
  std::size_t offset = 0;
  auto add = [&](std::string s) {
    heads.push_back(std::move(s));
    parts.emplace_back(heads.back().data(), heads.back().size());
    offset += heads.back().size();
  };
  std::string head(1, 'R');
  put(head, session);
  put(head, static_cast<std::uint32_t>(inputs.size()));
  add(std::move(head));
  static const char zeros[8] = {};
  for (const auto& [name, t] : inputs) {
    std::string h;
    put_str(h, name);
    put(h, static_cast<std::uint8_t>(dtype_to_onnx(t.dtype())));
    put(h, static_cast<std::uint32_t>(t.rank()));
    for (auto d : t.shape()) put(h, d);
    put(h, static_cast<std::uint64_t>(t.nbytes()));
    h.append(zeros, (8 - (offset + h.size()) % 8) % 8);
    add(std::move(h));
    parts.emplace_back(t.raw(), t.nbytes());
    offset += t.nbytes();
  }
  std::string tail;
  put(tail, static_cast<std::uint32_t>(outputs.size()));
  for (const auto& o : outputs) put_str(tail, o);
  add(std::move(tail));
  Tensors got;
  exchange(parts, what, &got);
  if (got.size() != outputs.size())
    fail("{}: {} returned {} outputs for {} requested", what, command_.framework, got.size(),
         outputs.size());
  return got;
}

}  // namespace metaop
