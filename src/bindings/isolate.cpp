#include "bindings/isolate.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "bindings/isolate_wire.h"
#include "bindings/isolate_worker.h"
#include "bindings/worker_io.h"
#include "tensor/heap.h"

namespace metaop {

namespace {

std::atomic<Isolation> isolation_mode{Isolation::Process};

// How long a fresh worker may take to load its framework (LibTorch takes a second or two on a
// quiet machine, ten or more when the machine is busy).
constexpr int kWorkerStartSeconds = 300;

using namespace isolate;

// --- MetaOp's side: one worker per binding name

// MetaOp's record of the tensors its worker keeps (isolate_wire.h, kKeepFrom): by the address of
// their storage while it lives (a weak handle: the record does not keep memory alive), with the
// id the worker knows them by. A record is told to the worker, which then drops its copy (and
// frees the arena block of an output MetaOp read in place), with the first request after its
// tensor died, and never before. Kept bytes stay under a cap (a quarter of the memory budget):
// past it, tensors cross without being kept.
class KeptIndex {
 public:
  // The id the worker has `t` under, 0 if none.
  std::uint64_t find(const Tensor& t) const {
    auto at = by_data_.find(t.raw());
    if (at == by_data_.end()) return 0;
    const Entry& e = by_id_.at(at->second);
    auto live = t.storage();
    bool same = !e.owner.expired() && !e.owner.owner_before(live) && !live.owner_before(e.owner);
    if (!same || e.dtype != t.dtype() || e.bytes != t.nbytes()) return 0;
    return at->second;
  }
  // A fresh id to keep `t` under, 0 when it is small or the cap is reached.
  std::uint64_t reserve(const Tensor& t) {
    if (t.nbytes() < isolate::kKeepFrom || !room()) return 0;
    return next_++;
  }
  bool room() const { return bytes_ < cap_; }
  std::uint64_t next() const { return next_; }
  void add(std::uint64_t id, const Tensor& t) {
    next_ = std::max(next_, id + 1);
    // An older record at that address stays until its own tensor dies: only the lookup by
    // address is the new one's.
    by_data_[t.raw()] = id;
    bytes_ += t.nbytes();
    by_id_[id] = {t.storage(), t.raw(), t.dtype(), t.nbytes()};
  }
  // Ids of the tensors that died since the last call.
  std::vector<std::uint64_t> forget_dead() {
    std::vector<std::uint64_t> dead;
    for (auto it = by_id_.begin(); it != by_id_.end();) {
      if (!it->second.owner.expired()) {
        ++it;
        continue;
      }
      dead.push_back(it->first);
      bytes_ -= it->second.bytes;
      auto at = by_data_.find(it->second.data);
      if (at != by_data_.end() && at->second == it->first) by_data_.erase(at);
      it = by_id_.erase(it);
    }
    return dead;
  }
  // A new worker has nothing.
  void clear() {
    by_id_.clear();
    by_data_.clear();
    bytes_ = 0;
    cap_ = static_cast<std::size_t>(std::max<std::int64_t>(memory_budget() / 4, 0));
  }
  std::size_t cap() const { return cap_; }

