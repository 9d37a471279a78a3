// Replaces malloc, free and their relatives for the whole process (glibc supports this: "Replacing
// malloc" in its manual), counting each block's usable size, and forwards to glibc's own
// allocator (__libc_malloc and friends). Builds with METAOP_NO_HEAP_ACCOUNTING (the sanitizer
// build: AddressSanitizer replaces malloc itself) keep glibc's allocator and count nothing.
#include "tensor/heap.h"

#ifndef METAOP_NO_HEAP_ACCOUNTING

#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

extern "C" {
void* __libc_malloc(std::size_t);
void __libc_free(void*);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* __libc_valloc(std::size_t);
void* __libc_pvalloc(std::size_t);
}

namespace {

std::atomic<std::int64_t> in_use{0}, peak{0};

void raise_peak(std::int64_t now) {
  std::int64_t p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void* counted(void* p) {
  if (p) {
    auto n = static_cast<std::int64_t>(malloc_usable_size(p));
    raise_peak(in_use.fetch_add(n, std::memory_order_relaxed) + n);
  }
  return p;
}

void uncount(void* p) {
  if (p)
    in_use.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
}

}  // namespace

extern "C" {

void* malloc(std::size_t n) {
  return counted(__libc_malloc(n));
}

void free(void* p) {
  uncount(p);
  __libc_free(p);
}

void* calloc(std::size_t n, std::size_t size) {
  return counted(__libc_calloc(n, size));
}

void* realloc(void* p, std::size_t n) {
  std::int64_t before = p ? static_cast<std::int64_t>(malloc_usable_size(p)) : 0;
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
  return counted(__libc_valloc(n));
}

void* pvalloc(std::size_t n) {
  return counted(__libc_pvalloc(n));
}

}  // extern "C"

#endif  // METAOP_NO_HEAP_ACCOUNTING

namespace metaop {

#ifdef METAOP_NO_HEAP_ACCOUNTING
bool heap_accounting() {
  return false;
}
std::int64_t heap_in_use() {
  return 0;
}
std::int64_t heap_peak() {
  return 0;
}
void reset_heap_peak() {}
void raise_heap_peak(std::int64_t) {}
#else
bool heap_accounting() {
  return true;
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
#endif

}  // namespace metaop
