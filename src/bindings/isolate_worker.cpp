#include "bindings/isolate_worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <new>

#include "bindings/isolate.h"
#include "tensor/heap.h"

namespace metaop::isolate {

// --- the worker's side

[[noreturn]] void serve(Binding& b, int sock, Region region) {
  set_heap_poison(true);
  std::string body;
  for (;;) {
    Io io;
    if (!read_frame(sock, body, WorkerClock::time_point::max(), io)) _exit(0);
    Writer reply;
    try {
      Reader rd(body);
      char kind = rd.get<char>();
      auto fault = rd.get<std::uint8_t>();
      Node node = get_node(rd);
      auto opset = rd.get<std::int64_t>();
      std::vector<Tensors> in = get_tensors(rd, region);
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
      put_tensors(reply, region, {&out});
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
