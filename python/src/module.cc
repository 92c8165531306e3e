// The extension module attnlab._attnlab: the engine (engine_bindings.cc), models with
// TransformerLens-style hooks (model_bindings.cc), the lab's commands (lab_bindings.cc) and the
// attention view (view_bindings.cc).
// The Python package (python/attnlab/) wraps it; docs/PYTHON.md is the user's guide.
#include "bindings.h"

PYBIND11_MODULE(_attnlab, m) {
  m.doc() = "attnlab's C++ engine, models and lab (use the `attnlab` package, not this module)";
  attnlab::python::BindEngine(m);
  attnlab::python::BindModel(m);
  attnlab::python::BindLab(m);
  attnlab::python::BindView(m);
}

namespace attnlab::python {

namespace {
thread_local int kernel_lock_depth = 0;
}  // namespace

std::shared_mutex& PoolMutex() {
  static std::shared_mutex mu;
  return mu;
}

KernelLock::KernelLock() {
  if (kernel_lock_depth++ == 0) PoolMutex().lock_shared();
}

KernelLock::~KernelLock() {
  if (--kernel_lock_depth == 0) PoolMutex().unlock_shared();
}

void ThrowIfInsideKernelLock(const char* what) {
  if (kernel_lock_depth > 0) {
    throw py::value_error(std::string(what) +
                          " cannot run inside a hook (the model's forward is using the threads)");
  }
}

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  throw py::value_error(status.message());
}

}  // namespace attnlab::python
