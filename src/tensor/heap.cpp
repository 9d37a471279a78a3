// Replaces malloc, free and their relatives for the whole process (glibc supports this:
// "Replacing malloc" in its manual), counting each block's usable size, and forwards to glibc's
// own allocator (__libc_malloc and friends). Builds that bring their own allocator (the fuzzers'
// and the sanitizer build's AddressSanitizer) define METAOP_NO_MALLOC_HOOKS: no replacement,
// nothing counted, no large block refused (the budget still checks tensors before they allocate).
#include "tensor/heap.h"

#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "tensor/error.h"

// glibc's own allocator under its reserved names (what a malloc replacement forwards to).
// NOLINTBEGIN(bugprone-reserved-identifier)
extern "C" {
void* __libc_malloc(std::size_t);
void __libc_free(void*);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* __libc_valloc(std::size_t);
void* __libc_pvalloc(std::size_t);
}
// NOLINTEND(bugprone-reserved-identifier)

namespace {

std::atomic<std::int64_t> in_use{0}, peak{0};
std::atomic<std::int64_t> budget{0};  // 0 until first read: then half of physical memory
std::atomic<std::int64_t> refused{0};
// The heap in use when the budget was set: the libraries' own start-up allocations are not the
// run's.
std::atomic<std::int64_t> baseline{0};

std::int64_t current_budget() {
  std::int64_t b = budget.load(std::memory_order_relaxed);
  if (b == 0) {
    b = metaop::physical_memory() / 2;
    budget.store(b, std::memory_order_relaxed);
  }
  return b;
}

#ifndef METAOP_NO_MALLOC_HOOKS
constexpr std::size_t kLargeBlock = std::size_t{64} << 20;

// A large block past the budget is refused (errno ENOMEM), as an address-space limit would.
bool over_budget(std::size_t n) {
  if (n < kLargeBlock) return false;
  std::int64_t b = current_budget();
  if (in_use.load(std::memory_order_relaxed) - baseline.load(std::memory_order_relaxed) +
          static_cast<std::int64_t>(n) <=
      b)
    return false;
  refused.store(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  errno = ENOMEM;
  return true;
}
#endif

void raise_peak(std::int64_t now) {
  std::int64_t p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

std::atomic<bool> poison{false};

#ifndef METAOP_NO_MALLOC_HOOKS

void* counted(void* p) {
  if (p) {
    auto n = static_cast<std::int64_t>(malloc_usable_size(p));
    raise_peak(in_use.fetch_add(n, std::memory_order_relaxed) + n);
  }
  return p;
}

// A freed block poisoned where it tells, at a sixteenth of the cost of filling it: its first and
// last 64 bytes and 64 bytes at every kilobyte, so that any stretch of more than a kilobyte a
// kernel leaves unwritten, and an unwritten start or end, holds the pattern.
void poison_block(void* p, std::size_t n) {
  auto* c = static_cast<unsigned char*>(p);
  for (std::size_t off = 0; off + 64 <= n; off += 1024) std::memset(c + off, 0xA5, 64);
  std::memset(c + n - 64, 0xA5, 64);
}

void uncount(void* p) {
  if (!p) return;
  auto n = malloc_usable_size(p);
  // Freed blocks poisoned (large ones, sparsely: the cost stays small next to writing them): a
  // kernel that leaves an output unwritten in memory it got back must not read the values that
  // were there before, say the very input of the node.
  if (poison.load(std::memory_order_relaxed) && n >= 4096) poison_block(p, n);
  in_use.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_relaxed);
}

#endif

}  // namespace

#ifndef METAOP_NO_MALLOC_HOOKS
extern "C" {

void* malloc(std::size_t n) {
  if (over_budget(n)) return nullptr;
  return counted(__libc_malloc(n));
}

void free(void* p) {
  uncount(p);
  __libc_free(p);
}

void* calloc(std::size_t n, std::size_t size) {
  std::size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (over_budget(bytes)) return nullptr;
  return counted(__libc_calloc(n, size));
}

void* realloc(void* p, std::size_t n) {
  std::int64_t before = p ? static_cast<std::int64_t>(malloc_usable_size(p)) : 0;
  if (n > static_cast<std::size_t>(before) && over_budget(n - static_cast<std::size_t>(before)))
    return nullptr;
  void* q = __libc_realloc(p, n);
  if (q) {
    auto after = static_cast<std::int64_t>(malloc_usable_size(q));
    raise_peak(in_use.fetch_add(after - before, std::memory_order_relaxed) + after - before);
  } else if (p && n == 0) {
    in_use.fetch_sub(before, std::memory_order_relaxed);  // freed
  }
  return q;
}

void* reallocarray(void* p, std::size_t n, std::size_t size) {
  std::size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, bytes);
}

void* memalign(std::size_t align, std::size_t n) {
  if (over_budget(n)) return nullptr;
  return counted(__libc_memalign(align, n));
}

void* aligned_alloc(std::size_t align, std::size_t n) {
  return memalign(align, n);
}

int posix_memalign(void** out, std::size_t align, std::size_t n) {
  if (align % sizeof(void*) != 0 || (align & (align - 1)) != 0) return EINVAL;
  void* p = memalign(align, n);
  if (!p && n) return ENOMEM;
  *out = p;
  return 0;
}

void* valloc(std::size_t n) {
  if (over_budget(n)) return nullptr;
  return counted(__libc_valloc(n));
}

void* pvalloc(std::size_t n) {
  if (over_budget(n)) return nullptr;
  return counted(__libc_pvalloc(n));
}

}  // extern "C"
#endif

namespace metaop {

bool heap_accounting() {
#ifdef METAOP_NO_MALLOC_HOOKS
  return false;
#else
  return true;
#endif
}

std::int64_t heap_in_use() {
  return in_use.load(std::memory_order_relaxed);
}

std::int64_t heap_peak() {
  return peak.load(std::memory_order_relaxed);
}

void reset_heap_peak() {
  peak.store(in_use.load(std::memory_order_relaxed));
}

void raise_heap_peak(std::int64_t level) {
  raise_peak(level);
}

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void set_heap_poison(bool on) {
  poison.store(on, std::memory_order_relaxed);
}

std::int64_t physical_memory() {
  long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0) return std::int64_t{8} << 30;  // unknown: assume 8 GiB
  return static_cast<std::int64_t>(pages) * size;
}

void set_memory_budget(std::int64_t bytes) {
  baseline.store(heap_in_use(), std::memory_order_relaxed);
  budget.store(bytes > 0 ? bytes : physical_memory() / 2, std::memory_order_relaxed);
}

std::int64_t memory_budget() {
  return current_budget();
}

void check_budget(std::int64_t bytes, const std::string& what) {
  std::int64_t b = current_budget(), now = heap_in_use() - baseline.load(std::memory_order_relaxed);
  if (bytes <= b - now) return;
  fail("{} needs {}, past the memory budget of {} ({} in use; --max-memory)", what,
       format_bytes(bytes), format_bytes(b), format_bytes(std::max<std::int64_t>(now, 0)));
}

std::int64_t refused_allocation() {
  return refused.load(std::memory_order_relaxed);
}

std::string format_bytes(std::int64_t bytes) {
  double v = static_cast<double>(bytes);
  const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (std::abs(v) >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.3g} {}", v, units[u]);
}

}  // namespace metaop
