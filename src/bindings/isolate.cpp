#include "bindings/isolate.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>

#include "tensor/heap.h"

namespace metaop {

namespace {

std::atomic<double> timeout_seconds{120.0};

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

void set_kernel_timeout(double seconds) {
  if (!(seconds >= 0)) fail("--kernel-timeout {}: must be 0 (no limit) or more seconds", seconds);
  timeout_seconds = seconds;
}

double kernel_timeout() {
  return timeout_seconds;
}

Tensors run_isolated(const std::string& what, const std::function<Tensors()>& kernel) {
  int fds[2];
  if (::pipe(fds) != 0) fail("{}: pipe failed: {}", what, std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) fail("{}: fork failed: {}", what, std::strerror(errno));
  std::int64_t level = heap_in_use();
  if (pid == 0) {
    ::close(fds[0]);
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
    write_all(fds[1], reply.data(), reply.size());
    ::close(fds[1]);
    _exit(0);
  }
  ::close(fds[1]);
  std::string buf;
  char chunk[1 << 16];
  const double limit = kernel_timeout();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  for (;;) {
    if (limit > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      pollfd p{fds[0], POLLIN, 0};
      int ready =
          left > 0 ? ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30))) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        ::kill(pid, SIGKILL);
        ::close(fds[0]);
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        throw Hang(fmt::format(
            "{}: the kernel did not finish within {:g} s (--kernel-timeout); killed", what, limit));
      }
    }
    ssize_t r = ::read(fds[0], chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(r));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    throw Crash(fmt::format("{}: the kernel crashed ({})", what, strsignal(WTERMSIG(status))));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || buf.empty())
    throw Crash(
        fmt::format("{}: the kernel's process exited with status {}", what, WEXITSTATUS(status)));
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

}  // namespace metaop
