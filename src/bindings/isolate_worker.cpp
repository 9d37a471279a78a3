#include "bindings/isolate_worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <new>
#include <unordered_map>

#include "bindings/isolate.h"
#include "bindings/update_kernel.h"
#include "tensor/heap.h"

namespace metaop::isolate {

// --- the worker's side

namespace {

// The worker's copies of tensors MetaOp sent or it made (isolate_wire.h), by id.
class Kept {
 public:
  void forget(Reader& rd) {
    auto n = rd.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < n; ++i) by_id_.erase(rd.get<std::uint64_t>());
  }
  Tensor find(std::uint64_t id, DType dtype, const Shape& shape) const {
    auto it = by_id_.find(id);
    if (it == by_id_.end() || it->second.dtype() != dtype) return {};
    if (it->second.shape() == shape) return it->second;
    if (shape_numel(shape) != it->second.numel()) return {};
    return it->second.reshaped(shape);
  }
  void add(std::uint64_t id, Tensor t) { by_id_[id] = std::move(t); }

 private:
  std::unordered_map<std::uint64_t, Tensor> by_id_;
};

std::size_t page_size() {
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

std::size_t whole_pages(std::size_t n) {
  return (n + page_size() - 1) / page_size() * page_size();
}

// The blocks of the worker's arena (isolate_wire.h): whole pages, the smallest free block that
// fits, the arena grown (4 MiB at a time) when none does. A block returns when the last tensor
// over it in the worker dies, which is after MetaOp told that its own tensor over it died.
// The worker maps the arena twice: read-only for the tensors over its blocks (kernels get those
// as inputs: one writing into or past them crashes instead of changing a tensor MetaOp reads in
// place), writable only where outputs are copied in.
class ArenaBlocks {
 public:
  ArenaBlocks(int fd, std::size_t reserve)
      : write_(fd, reserve, false), read_(::dup(fd), reserve, false, false) {}

  // A copy of `t` in a block, or an undefined tensor when the arena is full; its offset in `at`.
  Tensor copy_in(const Tensor& t, std::uint64_t& at) {
    std::size_t n = t.nbytes();
    at = take(n);
    if (at == kNowhere) return {};
    std::memcpy(write_.base() + at, t.raw(), n);
    auto* p = reinterpret_cast<std::byte*>(read_.base() + at);
    std::shared_ptr<std::byte[]> storage(p, [this, off = at, n](std::byte*) { give_back(off, n); });
    return Tensor::over(t.dtype(), t.shape(), std::move(storage));
  }

 private:
  // The offset of a block of at least n bytes; kNowhere when the arena is full.
  std::uint64_t take(std::size_t n) {
    n = whole_pages(n);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= n && (best == free_.end() || it->second < best->second)) best = it;
    if (best != free_.end()) {
      auto [off, len] = *best;
      free_.erase(best);
      if (len > n) free_[off + n] = len - n;
      return off;
    }
    constexpr std::size_t kStep = std::size_t{4} << 20;
    std::size_t want = std::min((top_ + n + kStep - 1) / kStep * kStep, write_.reserved());
    if (top_ + n > want || !write_.grow_to(want) || !read_.map_to(want)) return kNowhere;
    std::uint64_t off = top_;
    top_ += n;
    return off;
  }

  void give_back(std::uint64_t off, std::size_t n) {
    n = whole_pages(n);
    auto next = free_.lower_bound(off);
    if (next != free_.end() && next->first == off + n) {
      n += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        off = prev->first;
        n += prev->second;
        free_.erase(prev);
      }
    }
    if (off + n == top_) {
      top_ = off;
      return;
    }
    free_[off] = n;
  }

  Arena write_, read_;
  std::map<std::uint64_t, std::size_t> free_;  // offset -> bytes
  std::uint64_t top_ = 0;
};

// Everything a worker holds across requests.
struct WorkerState {
  Binding& binding;
  Region region;
  ArenaBlocks blocks;
  Kept kept;
  // Update kernels (train's optimizers) by MetaOp's id for them (IsolatedUpdate).
  std::unordered_map<std::uint64_t, std::unique_ptr<UpdateKernel>> updates;
};

// The request's tensors, those MetaOp asked to keep kept.
std::vector<Tensors> get_inputs(Reader& rd, WorkerState& w) {
  std::vector<std::pair<std::uint64_t, Tensor>> to_keep;
  std::vector<Tensors> in = get_tensors(
      rd, w.region,
      [&](std::uint64_t id, DType dtype, const Shape& shape) {
        return w.kept.find(id, dtype, shape);
      },
      &to_keep);
  for (auto& [id, t] : to_keep) w.kept.add(id, std::move(t));
  return in;
}

// The outputs into the reply: large ones (`keep_from` non-zero) kept under ids from keep_from on,
// in order, and written in the arena, where MetaOp reads them in place; the rest in the region.
void put_outputs(Writer& reply, WorkerState& w, const Tensors& out, std::uint64_t keep_from) {
  std::uint64_t id = keep_from;
  put_tensors(reply, w.region, {&out}, [&](const Tensor& t) {
    Crossing c;
    if (!keep_from || t.nbytes() < kKeepFrom) return c;
    c.keep = id++;
    Tensor placed = w.blocks.copy_in(t, c.at);
    w.kept.add(c.keep, placed.defined() ? placed : t);
    return c;
  });
}

