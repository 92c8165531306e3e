// The engine part of attnlab._attnlab (issue 17): attention forward and backward on NumPy
// arrays, the kernels' thread count and SIMD target. python/attnlab/_engine.py wraps these
// (torch tensors in and out, the window tuple); every other argument is checked here, with
// the messages of `attnlab attention` (tools/cmd_attention.cc) where the CLI has the same check.
//
// Contracts:
//   - Zero copy: q, k, v (and out, lse, dout for the backward) must be C-contiguous, aligned,
//     native-endian float32 (or all float64) ndarrays; the kernels read the caller's buffer
//     through a view built by InputView (never a converted copy; _buffer_address exposes the
//     address that view reads, for the tests). The mask is read in place too, strides and all.
//     sink_logits ([heads_q], a few floats) are copied.
//   - float32 runs the flash or the reference kernel; float64 runs the double-precision
//     reference (AttentionForwardReferenceF64 / AttentionBackwardReferenceF64), whatever
//     `kernel` says, so finite-difference gradient checks see double arithmetic throughout
//     (sigmoid_bias alone stays a float: AttentionParams holds it as one).
//   - The GIL is released while a kernel runs; KernelLock (bindings.h) keeps
//     set_num_threads (which replaces the default pool) from running under a kernel.
//   - Errors: TypeError for a wrong Python type or dtype, ValueError for everything else
//     (shapes, contiguity, names, the engine validator's Status via ThrowIfError), MemoryError
//     for a failed allocation. Nothing here aborts the interpreter.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/simd_target.h"
#include "attnlab/thread_pool.h"
#include "bindings.h"
#include "engine/attention_reference.h"

namespace attnlab::python {
namespace {

// Kernel calls hold KernelLock, set_num_threads PoolMutex() exclusively (bindings.h):
// SetDefaultThreadCount destroys the pool a running kernel may be using (thread_pool.h).

constexpr const char* kQDims = "[batch, heads_q, len_q, head_dim]";
constexpr const char* kKDims = "[batch, heads_kv, len_k, head_dim]";

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<int64_t> ShapeOf(const py::array& a) {
  return std::vector<int64_t>(a.shape(), a.shape() + a.ndim());
}

std::string TypeName(const py::handle& h) {
  return py::str(py::type::handle_of(h).attr("__name__"));
}

// `obj` as an ndarray (TypeError otherwise: the wrapper has already turned tensors into arrays).
py::array AsArray(const py::object& obj, const char* name) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(std::string(name) + " must be a numpy array or a CPU torch tensor, got " +
                         TypeName(obj));
  }
  return py::reinterpret_borrow<py::array>(obj);
}

// Checks that `a` is a C-contiguous aligned `T` array of rank `rank` ("[...]" names the dims)
// and returns its data, read in place. `dtype_hint` completes the dtype error.
template <typename T>
const T* CheckedData(const py::array& a, const char* name, size_t rank, const char* dims,
                     const char* dtype_hint) {
  if (!py::isinstance<py::array_t<T>>(a)) {
    throw py::type_error(std::string(name) + " must be " + dtype_hint + ", got " +
                         std::string(py::str(a.dtype())));
  }
  if (static_cast<size_t>(a.ndim()) != rank) {
    throw py::value_error(std::string(name) + ": expected a " + std::to_string(rank) + "-D array " +
                          dims + ", found shape " + ShapeStr(ShapeOf(a)) + " (" +
                          std::to_string(a.ndim()) + "-D)");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) +
                          " must be C-contiguous (np.ascontiguousarray(x) or x.contiguous()); "
                          "attnlab reads it in place");
  }
  if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_)) {
    throw py::value_error(std::string(name) + " is not aligned to its dtype");
  }
  return static_cast<const T*>(a.data());
}

// A contiguous [batch, heads, len, head_dim] view of `a`, read in place (see CheckedData).
template <typename T>
TensorView4<const T> InputView(const py::array& a, const char* name, const char* dims) {
  const T* data = CheckedData<T>(a, name, 4, dims, "float32 or float64");
  return ContiguousView(data, a.shape(0), a.shape(1), a.shape(2), a.shape(3));
}

