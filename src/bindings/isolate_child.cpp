// The one-off child process (run_isolated): a kernel of a binding that runs in MetaOp's process
// (--isolation none, or a planted fault there) forked, its outputs sent back through a pipe, a
// crash or a hang past the kernel timeout turned into a finding. Persistent workers are in
// isolate.cpp.
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "bindings/isolate.h"
#include "tensor/heap.h"

namespace metaop {

namespace {

std::atomic<double> timeout_seconds{120.0};

}  // namespace

void commit_planted_fault(const std::string& fault) {
  if (fault == "segv") {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  if (fault == "hang")
    for (;;) ::pause();
  std::abort();
}

void set_kernel_timeout(double seconds) {
  if (!(seconds >= 0)) fail("--kernel-timeout {}: must be 0 (no limit) or more seconds", seconds);
  timeout_seconds = seconds;
}

double kernel_timeout() {
  return timeout_seconds;
}

namespace {

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) _exit(3);
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

template <typename T>
void put(std::string& buf, const T& v) {
  buf.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T get(const std::string& buf, std::size_t& pos) {
  if (pos + sizeof(T) > buf.size()) throw Error("isolated kernel: truncated reply");
  T v;
  std::memcpy(&v, buf.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

// Reply: kind ('O' outputs, 'U' unsupported, 'E' error), then outputs or a message; after the
// outputs, the child's heap peak above its level at the fork.
std::string encode(char kind, const Tensors& outs, const std::string& msg) {
  std::string buf(1, kind);
  if (kind != 'O') {
    buf += msg;
    return buf;
  }
  put(buf, static_cast<std::uint64_t>(outs.size()));
  for (const auto& t : outs) {
    put(buf, static_cast<std::uint8_t>(t.defined()));
    if (!t.defined()) continue;
    put(buf, static_cast<std::uint8_t>(t.dtype()));
    put(buf, static_cast<std::uint64_t>(t.rank()));
    for (auto d : t.shape()) put(buf, d);
    buf.append(reinterpret_cast<const char*>(t.raw()), t.nbytes());
  }
  return buf;
}

}  // namespace

namespace {

// The one-off child: runs `kernel`, writes its reply to `fd` and exits.
[[noreturn]] void serve_once(int fd, const std::function<Tensors()>& kernel, std::int64_t level) {
  std::string reply;
  try {
    reset_heap_peak();
    Tensors outs = kernel();
    reply = encode('O', outs, "");
    put(reply, heap_peak() - level);  // the kernel's own peak, in the child
  } catch (const Unsupported& e) {
    reply = encode('U', {}, e.what());
  } catch (const std::exception& e) {
    reply = encode('E', {}, e.what());
  }
  write_all(fd, reply.data(), reply.size());
  ::close(fd);
  _exit(0);
}

// The child's whole reply, read until it closes its end; past the kernel timeout the child is
// killed and the call is a Hang.
std::string read_reply(int fd, pid_t pid, const std::string& what) {
  std::string buf;
  char chunk[1 << 16];
  const double limit = kernel_timeout();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  for (;;) {
    if (limit > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      pollfd p{fd, POLLIN, 0};
      int ready =
          left > 0 ? ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30))) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        ::kill(pid, SIGKILL);
        ::close(fd);
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        throw Hang(fmt::format(
            "{}: the kernel did not finish within {:g} s (--kernel-timeout); killed", what, limit));
      }
    }
    ssize_t r = ::read(fd, chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(r));
  }
  ::close(fd);
  return buf;
}

// The outputs of a reply `encode` wrote; raises the heap peak by the child's.
Tensors decode(const std::string& buf, std::int64_t level) {
  char kind = buf[0];
  if (kind == 'U') throw Unsupported(buf.substr(1));
  if (kind == 'E') throw Error(buf.substr(1));
  std::size_t pos = 1;
  auto n = get<std::uint64_t>(buf, pos);
  Tensors outs;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (!get<std::uint8_t>(buf, pos)) {
      outs.emplace_back();
      continue;
    }
    auto dtype = static_cast<DType>(get<std::uint8_t>(buf, pos));
    auto rank = get<std::uint64_t>(buf, pos);
    Shape s;
    for (std::uint64_t d = 0; d < rank; ++d) s.push_back(get<std::int64_t>(buf, pos));
    Tensor t = Tensor::empty(dtype, s);
    if (pos + t.nbytes() > buf.size()) throw Error("isolated kernel: truncated reply");
    std::memcpy(t.raw(), buf.data() + pos, t.nbytes());
    pos += t.nbytes();
    outs.push_back(t);
  }
  raise_heap_peak(level + get<std::int64_t>(buf, pos));
  return outs;
}

}  // namespace

Tensors run_isolated(const std::string& what, const std::function<Tensors()>& kernel) {
  int fds[2];
  if (::pipe(fds) != 0) fail("{}: pipe failed: {}", what, std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) fail("{}: fork failed: {}", what, std::strerror(errno));
  std::int64_t level = heap_in_use();
  if (pid == 0) {
    ::close(fds[0]);
    serve_once(fds[1], kernel, level);
  }
  ::close(fds[1]);
  std::string buf = read_reply(fds[0], pid, what);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    throw Crash(fmt::format("{}: the kernel crashed ({})", what, strsignal(WTERMSIG(status))));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || buf.empty())
    throw Crash(
        fmt::format("{}: the kernel's process exited with status {}", what, WEXITSTATUS(status)));
  return decode(buf, level);
}

}  // namespace metaop