 private:
  struct Entry {
    std::weak_ptr<const std::byte[]> owner;
    const std::byte* data = nullptr;
    DType dtype = DType::Float32;
    std::size_t bytes = 0;
  };
  std::unordered_map<std::uint64_t, Entry> by_id_;
  std::unordered_map<const std::byte*, std::uint64_t> by_data_;
  std::size_t bytes_ = 0, cap_ = 0;
  std::uint64_t next_ = 1;
};

std::size_t page_size() {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// The smallest arena a worker gets (a tight `ulimit -v`: address_space_problem() refuses less
// than 32 times this).
constexpr std::size_t kMinArena = std::size_t{16} << 20;

// MetaOp's side of a worker's arena (isolate_wire.h): its mapping, which lives as long as a
// tensor over one of its blocks does, the worker's life or not. MetaOp checks that no two of the
// tensors it holds share bytes (a worker whose heap a kernel broke might hand out a block twice).
// Once the worker that allocated the blocks is gone, the memory of each block goes back to the
// system as soon as no tensor is over it.
class ArenaHold : public std::enable_shared_from_this<ArenaHold> {
 public:
  ArenaHold(int fd, std::size_t reserve) : arena_(fd, reserve, true) {}
  int fd() const { return arena_.fd(); }
  std::size_t reserved() const { return arena_.reserved(); }

  // A tensor over the arena's bytes at `off`.
  Tensor view(std::uint64_t off, DType dtype, const Shape& shape) {
    auto n = static_cast<std::size_t>(shape_nbytes(shape, dtype));
    std::lock_guard<std::mutex> lock(mutex_);
    if (off > arena_.reserved() || n == 0 || n > arena_.reserved() - off || !mapped(off + n))
      throw Error("isolated kernel: malformed message (tensor past the arena)");
    auto next = live_.lower_bound(off);
    bool overlaps =
        (next != live_.end() && next->first < off + n) ||
        (next != live_.begin() && std::prev(next)->first + std::prev(next)->second > off);
    if (overlaps) throw Error("isolated kernel: the worker wrote an output over a tensor in use");
    live_[off] = n;
    auto* p = reinterpret_cast<std::byte*>(arena_.base() + off);
    std::shared_ptr<std::byte[]> storage(
        p, [self = shared_from_this(), off](std::byte*) { self->release(off); });
    return Tensor::over(dtype, shape, std::move(storage));
  }

  // The worker is gone: the pages no tensor is over go back to the system now.
  void retire() {
    std::lock_guard<std::mutex> lock(mutex_);
    retired_ = true;
    std::size_t from = 0;
    for (const auto& [off, n] : live_) {
      punch(from, off);
      from = off + n;
    }
    punch(from, arena_.size());
  }

 private:
  // Maps the file as far as the worker grew it, if `end` is past the mapping.
  bool mapped(std::size_t end) {
    if (end <= arena_.size()) return true;
    struct stat st {};
    if (::fstat(arena_.fd(), &st) != 0 || static_cast<std::size_t>(st.st_size) < end) return false;
    return arena_.map_to(static_cast<std::size_t>(st.st_size));
  }
  void release(std::uint64_t off) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(off);
    if (it == live_.end()) return;
    if (retired_) punch(off, off + it->second);
    live_.erase(it);
  }
  // Gives back the whole pages within [from, to).
  void punch(std::size_t from, std::size_t to) {
    std::size_t page = page_size(), a = (from + page - 1) / page * page, b = to / page * page;
    if (a < b)
      ::fallocate(arena_.fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(a),
                  static_cast<off_t>(b - a));
  }

  Arena arena_;
  std::mutex mutex_;
  std::map<std::uint64_t, std::size_t> live_;  // offset -> bytes of the tensors over the arena
  bool retired_ = false;
};

// What a request sends after its kind and the records MetaOp dropped: the node or update call,
// and the lists of tensors, given the start count of the worker that will answer it.
using RequestHead =
    std::function<std::vector<const Tensors*>(Writer& w, std::uint64_t worker_start)>;

class Worker {
 public:
  explicit Worker(std::string name) : name_(std::move(name)) {}

