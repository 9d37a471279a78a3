#pragma once
// What a program that runs the commands in its own process (the Python module, src/python)
// gives them in place of files and a terminal: arrays read where a file is named, a place for
// `run`'s outputs, and a progress callback. Under the command line there is no host.
#include <functional>
#include <map>
#include <string>

#include "tensor/tensor.h"

namespace metaop::cli {

struct Host {
  // Arrays read in place of files: an input file named "<array NAME>" is arrays[NAME].
  std::map<std::string, Tensor> arrays;
  // `run` puts the graph's outputs here when it is set.
  std::map<std::string, Tensor>* outputs = nullptr;
  // A long command's progress: a line of text and the share done (0 to 1; -1 when unknown).
  std::function<void(const std::string&, double)> progress;
};

// The host of the command running now (nullptr under the command line).
Host* host();
// Makes `h` the host while it lives (one command at a time).
class HostScope {
 public:
  explicit HostScope(Host& h);
  ~HostScope();
  HostScope(const HostScope&) = delete;
  HostScope& operator=(const HostScope&) = delete;
};

// NAME of a file name "<array NAME>", which stands for the host's array NAME; empty when `path`
// names no array.
std::string array_name(const std::string& path);

// A long command's progress line: rewritten in place on stderr when it is a terminal, handed to
// the host when there is one, else not shown.
bool progress_shown();
void show_progress(const std::string& line, double done = -1);
// Clears the line (on a terminal) once the work is done.
void end_progress();

}  // namespace metaop::cli
