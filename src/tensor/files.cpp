#include "tensor/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "tensor/error.h"
#include "tensor/heap.h"

namespace metaop {

namespace fs = std::filesystem;

namespace {

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

}  // namespace

InputFile::InputFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  std::string who = what_.empty() ? path_ : what_ + ": " + path_;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked right after.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    if (errno == ENOENT) fail("{}: no such file", who);
    fail("{}: cannot open: {}", who, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    std::string kind = kind_of(st.st_mode);
    ::close(fd_);
    fd_ = -1;
    fail("{}: is {}, not a regular file", who, kind);
  }
  size_ = static_cast<std::int64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(std::int64_t offset, void* data, std::int64_t n) const {
  std::string who = what_.empty() ? path_ : what_ + ": " + path_;
  if (offset < 0 || n < 0 || offset > size_ || n > size_ - offset)
    fail("{}: too short: {} bytes needed at offset {}, the file has {}", who, n, offset, size_);
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, static_cast<std::size_t>(std::min<std::int64_t>(n, 1 << 30)),
                        static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("{}: read failed: {}", who, std::strerror(errno));
    if (r == 0) fail("{}: the file ended early (it changed while being read?)", who);
    p += r;
    n -= r;
    offset += r;
  }
}

std::string InputFile::read_all() const {
  if (size_ >= (std::int64_t{1} << 20))
    check_budget(size_, fmt::format("reading {}", what_.empty() ? path_ : what_));
  std::string bytes(static_cast<std::size_t>(size_), '\0');
  read_at(0, bytes.data(), size_);
  return bytes;
}

std::string confined_path(const std::string& base_dir, const std::string& location,
                          const std::string& what) {
  if (location.empty()) fail("{}: empty file location", what);
  if (location.find('\0') != std::string::npos) fail("{}: the location contains a NUL byte", what);
  fs::path loc(location);
  if (loc.is_absolute())
    fail("{}: location '{}' is an absolute path; it must be relative to {}", what, location,
         base_dir.empty() ? "." : base_dir);
  for (const auto& part : loc)
    if (part == "..") fail("{}: location '{}' climbs out of its folder with '..'", what, location);
  std::error_code ec;
  fs::path base = fs::canonical(base_dir.empty() ? "." : base_dir, ec);
  if (ec) fail("{}: folder '{}': {}", what, base_dir, ec.message());
  fs::path full = fs::weakly_canonical(base / loc, ec);
  if (ec) fail("{}: location '{}': {}", what, location, ec.message());
  // Component-wise containment (a prefix test would let "/data2" pass for "/data").
  auto rel = full.lexically_relative(base);
  if (rel.empty() || rel == "." || *rel.begin() == "..")
    fail("{}: location '{}' resolves to {}, outside {} (a symbolic link out of the folder?)", what,
         location, full.string(), base.string());
  return full.string();
}

void check_writable_file(const std::string& option, const std::string& path) {
  if (path.empty()) fail("{}: empty file name", option);
  fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  auto st = fs::status(dir, ec);
  if (!fs::exists(st)) fail("{} {}: the folder {} does not exist", option, path, dir.string());
  if (!fs::is_directory(st)) fail("{} {}: {} is not a folder", option, path, dir.string());
  if (fs::is_directory(fs::status(p, ec))) fail("{} {}: is a folder, not a file", option, path);
  bool existed = fs::exists(fs::symlink_status(p, ec));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) fail("{} {}: cannot write: {}", option, path, std::strerror(errno));
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
}

void check_writable_dir(const std::string& option, const std::string& dir) {
  if (dir.empty()) fail("{}: empty folder name", option);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{} {}: cannot create the folder: {}", option, dir, ec.message());
  if (!fs::is_directory(dir, ec)) fail("{} {}: is not a folder", option, dir);
  std::string probe = (fs::path(dir) / ".metaop-write-test").string();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("{} {}: cannot write into it: {}", option, dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string metaop_source(const std::string& relative) {
  const char* dir = std::getenv("METAOP_SOURCE_DIR");
  std::string root = dir && *dir ? dir : METAOP_SOURCE_DIR_DEFAULT;
  return root + "/" + relative;
}

std::string venv_python() {
  const char* p = std::getenv("METAOP_PYTHON");
  if (p && *p) return p;
  return metaop_source(".venv/bin/python");
}

}  // namespace metaop