  Tensors call(Binding& inner, char kind, std::uint8_t fault, const RequestHead& head,
               const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ <= 0) start(inner);
    Writer w;
    w.put(kind);
    w.put(fault);
    auto dead = kept_.forget_dead();
    w.put(static_cast<std::uint32_t>(dead.size()));
    for (auto id : dead) w.put(id);
    w.put(static_cast<std::uint32_t>(dropped_updates_.size()));
    for (auto id : dropped_updates_) w.put(id);
    dropped_updates_.clear();
    auto lists = head(w, starts_);
    std::vector<std::pair<std::uint64_t, const Tensor*>> sent;
    put_tensors(w, region_, lists, [&](const Tensor& t) {
      Crossing c{0, kept_.find(t)};
      if (c.kept) return c;
      sent_bytes_ += t.nbytes();
      c.keep = kept_.reserve(t);
      if (c.keep) sent.emplace_back(c.keep, &t);
      return c;
    });
    for (const auto& [id, t] : sent) kept_.add(id, *t);
    // The ids the worker keeps its large outputs under start here (0: keep none).
    w.put(kept_.room() ? kept_.next() : std::uint64_t{0});
    return exchange(w, what);
  }

  // The worker may drop update kernel `id` (IsolatedUpdate) with the next request.
  void drop_update(std::uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pid_ > 0) dropped_updates_.push_back(id);
  }

  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    close_link();
  }

  std::uint64_t starts() const { return starts_; }
  std::uint64_t sent_bytes() const { return sent_bytes_; }
  std::uint64_t in_place_bytes() const { return in_place_bytes_; }

 private:
  // Sends the request, reads the answer.
  Tensors exchange(Writer& w, const std::string& what) {
    auto deadline = worker_deadline();
    Io io = send_frame(sock_, w.buffer(), deadline);
    std::string body;
    if (io == Io::Ok) read_frame(sock_, body, deadline, io);
    if (io == Io::Timeout) hang(what);
    if (io == Io::Closed) died(what);
    Reader rd(body);
    char k = rd.get<char>();
    if (k != 'O') {
      std::string msg = rd.str();
      if (k == 'U') throw Unsupported(msg);
      if (k == 'H') throw Hang(msg);
      if (k == 'C') throw Crash(msg);
      if (k == 'N') throw BindingUnavailable(msg);
      throw Error(msg);
    }
    auto peak = rd.get<std::int64_t>();
    std::int64_t level = heap_in_use();
    std::vector<std::pair<std::uint64_t, Tensor>> kept_outputs;
    auto out = get_tensors(rd, region_, {}, &kept_outputs,
                           [&](std::uint64_t off, DType dtype, const Shape& shape) {
                             Tensor t = arena_->view(off, dtype, shape);
                             in_place_bytes_ += t.nbytes();
                             return t;
                           });
    for (const auto& [id, t] : kept_outputs) kept_.add(id, t);
    raise_heap_peak(level + peak);
    return out.empty() ? Tensors{} : std::move(out[0]);
  }

  void start(Binding& inner) {
    int sv[2];
    try {
      if (region_.fd < 0) {
        region_.fd = ::memfd_create(("metaop-" + name_).c_str(), MFD_CLOEXEC);
        if (region_.fd < 0) fail("memfd_create failed: {}", std::strerror(errno));
        region_.grow(std::size_t{8} << 20);
      }
      kept_.clear();
      dropped_updates_.clear();
      new_arena();
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        fail("socketpair failed: {}", std::strerror(errno));
    } catch (const Error& e) {
      // The machine's limits (memory, file descriptors, address space), not a kernel's fault.
      throw BindingUnavailable(
          fmt::format("binding '{}' cannot start its worker process: {}", name_, e.what()));
    }
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(sv[0]);
      ::close(sv[1]);
      throw BindingUnavailable(
          fmt::format("binding '{}' cannot start its worker process: fork failed: {}", name_,
                      std::strerror(errno)));
    }
    if (pid == 0) become_worker(inner, parent, sv);
    ::close(sv[1]);
    sock_ = sv[0];
    pid_ = pid;
    ++starts_;
    await_ready();
  }

  // The worker's first frame says it has prepared its binding (loaded the framework): within
  // kWorkerStartSeconds however short the kernel timeout, so that a framework's start-up on a
  // busy machine is never taken for a hanging kernel. A binding that could not prepare answers
  // with its error, which the first call then reports.
  void await_ready() {
    auto deadline = WorkerClock::now() + std::chrono::seconds(kWorkerStartSeconds);
    std::string body;
    Io io = Io::Ok;
    read_frame(sock_, body, deadline, io);
    std::string what = fmt::format("{}'s worker", name_);
    if (io == Io::Timeout) {
      kill_worker(pid_);
      pid_ = -1;
      ::close(sock_);
      sock_ = -1;
      throw Hang(fmt::format("{} did not start within {} s", what, kWorkerStartSeconds));
    }
    if (io == Io::Closed) died(what + " starting");
    Reader rd(body);
    if (rd.get<char>() != 'R') {
      std::string msg = rd.str();
      close_link();
      throw BindingUnavailable(fmt::format("binding '{}' cannot start: {}", name_, msg));
    }
  }

  // A fresh worker gets a fresh arena; the tensors over the last one keep it while they live.
  void new_arena() {
    if (arena_) arena_->retire();
    int fd = ::memfd_create(("metaop-" + name_ + "-arena").c_str(), MFD_CLOEXEC);
    if (fd < 0) fail("memfd_create failed: {}", std::strerror(errno));
    // Twice what the worker may keep: room for the blocks and the gaps between them. Under an
    // address-space limit (ulimit -v), a quarter of what it leaves: MetaOp maps the arena once,
    // the worker twice, and the framework needs the rest. A smaller arena only means fewer
    // outputs read in place (the others cross through the region).
    std::size_t reserve = std::max(2 * kept_.cap(), std::size_t{64} << 20);
    reserve = std::max(std::min(reserve, address_space_left() / 4), kMinArena);
    reserve = reserve / page_size() * page_size();
    arena_ = std::make_shared<ArenaHold>(fd, reserve);
  }

  [[noreturn]] void become_worker(Binding& inner, pid_t parent, const int sv[2]) {
    // The worker dies with MetaOp; Ctrl-C is MetaOp's to handle.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(0);
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGPIPE, SIG_IGN);
    // A framework's crash ends its worker plainly, whatever handlers were installed.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
    ::close(sv[0]);
    // Only its own link, region and arena stay open: other workers' sockets, inherited, would
    // keep them from seeing MetaOp close its end.
    std::vector<int> keep{sv[1], region_.fd, arena_->fd()};
    std::sort(keep.begin(), keep.end());
    unsigned from = 3;
    for (int fd : keep) {
      if (static_cast<unsigned>(fd) > from) ::close_range(from, static_cast<unsigned>(fd) - 1, 0);
      from = static_cast<unsigned>(fd) + 1;
    }
    ::close_range(from, ~0u, 0);
    Writer ready;
    try {
      inner.prepare();
      ready.put('R');
    } catch (const std::exception& e) {
      ready.put('E');
      ready.str(e.what());
    }
    if (send_frame(sv[1], ready.buffer(), WorkerClock::time_point::max()) != Io::Ok) _exit(0);
    try {
      serve(inner, sv[1], region_, arena_->fd(), arena_->reserved());
    } catch (const std::exception& e) {
      // Never back into MetaOp's code in this forked copy: the worker ends, and MetaOp sees it
      // die (its arena could not be mapped, say).
      fmt::print(stderr, "metaop: {}'s worker: {}\n", name_, e.what());
      _exit(3);
    }
  }

  void close_link() {
    if (sock_ >= 0) ::close(sock_);  // the worker sees the end of its input and exits
    sock_ = -1;
    if (pid_ > 0) reap_worker(pid_, 500);
    pid_ = -1;
  }

  [[noreturn]] void hang(const std::string& what) {
    kill_worker(pid_);
    pid_ = -1;
    ::close(sock_);
    sock_ = -1;
    throw Hang(fmt::format(
        "{}: the kernel did not finish within {:g} s (--kernel-timeout); its worker was killed",
        what, kernel_timeout()));
  }

  [[noreturn]] void died(const std::string& what) {
    ::close(sock_);
    sock_ = -1;
    std::string how = reap_worker(pid_);
    pid_ = -1;
    if (how.starts_with("crashed"))
      throw Crash(fmt::format("{}: the kernel {} in its worker process", what, how));
    throw Crash(fmt::format("{}: the kernel's worker process {}", what, how));
  }

  std::string name_;
  std::mutex mutex_;
  pid_t pid_ = -1;
  int sock_ = -1;
  Region region_;
  std::shared_ptr<ArenaHold> arena_;
  KeptIndex kept_;
  std::vector<std::uint64_t> dropped_updates_;
  std::uint64_t starts_ = 0, sent_bytes_ = 0, in_place_bytes_ = 0;
};