template <typename T>
TensorView4<T> OutputView(py::array_t<T>& a) {
  return ContiguousView(a.mutable_data(), a.shape(0), a.shape(1), a.shape(2), a.shape(3));
}

// The keyword arguments of _attention_forward / _attention_backward, as received.
struct Args {
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded
  int64_t sinks = 0, n_global = 0;
  py::object mask;
  bool mask_first_key = false;
  std::string softmax = "standard";
  py::object sink_logits;
  double sigmoid_bias = 0;
  std::optional<double> scale;
  std::string kernel = "flash";
};

SoftmaxKind ParseSoftmax(const std::string& name) {
  if (name == "standard") return SoftmaxKind::kStandard;
  if (name == "softmax1") return SoftmaxKind::kSoftmax1;
  if (name == "sink") return SoftmaxKind::kSinkLogit;
  if (name == "sigmoid") return SoftmaxKind::kSigmoid;
  if (name == "softpick") return SoftmaxKind::kSoftpick;
  throw py::value_error("unknown softmax '" + name +
                        "'; expected standard, softmax1, sink, sigmoid or softpick");
}

// One call's inputs, checked, with the engine's shape and params. Holds references to the
// arrays the params point into (mask, sink logits); neither copyable nor movable, so those
// pointers stay valid.
struct Problem {
  Problem() = default;
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  bool f64 = false;
  bool flash = true;
  py::array q, k, v, mask;
  AttentionShape shape;
  AttentionParams params;
  std::optional<double> scale64;  // the float64 path's scale (params.scale is the float32 one)
  std::vector<float> sink32;
  std::vector<double> sink64;
};

// Checks q, k, v: one float dtype, rank 4, contiguous; k and v alike; batch and head_dim agree.
void CheckTensors(Problem& p, const py::object& q, const py::object& k, const py::object& v) {
  p.q = AsArray(q, "q");
  p.k = AsArray(k, "k");
  p.v = AsArray(v, "v");
  if (py::isinstance<py::array_t<double>>(p.q)) p.f64 = true;
  for (auto [name, a] : {std::pair{"q", &p.q}, {"k", &p.k}, {"v", &p.v}}) {
    const char* dims = a == &p.q ? kQDims : kKDims;
    const bool f32 = py::isinstance<py::array_t<float>>(*a);
    const bool f64 = py::isinstance<py::array_t<double>>(*a);
    if ((f32 || f64) && f64 != p.f64) {  // another float dtype than q's (others: below)
      throw py::type_error(std::string(name) + " has dtype " + std::string(py::str(a->dtype())) +
                           " but q has " + std::string(py::str(p.q.dtype())) +
                           "; q, k and v must share one dtype");
    }
    if (p.f64) {
      InputView<double>(*a, name, dims);
    } else {
      InputView<float>(*a, name, dims);
    }
  }
  const std::vector<int64_t> qs = ShapeOf(p.q), ks = ShapeOf(p.k), vs = ShapeOf(p.v);
  if (ks != vs) {
    throw py::value_error("k has shape " + ShapeStr(ks) + " but v has shape " + ShapeStr(vs) +
                          "; both must be " + kKDims);
  }
  if (qs[0] != ks[0]) {
    throw py::value_error("q has batch " + std::to_string(qs[0]) + " (shape " + ShapeStr(qs) +
                          ") but k and v have batch " + std::to_string(ks[0]) + " (shape " +
                          ShapeStr(ks) + ")");
  }
  if (qs[3] != ks[3]) {
    throw py::value_error("q has head_dim " + std::to_string(qs[3]) + " (shape " + ShapeStr(qs) +
                          ") but k and v have head_dim " + std::to_string(ks[3]) + " (shape " +
                          ShapeStr(ks) + ")");
  }
  p.shape = {.batch = qs[0],
             .heads_q = qs[1],
             .heads_kv = ks[1],
             .len_q = qs[2],
             .len_k = ks[2],
             .head_dim = qs[3]};
}

