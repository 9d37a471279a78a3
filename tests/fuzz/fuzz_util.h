#pragma once
// What the fuzz targets share: the input as a file (the readers take paths) in a memfd, and a
// scratch folder for external data and reproducer files to resolve against.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fuzz {

// The bytes as a regular file at /proc/self/fd/N (rewritten for every input).
inline std::string as_file(const std::uint8_t* data, std::size_t size) {
  static int fd = ::memfd_create("metaop-fuzz", 0);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
    std::abort();
  return "/proc/self/fd/" + std::to_string(fd);
}

// A folder with a small file, a nested one and a symlink out of it, made once.
inline const std::string& scratch() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    fs::path d = fs::temp_directory_path() / ("metaop-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d / "sub");
    std::ofstream(d / "w.bin") << std::string(64, '\1');
    std::ofstream(d / "sub" / "x.npy") << "\x93NUMPY";
    std::error_code ec;
    fs::create_symlink("/etc/hostname", d / "out.bin", ec);
    return d.string();
  }();
  return dir;
}

}  // namespace fuzz
