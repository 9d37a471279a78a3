#include "bindings/isolate_wire.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tensor/heap.h"

namespace metaop::isolate {

namespace {

Shape get_shape(Reader& r) {
  auto rank = r.get<std::uint32_t>();
  if (rank > kMaxRank) throw Error("isolated kernel: malformed message (rank)");
  Shape s(rank);
  for (auto& d : s) d = r.get<std::int64_t>();
  return s;
}

void put_shape(Writer& w, const Shape& s) {
  w.put(static_cast<std::uint32_t>(s.size()));
  for (auto d : s) w.put(d);
}

// A tensor inline (attribute values: small).
void put_inline(Writer& w, const Tensor& t) {
  w.put(static_cast<std::uint8_t>(t.defined()));
  if (!t.defined()) return;
  w.put(static_cast<std::uint8_t>(t.dtype()));
  put_shape(w, t.shape());
  w.bytes(t.raw(), t.nbytes());
}

Tensor get_inline(Reader& r) {
  if (!r.get<std::uint8_t>()) return Tensor();
  auto dtype = static_cast<DType>(r.get<std::uint8_t>());
  Shape s = get_shape(r);
  Tensor t = Tensor::empty(dtype, s);
  std::memcpy(t.raw(), r.take(t.nbytes()), t.nbytes());
  return t;
}

}  // namespace

void put_node(Writer& w, const Node& n) {
  w.str(n.name);
  w.str(n.op_type);
  w.str(n.domain);
  for (const auto* list : {&n.inputs, &n.outputs}) {
    w.put(static_cast<std::uint32_t>(list->size()));
    for (const auto& s : *list) w.str(s);
  }
  w.put(static_cast<std::uint32_t>(n.attrs.size()));
  for (const auto& [name, a] : n.attrs) {
    w.str(name);
    w.put(static_cast<std::uint8_t>(a.kind));
    switch (a.kind) {
      case Attribute::Kind::Int:
        w.put(a.i);
        break;
      case Attribute::Kind::Float:
        w.put(a.f);
        break;
      case Attribute::Kind::String:
        w.str(a.s);
        break;
      case Attribute::Kind::Tensor:
        put_inline(w, a.t);
        break;
      case Attribute::Kind::Ints:
        w.put(static_cast<std::uint32_t>(a.ints.size()));
        for (auto v : a.ints) w.put(v);
        break;
      case Attribute::Kind::Floats:
        w.put(static_cast<std::uint32_t>(a.floats.size()));
        for (auto v : a.floats) w.put(v);
        break;
      case Attribute::Kind::Strings:
        w.put(static_cast<std::uint32_t>(a.strings.size()));
        for (const auto& v : a.strings) w.str(v);
        break;
      case Attribute::Kind::Unsupported:
        w.str(a.unsupported_type);
        break;
    }
  }
}

Node get_node(Reader& r) {
  Node n;
  n.name = r.str();
  n.op_type = r.str();
  n.domain = r.str();
  for (auto* list : {&n.inputs, &n.outputs}) {
    auto k = r.get<std::uint32_t>();
    for (std::uint32_t i = 0; i < k; ++i) list->push_back(r.str());
  }
  auto k = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < k; ++i) {
    std::string name = r.str();
    Attribute a;
    a.kind = static_cast<Attribute::Kind>(r.get<std::uint8_t>());
    switch (a.kind) {
      case Attribute::Kind::Int:
        a.i = r.get<std::int64_t>();
        break;
      case Attribute::Kind::Float:
        a.f = r.get<double>();
        break;
      case Attribute::Kind::String:
        a.s = r.str();
        break;
      case Attribute::Kind::Tensor:
        a.t = get_inline(r);
        break;
      case Attribute::Kind::Ints:
        a.ints.resize(r.get<std::uint32_t>());
        for (auto& v : a.ints) v = r.get<std::int64_t>();
        break;
      case Attribute::Kind::Floats:
        a.floats.resize(r.get<std::uint32_t>());
        for (auto& v : a.floats) v = r.get<double>();
        break;
      case Attribute::Kind::Strings:
        a.strings.resize(r.get<std::uint32_t>());
        for (auto& v : a.strings) v = r.str();
        break;
      case Attribute::Kind::Unsupported:
        a.unsupported_type = r.str();
        break;
    }
    n.attrs[name] = std::move(a);
  }
  return n;
}