std::mutex pool_mutex;
// Never destroyed: workers outlive static destruction and end when MetaOp's process does.
std::map<std::string, Worker*>& pool() {
  static auto* p = new std::map<std::string, Worker*>();
  return *p;
}

Worker& worker_for(const std::string& name) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  Worker*& w = pool()[name];
  if (!w) w = new Worker(name);
  return *w;
}

}  // namespace

void set_isolation(Isolation mode) {
  isolation_mode = mode;
}

std::size_t address_space_left() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY)
    return std::numeric_limits<std::size_t>::max();
  std::size_t pages = 0;  // the first field of statm: the address space mapped now, in pages
  std::ifstream("/proc/self/statm") >> pages;
  std::size_t used = pages * page_size();
  return lim.rlim_cur > used ? lim.rlim_cur - used : 0;
}

std::string address_space_problem() {
  // MetaOp's BLAS (OpenBLAS) takes a buffer of 128 MiB per thread and, refused one, retries
  // for ever: under such a limit even a reference run would hang.
  constexpr std::size_t kNeeded = std::size_t{512} << 20;
  std::size_t left = address_space_left();
  if (left >= kNeeded) return {};
  rlimit lim{};
  ::getrlimit(RLIMIT_AS, &lim);
  return fmt::format(
      "the address-space limit (ulimit -v, {}) leaves {}; MetaOp needs at least {} (its BLAS "
      "library alone takes 134 MB per thread); raise the limit",
      format_bytes(static_cast<std::int64_t>(lim.rlim_cur)),
      format_bytes(static_cast<std::int64_t>(left)),
      format_bytes(static_cast<std::int64_t>(kNeeded)));
}