void commit_fault(std::uint8_t fault) {
  if (fault == kSegv) commit_planted_fault("segv");
  if (fault == kAbort) commit_planted_fault("abort");
  if (fault == kHang) commit_planted_fault("hang");
}

// A node's forward ('F') or backward ('B').
void run_node(Reader& rd, Writer& reply, WorkerState& w, char kind, std::uint8_t fault) {
  Node node = get_node(rd);
  auto opset = rd.get<std::int64_t>();
  std::vector<Tensors> in = get_inputs(rd, w);
  auto keep_from = rd.get<std::uint64_t>();
  commit_fault(fault);
  std::int64_t level = heap_in_use();
  reset_heap_peak();
  Tensors out;
  if (kind == 'F' && in.size() == 1) {
    out = w.binding.forward(node, opset, in[0]);
  } else if (kind == 'B' && in.size() == 3) {
    out = w.binding.backward(node, opset, in[0], in[1], in[2]);
  } else {
    throw Error("isolated kernel: malformed request");
  }
  std::int64_t peak = heap_peak() - level;
  in.clear();
  reply.put('O');
  reply.put(peak);
  put_outputs(reply, w, out, keep_from);
}

// An update kernel's call ('U', IsolatedUpdate): set the weight's state and/or step it. A step
// answers the new weight and the state after it.
void run_update(Reader& rd, Writer& reply, WorkerState& w, std::uint8_t fault) {
  auto id = rd.get<std::uint64_t>();
  OptimizerConfig c = get_optimizer(rd);
  std::string weight = rd.str();
  auto t = rd.get<std::int64_t>();
  auto what = rd.get<std::uint8_t>();
  auto state_t = rd.get<std::int64_t>();
  std::vector<Tensors> in = get_inputs(rd, w);
  auto keep_from = rd.get<std::uint64_t>();
  if (in.size() != 2 || (what & kStep && in[0].size() != 2))
    throw Error("isolated kernel: malformed request");
  auto& k = w.updates[id];
  if (!k) k = w.binding.update_kernel(c);
  if (!k) throw Error(fmt::format("isolated kernel: {} has no update kernel", w.binding.name()));
  if (what & kSetState) k->set_state(weight, state_t, in[1]);
  Tensors out;
  if (what & kStep) {
    commit_fault(fault);
    std::int64_t level = heap_in_use();
    reset_heap_peak();
    out = {k->step(weight, t, in[0][0], in[0][1])};
    for (auto& s : k->state(weight)) out.push_back(s);
    std::int64_t peak = heap_peak() - level;
    reply.put('O');
    reply.put(peak);
  } else {
    reply.put('O');
    reply.put(std::int64_t{0});
  }
  in.clear();
  put_outputs(reply, w, out, keep_from);
}

// One request: its answer in `reply`.
void answer(const std::string& body, Writer& reply, WorkerState& w) {
  Reader rd(body);
  char kind = rd.get<char>();
  auto fault = rd.get<std::uint8_t>();
  w.kept.forget(rd);
  auto dropped = rd.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < dropped; ++i) w.updates.erase(rd.get<std::uint64_t>());
  if (kind == 'U')
    run_update(rd, reply, w, fault);
  else
    run_node(rd, reply, w, kind, fault);
}

Writer failure(char kind, const std::string& msg) {
  Writer reply;
  reply.put(kind);
  reply.str(msg);
  return reply;
}

// The answer to a request, or what went wrong as a reply.
Writer answer_or_failure(const std::string& body, WorkerState& w) {
  try {
    Writer reply;
    answer(body, reply, w);
    return reply;
  } catch (const Hang& e) {
    return failure('H', e.what());
  } catch (const Crash& e) {
    return failure('C', e.what());
  } catch (const Unsupported& e) {
    return failure('U', e.what());
  } catch (const BindingUnavailable& e) {
    return failure('N', e.what());
  } catch (const std::bad_alloc&) {
    return failure('E',
                   fmt::format("out of memory (an allocation of {} refused; memory budget {})",
                               format_bytes(refused_allocation()), format_bytes(memory_budget())));
  } catch (const std::exception& e) {
    return failure('E', e.what());
  } catch (...) {
    return failure('E', "the kernel threw an exception that is not a std::exception");
  }
}

}  // namespace

[[noreturn]] void serve(Binding& b, int sock, Region region, int arena_fd,
                        std::size_t arena_reserve) {
  set_heap_poison(true);
  // The worker maps the arena twice, after its framework started (which can take hundreds of MB
  // of addresses): under an address-space limit, within a third of what is left. Its blocks then
  // end below MetaOp's reservation, which maps them all; a full arena sends outputs through the
  // region instead.
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  arena_reserve = std::min(arena_reserve, address_space_left() / 3) / page * page;
  WorkerState w{b, region, ArenaBlocks(arena_fd, std::max(arena_reserve, page)), {}, {}};
  std::string body;
  for (;;) {
    Io io;
    if (!read_frame(sock, body, WorkerClock::time_point::max(), io)) _exit(0);
    Writer reply = answer_or_failure(body, w);
    if (send_frame(sock, reply.buffer(), WorkerClock::time_point::max()) != Io::Ok) _exit(0);
  }
}

}  // namespace metaop::isolate
