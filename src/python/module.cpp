// metaop._core: the commands of src/cli run in the Python process (python/metaop calls them).
// Arrays cross without copies where their layout allows: inputs are read in place through the
// host (cli/host.h), `run`'s outputs are returned over MetaOp's own storage.
#include <fcntl.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "analysis/diagnose/diagnose_monitor.h"
#include "cli/app.h"
#include "cli/host.h"
#include "tensor/error.h"

namespace py = pybind11;

namespace metaop::python {

namespace {

std::optional<DType> dtype_of_array(const py::dtype& d) {
  switch (d.kind()) {
    case 'f':
      if (d.itemsize() == 4) return DType::Float32;
      if (d.itemsize() == 8) return DType::Float64;
      if (d.itemsize() == 2) return DType::Float16;
      break;
    case 'i':
      if (d.itemsize() == 8) return DType::Int64;
      if (d.itemsize() == 4) return DType::Int32;
      if (d.itemsize() == 2) return DType::Int16;
      if (d.itemsize() == 1) return DType::Int8;
      break;
    case 'u':
      if (d.itemsize() == 1) return DType::UInt8;
      if (d.itemsize() == 2) return DType::UInt16;
      if (d.itemsize() == 4) return DType::UInt32;
      if (d.itemsize() == 8) return DType::UInt64;
      break;
    case 'b':
      return DType::Bool;
    default:
      break;
  }
  return std::nullopt;
}

// The tensor over an array's memory: the array lives as long as the tensor (its reference is
// dropped under the GIL whichever thread lets the last tensor go).
Tensor tensor_over(const std::string& name, const py::array& a) {
  auto dtype = dtype_of_array(a.dtype());
  if (!dtype)
    throw Error(
        fmt::format("array '{}': dtype {} is not one MetaOp reads (float16/32/64, "
                    "int8/16/32/64, uint8/16/32/64, bool)",
                    name, std::string(py::str(a.dtype()))));
  if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) ||
      !(a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) || a.dtype().byteorder() == '>')
    throw Error(
        fmt::format("array '{}': not C-contiguous, aligned and native-endian "
                    "(numpy.ascontiguousarray makes it so)",
                    name));
  Shape shape(a.shape(), a.shape() + a.ndim());
  auto* keep = new py::object(a);
  std::shared_ptr<std::byte[]> storage(reinterpret_cast<std::byte*>(const_cast<void*>(a.data())),
                                       [keep](std::byte*) {
                                         py::gil_scoped_acquire gil;
                                         delete keep;
                                       });
  return Tensor::over(*dtype, std::move(shape), std::move(storage));
}

