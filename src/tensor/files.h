#pragma once
// Reading files that other people made (models, tensors, reproducer folders): regular files only
// (a FIFO or a device would block or never end), sizes known before anything is allocated, and
// paths named by a file confined to that file's folder.
#include <cstdint>
#include <string>

namespace metaop {

// An open regular file. Opening fails (Error naming the path) for a missing file, a directory,
// a FIFO, a socket or a device; `what` prefixes the messages ("external data of initializer
// 'w'").
class InputFile {
 public:
  explicit InputFile(const std::string& path, const std::string& what = "");
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  std::int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset`; fails naming the path when the file is shorter.
  void read_at(std::int64_t offset, void* data, std::int64_t n) const;
  // The whole file (its size checked against the memory budget first).
  std::string read_all() const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  std::int64_t size_ = 0;
};

// `location`, a path written inside a file of folder `base_dir` (external data, a reproducer's
// input), resolved inside that folder: it must be relative, must not climb out with "..", and
// once symlinks are resolved must still lie inside the folder. Returns the resolved path; fails
// naming `what` and the location otherwise.
std::string confined_path(const std::string& base_dir, const std::string& location,
                          const std::string& what);

// Fails (Error, exit 2) before a long run when `path` cannot be written: its folder is missing
// or not a folder, or the file cannot be created there (read-only file system, permissions).
// `option` names the flag ("--json"). Nothing is left behind.
void check_writable_file(const std::string& option, const std::string& path);
// The same for an output folder (created if missing, with its parents).
void check_writable_dir(const std::string& option, const std::string& dir);

// A source file of MetaOp (adapters and worker scripts; METAOP_SOURCE_DIR overrides the root).
std::string metaop_source(const std::string& relative);
// The Python interpreter of the project's environment (.venv; METAOP_PYTHON overrides it).
std::string venv_python();

}  // namespace metaop