Isolation isolation() {
  return isolation_mode;
}

IsolatedBinding::IsolatedBinding(std::unique_ptr<Binding> inner)
    : inner_(std::move(inner)), name_(inner_->name()) {}

Support IsolatedBinding::supports(const std::string& op_type) const {
  return inner_->supports(op_type);
}

namespace {

// The head of a node's request: the node, the opset, then its lists of tensors.
RequestHead node_head(const Node& node, std::int64_t opset, std::vector<const Tensors*> lists) {
  return [&node, opset, lists = std::move(lists)](Writer& w, std::uint64_t) {
    put_node(w, node);
    w.put(opset);
    return lists;
  };
}

}  // namespace

Tensors IsolatedBinding::forward(const Node& node, std::int64_t opset, const Tensors& inputs) {
  return worker_for(name_).call(*inner_, 'F', kNoFault, node_head(node, opset, {&inputs}),
                                node.label() + ": " + name_);
}

Tensors IsolatedBinding::backward(const Node& node, std::int64_t opset, const Tensors& inputs,
                                  const Tensors& outputs, const Tensors& output_grads) {
  return worker_for(name_).call(*inner_, 'B', kNoFault,
                                node_head(node, opset, {&inputs, &outputs, &output_grads}),
                                node.label() + ": " + name_ + " backward");
}

Tensors IsolatedBinding::forward_with_fault(const std::string& fault, const Node& node,
                                            std::int64_t opset, const Tensors& inputs) {
  return worker_for(name_).call(*inner_, 'F', fault_code(fault), node_head(node, opset, {&inputs}),
                                node.label() + ": " + name_);
}

