#include "cli/host.h"

#include <fmt/core.h>
#include <unistd.h>

#include <atomic>

#include "tensor/error.h"

namespace metaop::cli {

namespace {
std::atomic<Host*> current{nullptr};
}  // namespace

Host* host() {
  return current.load();
}

HostScope::HostScope(Host& h) {
  Host* none = nullptr;
  if (!current.compare_exchange_strong(none, &h))
    throw Error("metaop runs one command at a time in a process (another one is running)");
}

HostScope::~HostScope() {
  current = nullptr;
}

std::string array_name(const std::string& path) {
  if (path.size() < 8 || path.compare(0, 7, "<array ") != 0 || path.back() != '>') return {};
  return path.substr(7, path.size() - 8);
}

bool progress_shown() {
  Host* h = host();
  return h ? static_cast<bool>(h->progress) : isatty(STDERR_FILENO) != 0;
}

void show_progress(const std::string& line, double done) {
  if (Host* h = host()) {
    if (h->progress) h->progress(line, done);
  } else if (isatty(STDERR_FILENO)) {
    fmt::print(stderr, "\r\033[K{}", line);
  }
}

void end_progress() {
  if (!host() && isatty(STDERR_FILENO)) fmt::print(stderr, "\r\033[K");
}

}  // namespace metaop::cli
