#include "bindings/worker_io.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "bindings/isolate.h"

namespace metaop {

WorkerClock::time_point worker_deadline() {
  double t = kernel_timeout();
  if (t <= 0) return WorkerClock::time_point::max();
  return WorkerClock::now() +
         std::chrono::duration_cast<WorkerClock::duration>(std::chrono::duration<double>(t));
}

bool wait_fd(int fd, short events, WorkerClock::time_point deadline) {
  for (;;) {
    int ms = -1;
    if (deadline != WorkerClock::time_point::max()) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - WorkerClock::now())
              .count();
      if (left <= 0) return false;
      ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

Io send_all(int fd, const void* data, std::size_t n, WorkerClock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      if (!wait_fd(fd, POLLOUT, deadline)) return Io::Timeout;
      continue;
    }
    if (w <= 0) return Io::Closed;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return Io::Ok;
}

Io recv_all(int fd, void* data, std::size_t n, WorkerClock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) {
      if (!wait_fd(fd, POLLIN, deadline)) return Io::Timeout;
      continue;
    }
    if (r <= 0) return Io::Closed;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return Io::Ok;
}

std::string reap_worker(pid_t pid, int grace_ms) {
  int status = 0;
  bool reaped = false;
  for (int waited = 0; waited <= grace_ms; waited += 2) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      reaped = true;
      break;
    }
    if (r < 0 && errno != EINTR) return "exited";
    ::usleep(2000);
  }
  if (!reaped) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return "closed its end and was killed";
  }
  if (WIFSIGNALED(status)) return fmt::format("crashed ({})", strsignal(WTERMSIG(status)));
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "exited";
}

void kill_worker(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace metaop