// The explicit mask: bool or uint8 (nonzero = visible), [len_q, len_k] or
// [batch|1, heads_q|1, len_q, len_k], read in place with its own strides (size-1 dims
// broadcast with stride 0; np.broadcast_to views work as they are). The last dim must be
// contiguous.
void SetMask(Problem& p, const py::object& obj) {
  p.mask = AsArray(obj, "mask");
  const py::array& m = p.mask;
  if (!py::isinstance<py::array_t<bool>>(m) && !py::isinstance<py::array_t<uint8_t>>(m)) {
    throw py::type_error("mask must be bool or uint8 (nonzero = visible), got " +
                         std::string(py::str(m.dtype())));
  }
  const AttentionShape& s = p.shape;
  const std::vector<int64_t> ms = ShapeOf(m);
  const std::vector<int64_t> want2 = {s.len_q, s.len_k};
  const bool ok2 = ms == want2;
  const bool ok4 = ms.size() == 4 && (ms[0] == s.batch || ms[0] == 1) &&
                   (ms[1] == s.heads_q || ms[1] == 1) && ms[2] == s.len_q && ms[3] == s.len_k;
  if (!ok2 && !ok4) {
    throw py::value_error(
        "mask: expected shape [len_q, len_k] = " + ShapeStr(want2) +
        " or [batch, heads_q, len_q, len_k] = " + ShapeStr({s.batch, s.heads_q, s.len_q, s.len_k}) +
        " (a 1 in the first two broadcasts), found " + ShapeStr(ms));
  }
  // Byte strides, 0 for size-1 dims (their stride is meaningless and may be anything).
  const int nd = static_cast<int>(ms.size());
  std::vector<int64_t> st(nd);
  int64_t last = 0;  // byte offset of the last element
  for (int d = 0; d < nd; ++d) {
    st[d] = ms[d] == 1 ? 0 : m.strides(d);
    if (st[d] < 0) throw py::value_error("mask must have non-negative strides");
    last += (ms[d] - 1) * st[d];
  }
  if (ms[nd - 1] > 1 && st[nd - 1] != 1) {
    throw py::value_error("mask: its last dimension (keys) must be contiguous");
  }
  ExplicitMask e;
  e.data = static_cast<const uint8_t*>(m.data());
  e.size = last + 1;
  e.stride_row = st[nd - 2];
  if (ok4) {
    e.stride_head = st[1];
    e.stride_batch = st[0];
  }
  p.params.mask.explicit_mask = e;
}

// sink_logits: any 1-D numeric array-like with one logit per query head, copied.
void SetSinkLogits(Problem& p, const py::object& obj) {
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a) {
    throw py::type_error("sink_logits must be a 1-D float array [heads_q], got " + TypeName(obj));
  }
  if (a.ndim() != 1 || a.shape(0) != p.shape.heads_q) {
    throw py::value_error("sink_logits: expected one logit per query head, shape [" +
                          std::to_string(p.shape.heads_q) + "], found " + ShapeStr(ShapeOf(a)));
  }
  p.sink64.assign(a.data(), a.data() + a.shape(0));
  p.sink32.assign(p.sink64.begin(), p.sink64.end());
  p.params.sink_logits = p.sink32;
}

