// Shared by the binding files of attnlab._attnlab: each Bind* registers one part of the module.
#ifndef ATTNLAB_PYTHON_BINDINGS_H_
#define ATTNLAB_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <shared_mutex>
#include <string>

#include "attnlab/status.h"

namespace attnlab::python {

namespace py = pybind11;

void BindEngine(py::module_& m);  // attention forward/backward, threads, SIMD target
void BindModel(py::module_& m);   // load, tokens, forward with hooks
void BindLab(py::module_& m);     // analyze, stream, generate, experiment (the CLI in-process)
void BindView(py::module_& m);    // the attention view (attnlab.show_attention)

// The engine's default thread pool may be replaced (set_num_threads, a command's --threads) only
// while no kernel runs: every call that runs kernels with the GIL released holds KernelLock
// (shared; re-entrant per thread, so a hook that calls the engine inside a model's forward does
// not lock twice), and a pool change holds PoolMutex() exclusively (ThrowIfInsideKernelLock
// first: from inside a hook it would wait for itself).
std::shared_mutex& PoolMutex();
class KernelLock {
 public:
  KernelLock();
  ~KernelLock();
  KernelLock(const KernelLock&) = delete;
  KernelLock& operator=(const KernelLock&) = delete;
};
void ThrowIfInsideKernelLock(const char* what);

// Raises ValueError with the status's message unless it is Ok (InvalidArgument, OutOfRange and
// the rest all mean "bad input" to a Python caller; an allocation failure raises MemoryError).
void ThrowIfError(const Status& status);

}  // namespace attnlab::python

#endif  // ATTNLAB_PYTHON_BINDINGS_H_
