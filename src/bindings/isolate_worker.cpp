#include "bindings/isolate_worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <new>
#include <unordered_map>

#include "bindings/isolate.h"
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

}  // namespace

[[noreturn]] void serve(Binding& b, int sock, Region region) {
  set_heap_poison(true);
  Kept kept;
  std::string body;
  for (;;) {
    Io io;
    if (!read_frame(sock, body, WorkerClock::time_point::max(), io)) _exit(0);
    Writer reply;
    try {
      Reader rd(body);
      char kind = rd.get<char>();
      auto fault = rd.get<std::uint8_t>();
      kept.forget(rd);
      Node node = get_node(rd);
      auto opset = rd.get<std::int64_t>();
      std::vector<std::pair<std::uint64_t, Tensor>> to_keep;
      std::vector<Tensors> in = get_tensors(
          rd, region,
          [&](std::uint64_t id, DType dtype, const Shape& shape) {
            return kept.find(id, dtype, shape);
          },
          &to_keep);
      for (auto& [id, t] : to_keep) kept.add(id, std::move(t));
      auto keep_from = rd.get<std::uint64_t>();
      if (fault == kSegv) commit_planted_fault("segv");
      if (fault == kAbort) commit_planted_fault("abort");
      if (fault == kHang) commit_planted_fault("hang");
      std::int64_t level = heap_in_use();
      reset_heap_peak();
      Tensors out;
      if (kind == 'F' && in.size() == 1) {
        out = b.forward(node, opset, in[0]);
      } else if (kind == 'B' && in.size() == 3) {
        out = b.backward(node, opset, in[0], in[1], in[2]);
      } else {
        throw Error("isolated kernel: malformed request");
      }
      std::int64_t peak = heap_peak() - level;
      in.clear();
      reply.put('O');
      reply.put(peak);
      // Large outputs are kept under ids from keep_from on, in order (MetaOp reads them from
      // the headers).
      std::uint64_t id = keep_from;
      put_tensors(reply, region, {&out}, [&](const Tensor& t) {
        Crossing c;
        if (keep_from && t.nbytes() >= kKeepFrom) {
          c.keep = id++;
          kept.add(c.keep, t);
        }
        return c;
      });
    } catch (const Hang& e) {
      reply = Writer();
      reply.put('H');
      reply.str(e.what());
    } catch (const Crash& e) {
      reply = Writer();
      reply.put('C');
      reply.str(e.what());
    } catch (const Unsupported& e) {
      reply = Writer();
      reply.put('U');
      reply.str(e.what());
    } catch (const std::bad_alloc&) {
      reply = Writer();
      reply.put('E');
      reply.str(fmt::format("out of memory (an allocation of {} refused; memory budget {})",
                            format_bytes(refused_allocation()), format_bytes(memory_budget())));
    } catch (const std::exception& e) {
      reply = Writer();
      reply.put('E');
      reply.str(e.what());
    } catch (...) {
      reply = Writer();
      reply.put('E');
      reply.str("the kernel threw an exception that is not a std::exception");
    }
    if (send_frame(sock, reply.buffer(), WorkerClock::time_point::max()) != Io::Ok) _exit(0);
  }
}

}  // namespace metaop::isolate
