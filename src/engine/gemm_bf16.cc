#include "engine/gemm_bf16.h"

#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <utility>

#include "engine/gemm.h"  // OneOmpThread

namespace attnlab::internal {

namespace {

constexpr size_t kMaxPrims = 64;

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;  // M N K lda ldb ldc

// oneDNN's objects for one thread: an engine, a stream, and the primitives it has built, by
// shape. A primitive is built once per shape and thread (oneDNN's JIT); the model's products
// come in few shapes (the weight matrices x a few row counts), so the map stays small.
struct ThreadState {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<Key, std::pair<dnnl::matmul::primitive_desc, dnnl::matmul>> prims;  // at most kMaxPrims (cleared when full)
};

ThreadState& State() {
  thread_local ThreadState s;
  return s;
}

dnnl::matmul::primitive_desc Describe(const dnnl::engine& eng, int64_t M, int64_t N, int64_t K,
                                      int64_t lda, int64_t ldb, int64_t ldc) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a({M, K}, dt::bf16, dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b({K, N}, dt::bf16, dnnl::memory::dims{1, ldb});  // B^T of [N, K]
  const dnnl::memory::desc c({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng);
}

}  // namespace

bool Bf16GemmNative() {
  static const bool native = [] {
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return native;
}

Result<std::string> Bf16GemmImplementation() {
  try {
    OneOmpThread one;
    return std::string(Describe(State().eng, 64, 64, 64, 64, 64, 64).impl_info_str());
  } catch (const dnnl::error& e) {
    return Status::Unavailable(std::string("oneDNN cannot multiply bf16 on this CPU: ") +
                               e.what());
  }
}

Status GemmBf16NT(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  if (M < 1 || N < 1 || K < 1 || lda < K || ldb < K || ldc < N || !A || !B || !C) {
    return Status::InvalidArgument("GemmBf16NT: bad shape or null pointer");
  }
  try {
    OneOmpThread one;
    ThreadState& s = State();
    const Key key{M, N, K, lda, ldb, ldc};
    auto it = s.prims.find(key);
    if (it == s.prims.end()) {
      if (s.prims.size() >= kMaxPrims) s.prims.clear();
      dnnl::matmul::primitive_desc pd = Describe(s.eng, M, N, K, lda, ldb, ldc);
      dnnl::matmul prim(pd);
      it = s.prims.emplace(key, std::make_pair(std::move(pd), std::move(prim))).first;
    }
    const dnnl::matmul::primitive_desc& pd = it->second.first;
    const dnnl::matmul& mm = it->second.second;
    // oneDNN takes non-const handles; it only reads src and weights.
    dnnl::memory a(pd.src_desc(), s.eng, const_cast<uint16_t*>(A));
    dnnl::memory b(pd.weights_desc(), s.eng, const_cast<uint16_t*>(B));
    dnnl::memory c(pd.dst_desc(), s.eng, C);
    mm.execute(s.strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.strm.wait();
  } catch (const dnnl::error& e) {
    return Status::Unavailable(std::string("oneDNN bf16 matmul failed: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace attnlab::internal