// An array over a tensor's storage (a copy widened to float32 for bfloat16, which NumPy lacks).
py::array array_over(const Tensor& t) {
  Tensor held = t;
  std::string format;
  switch (t.dtype()) {
    case DType::Float32:
      format = py::format_descriptor<float>::format();
      break;
    case DType::Float64:
      format = py::format_descriptor<double>::format();
      break;
    case DType::Float16:
      format = "e";
      break;
    case DType::BFloat16:
      held = Tensor::from_f64(t.to_f64(), t.shape(), DType::Float32);
      format = py::format_descriptor<float>::format();
      break;
    case DType::Int64:
      format = py::format_descriptor<std::int64_t>::format();
      break;
    case DType::Int32:
      format = py::format_descriptor<std::int32_t>::format();
      break;
    case DType::Int8:
      format = py::format_descriptor<std::int8_t>::format();
      break;
    case DType::UInt8:
      format = py::format_descriptor<std::uint8_t>::format();
      break;
    case DType::Bool:
      format = py::format_descriptor<bool>::format();
      break;
    case DType::Int16:
      format = py::format_descriptor<std::int16_t>::format();
      break;
    case DType::UInt16:
      format = py::format_descriptor<std::uint16_t>::format();
      break;
    case DType::UInt32:
      format = py::format_descriptor<std::uint32_t>::format();
      break;
    case DType::UInt64:
      format = py::format_descriptor<std::uint64_t>::format();
      break;
  }
  auto* owner = new Tensor(held);
  py::capsule base(owner, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> strides(held.shape().size());
  py::ssize_t step = static_cast<py::ssize_t>(dtype_size(held.dtype()));
  for (std::size_t i = strides.size(); i-- > 0;) {
    strides[i] = step;
    step *= static_cast<py::ssize_t>(held.shape()[i]);
  }
  std::vector<py::ssize_t> shape(held.shape().begin(), held.shape().end());
  py::array a(py::dtype(format), shape, strides, owner->raw(), base);
  // MetaOp's tensors are not changed once made; NumPy must not change them either.
  a.attr("flags").attr("writeable") = false;
  return a;
}

// Sends what the command writes on a file descriptor into a memory file while it lives, and
// gives it back as text.
class Capture {
 public:
  explicit Capture(int fd) : fd_(fd) {
    std::fflush(nullptr);
    mem_ = ::memfd_create("metaop-capture", MFD_CLOEXEC);
    saved_ = ::dup(fd_);
    if (mem_ >= 0 && saved_ >= 0) ::dup2(mem_, fd_);
  }
  ~Capture() { restore(); }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  std::string text() {
    restore();
    std::string out;
    if (mem_ < 0) return out;
    ::lseek(mem_, 0, SEEK_SET);
    char buf[65536];
    for (ssize_t n; (n = ::read(mem_, buf, sizeof buf)) > 0;) out.append(buf, n);
    ::close(mem_);
    mem_ = -1;
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::cout.flush();
    std::fflush(nullptr);
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }
  int fd_, mem_ = -1, saved_ = -1;
};

struct Outcome {
  int exit_code = 0;
  std::string out, err;
  py::dict outputs;
  std::string failure_kind;  // "", "input", "memory", "internal"
  std::string failure;
};

// Runs one command line. Python's exceptions raised by the progress callback (KeyboardInterrupt
// among them) end the command and propagate as they are.
Outcome command(const std::vector<std::string>& args, const py::dict& arrays, bool want_outputs,
                const py::object& progress) {
  cli::Host host;
  Outcome o;
  std::map<std::string, Tensor> outputs;
  try {
    for (auto [k, v] : arrays) {
      std::string name = py::str(k);
      host.arrays[name] = tensor_over(name, py::array::ensure(v));
    }
  } catch (const Error& e) {
    o.failure_kind = "input";
    o.failure = e.what();
    return o;
  }
  if (want_outputs) host.outputs = &outputs;
  if (!progress.is_none())
    host.progress = [&progress](const std::string& line, double done) {
      py::gil_scoped_acquire gil;
      progress(line, done);
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    };
  {
    Capture out(STDOUT_FILENO), err(STDERR_FILENO);
    py::gil_scoped_release release;
    try {
      cli::HostScope scope(host);
      o.exit_code = cli::run_command(args);
    } catch (py::error_already_set&) {
      out.text();
      err.text();
      throw;
    } catch (...) {
      auto f = cli::describe_failure(std::current_exception());
      o.failure_kind = f.kind == cli::Failure::Input    ? "input"
                       : f.kind == cli::Failure::Memory ? "memory"
                                                        : "internal";
      o.failure = f.message;
    }
    // The arrays' references go under the GIL (the deleters take it).
    py::gil_scoped_acquire gil;
    host.arrays.clear();
    o.out = out.text();
    o.err = err.text();
  }
  for (const auto& [name, t] : outputs) o.outputs[py::str(name)] = array_over(t);
  return o;
}

}  // namespace

}  // namespace metaop::python

PYBIND11_MODULE(_core, m) {
  using metaop::python::Outcome;
  m.doc() = "MetaOp's commands in this process (used by the metaop package; not an API of its own)";
  py::class_<Outcome>(m, "Outcome")
      .def_readonly("exit_code", &Outcome::exit_code)
      .def_readonly("out", &Outcome::out)
      .def_readonly("err", &Outcome::err)
      .def_readonly("outputs", &Outcome::outputs)
      .def_readonly("failure_kind", &Outcome::failure_kind)
      .def_readonly("failure", &Outcome::failure);
  m.def("command", &metaop::python::command, py::arg("args"), py::arg("arrays") = py::dict(),
        py::arg("outputs") = false, py::arg("progress") = py::none(),
        "Runs `metaop ARGS...` in this process: arrays named in ARGS as '<array NAME>' are read "
        "in place; with outputs=True, `run`'s outputs come back as arrays.");
  m.def(
      "thresholds",
      [] {
        metaop::DiagnoseThresholds t;
        py::dict d;
        d["vanish_ratio"] = t.vanish_ratio;
        d["vanish_first"] = t.vanish_first;
        d["explode_ratio"] = t.explode_ratio;
        d["dead_fraction"] = t.dead_fraction;
        d["saturated_fraction"] = t.saturated_fraction;
        d["saturation_output"] = t.saturation_output;
        d["loss_growth"] = t.loss_growth;
        d["update_ratio_high"] = t.update_ratio_high;
        d["update_ratio_low"] = t.update_ratio_low;
        d["stagnation_change"] = t.stagnation_change;
        return d;
      },
      "The default thresholds of `metaop diagnose`'s monitors (docs/diagnose.md cites each).");
  m.def("symptom_kinds", &metaop::symptom_kinds, "The symptom kinds of `metaop diagnose`.");
  m.attr("version") = "0.1.0";
}