// Everything but the backward's extra tensors.
void Prepare(Problem& p, const py::object& q, const py::object& k, const py::object& v,
             const Args& a) {
  if (a.kernel != "flash" && a.kernel != "reference") {
    throw py::value_error("unknown kernel '" + a.kernel + "'; expected flash or reference");
  }
  p.flash = a.kernel == "flash";
  const SoftmaxKind softmax = ParseSoftmax(a.softmax);
  CheckTensors(p, q, k, v);
  if (a.sinks < 0) throw py::value_error("sinks must be >= 0, got " + std::to_string(a.sinks));
  if (a.n_global < 0) {
    throw py::value_error("n_global must be >= 0, got " + std::to_string(a.n_global));
  }
  const bool has_sink_logits = !a.sink_logits.is_none();
  if (softmax == SoftmaxKind::kSinkLogit && !has_sink_logits) {
    throw py::value_error("softmax='sink' needs sink_logits (one logit per query head, [heads_q])");
  }
  if (softmax != SoftmaxKind::kSinkLogit && has_sink_logits) {
    throw py::value_error("sink_logits is only used with softmax='sink' (got softmax='" +
                          a.softmax + "')");
  }
  if (softmax != SoftmaxKind::kSigmoid && a.sigmoid_bias != 0) {
    throw py::value_error("sigmoid_bias is only used with softmax='sigmoid' (got softmax='" +
                          a.softmax + "')");
  }
  AttentionParams& params = p.params;
  params.softmax = softmax;
  params.sigmoid_bias = static_cast<float>(a.sigmoid_bias);
  if (a.scale) params.scale = static_cast<float>(*a.scale);
  p.scale64 = a.scale;
  AttentionMask& mask = params.mask;
  mask.causal = a.causal;
  mask.window_left = a.window_left;
  mask.window_right = a.window_right;
  mask.n_sink = a.sinks;
  mask.n_global = a.n_global;
  mask.mask_first_key = a.mask_first_key;
  if (!a.mask.is_none()) SetMask(p, a.mask);
  if (has_sink_logits) SetSinkLogits(p, a.sink_logits);
}

// Runs fn() with the GIL released and the default pool held (KernelLock, bindings.h).
template <typename Fn>
Status RunKernel(Problem& p, Fn&& fn) {
  py::gil_scoped_release release;
  KernelLock lock;
  p.params.pool = &DefaultThreadPool();
  return fn();
}