namespace {

constexpr std::size_t align64(std::size_t n) {
  return (n + 63) & ~std::size_t{63};
}

}  // namespace

void Region::map(std::size_t new_size) {
  if (base && new_size == size) return;
  if (base) ::munmap(base, size);
  base = nullptr;
  void* p = ::mmap(nullptr, new_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail("isolated kernel: mapping {} of shared memory failed", new_size);
  base = static_cast<char*>(p);
  size = new_size;
}

void Region::grow(std::size_t need) {
  if (need <= size) return;
  std::size_t n = std::max(need, 2 * size);
  n = (n + (1 << 20) - 1) & ~std::size_t{(1 << 20) - 1};
  if (::ftruncate(fd, static_cast<off_t>(n)) != 0)
    fail("isolated kernel: cannot grow shared memory to {}: {}", format_bytes(n),
         std::strerror(errno));
  map(n);
}

Arena::Arena(int fd, std::size_t reserve, bool dont_fork, bool writable)
    : fd_(fd), reserve_(reserve), dont_fork_(dont_fork), writable_(writable) {
  // Addresses only: no memory, no swap reserved, inaccessible until the file is mapped over them.
  void* p =
      ::mmap(nullptr, reserve_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("reserving {} of addresses failed", format_bytes(static_cast<std::int64_t>(reserve_)));
  base_ = static_cast<char*>(p);
  if (dont_fork_) ::madvise(base_, reserve_, MADV_DONTFORK);
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && st.st_size > 0) map_to(static_cast<std::size_t>(st.st_size));
}

Arena::~Arena() {
  if (base_) ::munmap(base_, reserve_);
  if (fd_ >= 0) ::close(fd_);
}

bool Arena::map_to(std::size_t size) {
  if (size <= size_) return true;
  if (size > reserve_) return false;
  // Only the new part: the blocks mapped already stay where they are.
  void* p = ::mmap(base_ + size_, size - size_, writable_ ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED | MAP_FIXED, fd_, static_cast<off_t>(size_));
  if (p == MAP_FAILED) return false;
  if (dont_fork_) ::madvise(base_ + size_, size - size_, MADV_DONTFORK);
  size_ = size;
  return true;
}

bool Arena::grow_to(std::size_t size) {
  if (size <= size_) return true;
  if (size > reserve_ || ::ftruncate(fd_, static_cast<off_t>(size)) != 0) return false;
  return map_to(size);
}

namespace {

// A tensor's header in a frame: its tag, then dtype and shape, then (in the region) its offset
// and the id to keep it under, or (kept) the id the receiver has it under, or (in the arena) its
// offset there and the id it is kept under.
enum : std::uint8_t { kUndefined = 0, kInRegion = 1, kKept = 2, kInArena = 3 };

}  // namespace

void put_tensors(Writer& w, Region& r, const std::vector<const Tensors*>& lists,
                 const CrossingRule& how) {
  std::vector<Crossing> crossings;
  std::size_t need = 0;
  for (const auto* l : lists)
    for (const auto& t : *l) {
      crossings.push_back(how && t.defined() ? how(t) : Crossing{});
      const Crossing& c = crossings.back();
      if (t.defined() && !c.kept && c.at == kNowhere) need += align64(t.nbytes());
    }
  r.grow(need);
  w.put(static_cast<std::uint64_t>(r.size));
  w.put(static_cast<std::uint32_t>(lists.size()));
  std::size_t off = 0, k = 0;
  for (const auto* l : lists) {
    w.put(static_cast<std::uint32_t>(l->size()));
    for (const auto& t : *l) {
      const Crossing& c = crossings[k++];
      if (!t.defined()) {
        w.put(kUndefined);
        continue;
      }
      w.put(c.kept ? kKept : c.at != kNowhere ? kInArena : kInRegion);
      w.put(static_cast<std::uint8_t>(t.dtype()));
      put_shape(w, t.shape());
      if (c.kept) {
        w.put(c.kept);
        continue;
      }
      if (c.at != kNowhere) {  // written there already
        w.put(c.at);
        w.put(c.keep);
        continue;
      }
      w.put(static_cast<std::uint64_t>(off));
      w.put(c.keep);
      if (t.nbytes()) std::memcpy(r.base + off, t.raw(), t.nbytes());
      off += align64(t.nbytes());
    }
  }
}

std::vector<Tensors> get_tensors(Reader& rd, Region& r, const KeptLookup& find,
                                 std::vector<std::pair<std::uint64_t, Tensor>>* keep,
                                 const ArenaView& view) {
  auto size = rd.get<std::uint64_t>();
  r.map(static_cast<std::size_t>(size));
  std::vector<Tensors> lists(rd.get<std::uint32_t>());
  for (auto& l : lists) {
    l.resize(rd.get<std::uint32_t>());
    for (auto& t : l) {
      auto tag = rd.get<std::uint8_t>();
      if (tag == kUndefined) continue;
      if (tag != kInRegion && tag != kKept && (tag != kInArena || !view))
        throw Error("isolated kernel: malformed message (tensor tag)");
      auto dtype = static_cast<DType>(rd.get<std::uint8_t>());
      Shape s = get_shape(rd);
      if (tag == kKept) {
        auto id = rd.get<std::uint64_t>();
        if (find) t = find(id, dtype, s);
        if (!t.defined()) throw Error("isolated kernel: malformed message (unknown kept tensor)");
        continue;
      }
      auto off = rd.get<std::uint64_t>();
      auto id = rd.get<std::uint64_t>();
      if (tag == kInArena) {
        t = view(off, dtype, s);
        if (id && keep) keep->emplace_back(id, t);
        continue;
      }
      t = Tensor::empty(dtype, s);
      if (off > r.size || t.nbytes() > r.size - off)
        throw Error("isolated kernel: malformed message (tensor past the shared region)");
      if (t.nbytes()) std::memcpy(t.raw(), r.base + off, t.nbytes());
      if (id && keep) keep->emplace_back(id, t);
    }
  }
  return lists;
}

bool read_frame(int fd, std::string& body, WorkerClock::time_point deadline, Io& io) {
  std::uint32_t len = 0;
  io = recv_all(fd, &len, sizeof len, deadline);
  if (io != Io::Ok) return false;
  body.resize(len);
  io = len ? recv_all(fd, body.data(), len, deadline) : Io::Ok;
  return io == Io::Ok;
}

Io send_frame(int fd, std::string& body, WorkerClock::time_point deadline) {
  auto len = static_cast<std::uint32_t>(body.size());
  Io io = send_all(fd, &len, sizeof len, deadline);
  return io == Io::Ok ? send_all(fd, body.data(), body.size(), deadline) : io;
}

void put_optimizer(Writer& w, const OptimizerConfig& c) {
  w.str(c.kind);
  for (double v : {c.lr, c.momentum, c.weight_decay, c.beta1, c.beta2, c.eps}) w.put(v);
  w.put(static_cast<std::uint8_t>(c.nesterov));
}

OptimizerConfig get_optimizer(Reader& r) {
  OptimizerConfig c;
  c.kind = r.str();
  for (double* v : {&c.lr, &c.momentum, &c.weight_decay, &c.beta1, &c.beta2, &c.eps})
    *v = r.get<double>();
  c.nesterov = r.get<std::uint8_t>() != 0;
  return c;
}

std::uint8_t fault_code(const std::string& fault) {
  if (fault == "segv") return kSegv;
  if (fault == "abort") return kAbort;
  if (fault == "hang") return kHang;
  fail("unknown planted fault '{}' (segv, abort or hang)", fault);
}

}  // namespace metaop::isolate
