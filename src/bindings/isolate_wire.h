#pragma once
// The messages between MetaOp and the workers that run bindings isolated (isolate.h), both ends:
// frames on the socket carrying a node and small headers, the tensors themselves in a shared
// memory region. The caller's side is in isolate.cpp, the worker's loop in isolate_worker.cpp.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bindings/binding.h"
#include "bindings/worker_io.h"
#include "ops/optimizer.h"

namespace metaop::isolate {

// --- frames: small headers, host byte order (both ends are this binary on this machine)

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    buf_ += s;
  }
  void bytes(const void* p, std::size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string& buffer() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(const std::string& b) : buf_(b) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, buf_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    auto n = get<std::uint32_t>();
    need(n);
    std::string s = buf_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  const char* take(std::size_t n) {
    need(n);
    const char* p = buf_.data() + pos_;
    pos_ += n;
    return p;
  }

 private:
  void need(std::size_t n) const {
    if (n > buf_.size() - pos_) throw Error("isolated kernel: malformed message (truncated)");
  }
  const std::string& buf_;
  std::size_t pos_ = 0;
};

// A node: its names, inputs, outputs and attributes (attribute tensors inline).
void put_node(Writer& w, const Node& n);
Node get_node(Reader& r);

// --- the shared region: a memfd mapped by both processes; either side may grow it (the other
// remaps when a message carries a larger size).

struct Region {
  int fd = -1;
  char* base = nullptr;
  std::size_t size = 0;

  void map(std::size_t new_size);
  void grow(std::size_t need);
};

// The arena: where a worker writes the outputs MetaOp reads in place (those it keeps, below), in
// blocks the worker allocates and frees. A memfd mapped at one address for the arena's whole life
// (a range of addresses reserved up front, the mapping extended into it as the file grows), so
// that a tensor over one of its blocks stays valid for as long as it lives, whatever the arena
// does meanwhile. Each side maps it on its own: MetaOp's mapping is not inherited by the
// processes it forks (MADV_DONTFORK), a worker maps its arena after the fork.
class Arena {
 public:
  // Takes `fd`; maps the file as far as it goes (nothing yet for a new one), read-only unless
  // `writable`.
  Arena(int fd, std::size_t reserve, bool dont_fork, bool writable = true);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  int fd() const { return fd_; }
  char* base() const { return base_; }
  std::size_t size() const { return size_; }
  std::size_t reserved() const { return reserve_; }
  // Maps the file up to `size` (the other side grew it); false past the reservation.
  bool map_to(std::size_t size);
  // Grows the file to `size` and maps it; false past the reservation or when it cannot grow.
  bool grow_to(std::size_t size);

 private:
  int fd_ = -1;
  char* base_ = nullptr;
  std::size_t size_ = 0, reserve_ = 0;
  bool dont_fork_ = false, writable_ = true;
};

// Tensors of 64 kB and more may be kept by the receiving side under an id, so that a tensor used
// again (a model's weights at every run, an activation a worker made and the next node reads)
// crosses once. How one tensor crosses: its bytes in the region, `keep` (non-zero) asking the
// receiver to keep a copy under that id; or, with `kept` non-zero, only its dtype and shape, the
// receiver having its bytes under that id already.
// A kept output the worker wrote in its arena crosses as the block's offset, and MetaOp reads
// it in place (`at`).
constexpr std::size_t kKeepFrom = std::size_t{64} << 10;
constexpr std::uint64_t kNowhere = ~std::uint64_t{0};
struct Crossing {
  std::uint64_t keep = 0, kept = 0, at = kNowhere;
};
using CrossingRule = std::function<Crossing(const Tensor&)>;
// The receiver's copies by id: the tensor under `id` with `dtype` and `shape` (its bytes, maybe
// reshaped), or an undefined one when it has none.
using KeptLookup = std::function<Tensor(std::uint64_t id, DType dtype, const Shape& shape)>;
// The tensor with `dtype` and `shape` over the arena's bytes at `offset` (MetaOp's side).
using ArenaView = std::function<Tensor(std::uint64_t offset, DType dtype, const Shape& shape)>;

// Tensors laid out in the region from offset 0, each as `how` says (all in the region without
// it); their headers go into the frame.
void put_tensors(Writer& w, Region& r, const std::vector<const Tensors*>& lists,
                 const CrossingRule& how = {});
// The tensors of a frame, copied out of the region; kept ones found with `find`, those in the
// arena read in place with `view`. Those the sender asked to keep are appended to `keep` with
// their id.
std::vector<Tensors> get_tensors(Reader& rd, Region& r, const KeptLookup& find = {},
                                 std::vector<std::pair<std::uint64_t, Tensor>>* keep = nullptr,
                                 const ArenaView& view = {});

// A frame: its length, then its body; false (and `io` says why) when it did not come whole.
bool read_frame(int fd, std::string& body, WorkerClock::time_point deadline, Io& io);
Io send_frame(int fd, std::string& body, WorkerClock::time_point deadline);

// The fault a request plants where the kernel would run (IsolatedBinding::forward_with_fault).
enum : std::uint8_t { kNoFault = 0, kSegv = 1, kAbort = 2, kHang = 3 };

// An update kernel's call (IsolatedUpdate): what it does, its optimizer's hyperparameters.
enum : std::uint8_t { kStep = 1, kSetState = 2 };
void put_optimizer(Writer& w, const OptimizerConfig& c);
OptimizerConfig get_optimizer(Reader& r);

std::uint8_t fault_code(const std::string& fault);

}  // namespace metaop::isolate