template <typename T>
py::array_t<T> NewArray(std::vector<int64_t> shape) {
  return py::array_t<T>(std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

template <typename T>
py::object Forward(Problem& p, bool return_lse) {
  const AttentionShape& s = p.shape;
  auto out = NewArray<T>({s.batch, s.heads_q, s.len_q, s.head_dim});
  py::array_t<T> lse;
  if (return_lse) lse = NewArray<T>({s.batch, s.heads_q, s.len_q});
  const auto q = InputView<T>(p.q, "q", kQDims), k = InputView<T>(p.k, "k", kKDims),
             v = InputView<T>(p.v, "v", kKDims);
  const TensorView4<T> o = OutputView(out);
  const std::span<T> l(return_lse ? lse.mutable_data() : nullptr,
                       return_lse ? static_cast<size_t>(lse.size()) : 0);
  const Status st = RunKernel(p, [&] {
    if constexpr (std::is_same_v<T, double>) {
      return AttentionForwardReferenceF64(s, p.params, p.scale64, p.sink64, q, k, v, o, l);
    } else if (p.flash) {
      return AttentionForwardFlash(s, p.params, q, k, v, o, l);
    } else {
      return AttentionForwardReference(s, p.params, q, k, v, o, l);
    }
  });
  ThrowIfError(st);
  if (return_lse) return py::make_tuple(out, lse);
  return out;
}

// The backward's extra inputs: out and lse (the forward's; float32 flash only) and dout.
struct BackwardInputs {
  py::array out, lse, dout;
};

template <typename T>
void CheckBackwardInputs(const Problem& p, BackwardInputs& b, const py::object& out,
                         const py::object& lse, const py::object& dout) {
  const char* hint = std::is_same_v<T, double> ? "float64 (like q)" : "float32 (like q)";
  const std::vector<int64_t> qs = ShapeOf(p.q);
  b.dout = AsArray(dout, "dout");
  CheckedData<T>(b.dout, "dout", 4, kQDims, hint);
  if (ShapeOf(b.dout) != qs) {
    throw py::value_error("dout: expected the shape of q " + ShapeStr(qs) + ", found " +
                          ShapeStr(ShapeOf(b.dout)));
  }
  if (!(p.flash && std::is_same_v<T, float>)) return;  // the reference recomputes P itself
  if (out.is_none() || lse.is_none()) {
    throw py::value_error(
        "the flash backward needs the forward's out and lse "
        "(attention(..., return_lse=True))");
  }
  b.out = AsArray(out, "out");
  CheckedData<T>(b.out, "out", 4, kQDims, hint);
  if (ShapeOf(b.out) != qs) {
    throw py::value_error("out: expected the shape of q " + ShapeStr(qs) + ", found " +
                          ShapeStr(ShapeOf(b.out)));
  }
  b.lse = AsArray(lse, "lse");
  CheckedData<T>(b.lse, "lse", 3, "[batch, heads_q, len_q]", hint);
  const std::vector<int64_t> want = {qs[0], qs[1], qs[2]};
  if (ShapeOf(b.lse) != want) {
    throw py::value_error("lse: expected shape [batch, heads_q, len_q] = " + ShapeStr(want) +
                          ", found " + ShapeStr(ShapeOf(b.lse)));
  }
}

template <typename T>
py::tuple Backward(Problem& p, const py::object& out_obj, const py::object& lse_obj,
                   const py::object& dout_obj) {
  BackwardInputs b;
  CheckBackwardInputs<T>(p, b, out_obj, lse_obj, dout_obj);
  const AttentionShape& s = p.shape;
  auto dq = NewArray<T>({s.batch, s.heads_q, s.len_q, s.head_dim});
  auto dk = NewArray<T>({s.batch, s.heads_kv, s.len_k, s.head_dim});
  auto dv = NewArray<T>({s.batch, s.heads_kv, s.len_k, s.head_dim});
  const bool sink = p.params.softmax == SoftmaxKind::kSinkLogit;
  py::array_t<T> dsink;
  if (sink) dsink = NewArray<T>({s.heads_q});
  const std::span<T> ds(sink ? dsink.mutable_data() : nullptr, sink ? s.heads_q : 0);
  const auto q = InputView<T>(p.q, "q", kQDims), k = InputView<T>(p.k, "k", kKDims),
             v = InputView<T>(p.v, "v", kKDims), dout = InputView<T>(b.dout, "dout", kQDims);
  const TensorView4<T> dqv = OutputView(dq), dkv = OutputView(dk), dvv = OutputView(dv);
  const Status st = RunKernel(p, [&] {
    if constexpr (std::is_same_v<T, double>) {
      return AttentionBackwardReferenceF64(s, p.params, p.scale64, p.sink64, q, k, v, dout, dqv,
                                           dkv, dvv, ds);
    } else if (p.flash) {
      const auto out = InputView<T>(b.out, "out", kQDims);
      const std::span<const T> lse(static_cast<const T*>(b.lse.data()), b.lse.size());
      return AttentionBackwardFlash(s, p.params, q, k, v, out, lse, dout, dqv, dkv, dvv, ds);
    } else {
      return AttentionBackwardReference(s, p.params, q, k, v, dout, dqv, dkv, dvv, ds);
    }
  });
  ThrowIfError(st);
  if (sink) return py::make_tuple(dq, dk, dv, dsink);
  return py::make_tuple(dq, dk, dv);
}

// The keyword arguments shared by _attention_forward and _attention_backward, after the
// tensors, in the order BindEngine declares them.
Args MakeArgs(bool causal, int64_t window_left, int64_t window_right, int64_t sinks,
              int64_t n_global, py::object mask, bool mask_first_key, std::string softmax,
              py::object sink_logits, double sigmoid_bias, std::optional<double> scale,
              std::string kernel) {
  return Args{.causal = causal,
              .window_left = window_left,
              .window_right = window_right,
              .sinks = sinks,
              .n_global = n_global,
              .mask = std::move(mask),
              .mask_first_key = mask_first_key,
              .softmax = std::move(softmax),
              .sink_logits = std::move(sink_logits),
              .sigmoid_bias = sigmoid_bias,
              .scale = scale,
              .kernel = std::move(kernel)};
}

}  // namespace

void BindEngine(py::module_& m) {
  DefaultThreadPool();  // created now, not lazily by two threads racing (the GIL is released)
#define ATTNLAB_ENGINE_KWARGS                                                                 \
  py::kw_only(), py::arg("causal") = false, py::arg("window_left") = -1,                      \
                 py::arg("window_right") = -1, py::arg("sinks") = 0, py::arg("n_global") = 0, \
                 py::arg("mask") = py::none(), py::arg("mask_first_key") = false,             \
                 py::arg("softmax") = "standard", py::arg("sink_logits") = py::none(),        \
                 py::arg("sigmoid_bias") = 0.0, py::arg("scale") = py::none()
  m.def(
      "_attention_forward",
      [](py::object q, py::object k, py::object v, bool causal, int64_t wl, int64_t wr,
         int64_t sinks, int64_t n_global, py::object mask, bool mfk, std::string softmax,
         py::object sink_logits, double sigmoid_bias, std::optional<double> scale, bool return_lse,
         std::string kernel) -> py::object {
        Problem p;
        Prepare(p, q, k, v,
                MakeArgs(causal, wl, wr, sinks, n_global, std::move(mask), mfk, std::move(softmax),
                         std::move(sink_logits), sigmoid_bias, scale, std::move(kernel)));
        return p.f64 ? Forward<double>(p, return_lse) : Forward<float>(p, return_lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), ATTNLAB_ENGINE_KWARGS,
      py::arg("return_lse") = false, py::arg("kernel") = "flash",
      "out, or (out, lse) with return_lse: see attnlab.attention (window -1 = unbounded)");
  m.def(
      "_attention_backward",
      [](py::object q, py::object k, py::object v, py::object out, py::object lse, py::object dout,
         bool causal, int64_t wl, int64_t wr, int64_t sinks, int64_t n_global, py::object mask,
         bool mfk, std::string softmax, py::object sink_logits, double sigmoid_bias,
         std::optional<double> scale, std::string kernel) -> py::tuple {
        Problem p;
        Prepare(p, q, k, v,
                MakeArgs(causal, wl, wr, sinks, n_global, std::move(mask), mfk, std::move(softmax),
                         std::move(sink_logits), sigmoid_bias, scale, std::move(kernel)));
        return p.f64 ? Backward<double>(p, out, lse, dout) : Backward<float>(p, out, lse, dout);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("dout"),
      ATTNLAB_ENGINE_KWARGS, py::arg("kernel") = "flash",
      "(dq, dk, dv[, d_sink_logits]): see attnlab.attention_backward");
#undef ATTNLAB_ENGINE_KWARGS
  m.def(
      "_buffer_address",
      [](py::object a, const char* name) -> uintptr_t {
        const py::array arr = AsArray(a, name);
        if (py::isinstance<py::array_t<double>>(arr)) {
          return reinterpret_cast<uintptr_t>(InputView<double>(arr, name, kQDims).data);
        }
        return reinterpret_cast<uintptr_t>(InputView<float>(arr, name, kQDims).data);
      },
      py::arg("a"), py::arg("name") = "q",
      "The address the kernels read for a 4-D input, through the same checks (tests only)");
  m.def(
      "set_num_threads",
      [](int n) {
        if (n < 1) {
          throw py::value_error("set_num_threads: n must be >= 1, got " + std::to_string(n));
        }
        ThrowIfInsideKernelLock("set_num_threads");
        py::gil_scoped_release release;  // a kernel holding the shared lock may need a while
        std::unique_lock<std::shared_mutex> lock(PoolMutex());
        SetDefaultThreadCount(n);
      },
      py::arg("n"), "Sets the number of threads the kernels use (n >= 1)");
  m.def(
      "num_threads",
      [] {
        py::gil_scoped_release release;
        KernelLock lock;
        return DefaultThreadCount();
      },
      "The number of threads the kernels use");
  m.def(
      "simd_target", [] { return std::string(SimdTargetName(ActiveSimdTarget())); },
      "The SIMD code path the kernels run: baseline, avx2 or avx512");
}

}  // namespace attnlab::python
