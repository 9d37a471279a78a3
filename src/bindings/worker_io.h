#pragma once
// What MetaOp's worker processes share -- the ONNX Runtime worker (ort/ort_process) and the
// workers that run any other binding isolated (isolate.h): socket I/O bounded by a deadline (the
// kernel timeout), and what a worker that went away died of.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace metaop {

using WorkerClock = std::chrono::steady_clock;

// Now plus the kernel timeout (--kernel-timeout); time_point::max() when there is no limit.
WorkerClock::time_point worker_deadline();

enum class Io { Ok, Closed, Timeout };

// Waits until fd is ready for `events` (POLLIN, POLLOUT) or the deadline passes (false).
bool wait_fd(int fd, short events, WorkerClock::time_point deadline);
// Whole buffers over a stream socket; Closed when the other end went away.
Io send_all(int fd, const void* data, std::size_t n, WorkerClock::time_point deadline);
Io recv_all(int fd, void* data, std::size_t n, WorkerClock::time_point deadline);

// Reaps a worker that closed its end: waits up to `grace_ms` for it to exit, then kills it.
// Returns how it ended, for messages: "crashed (Segmentation fault)", "exited with status 3".
std::string reap_worker(pid_t pid, int grace_ms = 1000);
// Kills a worker (SIGKILL) and reaps it.
void kill_worker(pid_t pid);

}  // namespace metaop