namespace {

std::atomic<std::uint64_t> next_update_id{1};

}  // namespace

IsolatedUpdate::IsolatedUpdate(std::unique_ptr<Binding> binding, OptimizerConfig c)
    : binding_(std::move(binding)),
      name_(binding_->name()),
      c_(std::move(c)),
      id_(next_update_id++) {
  validate(c_);
}

IsolatedUpdate::~IsolatedUpdate() {
  worker_for(name_).drop_update(id_);
}

Tensors IsolatedUpdate::call(std::uint8_t fault, const std::string& weight, long t,
                             const Tensors* wg, const Saved* set_to) {
  static const Tensors none;
  std::string what =
      fmt::format("update of weight '{}': {} optimizer ({})", weight, name_, c_.kind);
  Tensors out;
  try {
    out = worker_for(name_).call(
        *binding_, 'U', fault,
        [&](Writer& w, std::uint64_t worker) -> std::vector<const Tensors*> {
          if (worker != worker_) in_worker_.clear();  // a fresh worker: it has no state
          worker_ = worker;
          const Saved* from = set_to;
          auto saved = saved_.find(weight);
          if (!from && !in_worker_.contains(weight) && saved != saved_.end()) from = &saved->second;
          std::uint8_t does = (wg ? kStep : 0) | (from ? kSetState : 0);
          w.put(id_);
          put_optimizer(w, c_);
          w.str(weight);
          w.put(static_cast<std::int64_t>(t));
          w.put(does);
          w.put(static_cast<std::int64_t>(from ? from->t : 0));
          return {wg ? wg : &none, from ? &from->slots : &none};
        },
        what);
  } catch (...) {
    in_worker_.erase(weight);  // what the worker holds now is unknown: sent again next time
    throw;
  }
  in_worker_.insert(weight);
  return out;
}

Tensor IsolatedUpdate::step(const std::string& weight, long t, const Tensor& w, const Tensor& g) {
  return step_with_fault("", weight, t, w, g);
}

Tensor IsolatedUpdate::step_with_fault(const std::string& fault, const std::string& weight, long t,
                                       const Tensor& w, const Tensor& g) {
  Tensors wg{w, g};
  Tensors out =
      call(fault.empty() ? std::uint8_t{kNoFault} : fault_code(fault), weight, t, &wg, nullptr);
  if (out.empty() || !out[0].defined())
    throw Error(fmt::format("{} optimizer on weight '{}': no new weight", name_, weight));
  saved_[weight] = {t, Tensors(out.begin() + 1, out.end())};
  return out[0];
}

Tensors IsolatedUpdate::state(const std::string& weight) const {
  auto it = saved_.find(weight);
  return it == saved_.end() ? Tensors{} : it->second.slots;
}

void IsolatedUpdate::set_state(const std::string& weight, long t, const Tensors& slots) {
  Saved s{t, slots};
  call(kNoFault, weight, t, nullptr, &s);
  saved_[weight] = std::move(s);
}

std::uint64_t worker_in_place_bytes(const std::string& binding) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  auto it = pool().find(binding);
  return it == pool().end() ? 0 : it->second->in_place_bytes();
}

std::unique_ptr<Binding> isolated(std::unique_ptr<Binding> b) {
  if (isolation() == Isolation::None) return b;
  return std::make_unique<IsolatedBinding>(std::move(b));
}

void stop_workers() {
  std::lock_guard<std::mutex> lock(pool_mutex);
  for (auto& [name, w] : pool()) w->stop();
}

std::uint64_t worker_starts(const std::string& binding) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  auto it = pool().find(binding);
  return it == pool().end() ? 0 : it->second->starts();
}

std::uint64_t worker_sent_bytes(const std::string& binding) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  auto it = pool().find(binding);
  return it == pool().end() ? 0 : it->second->sent_bytes();
}

}  // namespace metaop
