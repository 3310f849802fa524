// The part of PyTorch's pluggable-allocator entry points that must be C++: PyTorch expects an
// allocator that cannot allocate to throw (it has no null check), and turns what it catches into
// a Python exception. The Rust side (src/torch_hooks.rs) does the allocating and calls this to
// throw; `rmm_core_torch_alloc` there is declared "C-unwind", so the exception passes through.
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

struct _object;  // CPython's PyObject, used only as an opaque pointer here.
using PyObject = _object;

namespace torch {
// PyTorch's base for C++ exceptions that its Python bindings raise as a given Python type
// (torch/csrc/Exceptions.h: `catch (torch::PyTorchError& e)` sets `e.python_type()` with
// `e.what()`). Declared with the same name, bases, virtual functions and members, so that the
// type matches there (C++ matches caught types by their mangled name).
struct PyTorchError : public std::exception {
  PyTorchError() = default;
  explicit PyTorchError(std::string message) : msg(std::move(message)) {}
  const char* what() const noexcept override { return msg.c_str(); }
  virtual PyObject* python_type() = 0;
  std::string msg;
};
}  // namespace torch

namespace {
// torch.OutOfMemoryError, set by rmm_core.allocators.torch before the allocator is installed
// (a borrowed reference: the Python module keeps the class alive).
PyObject* out_of_memory_type = nullptr;

struct OutOfDeviceMemory final : torch::PyTorchError {
  explicit OutOfDeviceMemory(std::string message) : PyTorchError(std::move(message)) {}
  PyObject* python_type() override { return out_of_memory_type; }
};
}  // namespace

extern "C" void rmm_core_set_torch_oom_type(PyObject* type) { out_of_memory_type = type; }

extern "C" [[noreturn]] void rmm_core_throw_alloc_failure(const char* message) {
  if (out_of_memory_type != nullptr) {
    throw OutOfDeviceMemory(message);
  }
  // Before the type is known, PyTorch raises what it catches of std::exception as RuntimeError.
  throw std::runtime_error(message);
}
