// One query per head against an fp32 / bf16 / fp16 KV cache (attnlab/attention_decode.h).
//
// Per task (kv head hk, key chunk [t0, t1)), for the group's G query heads:
//   for each block of up to kBlock keys:
//     s[g, j] = (scale log2 e) q_g . k_j          (each k_j loaded and converted once, G dots)
//     m'_g = max(m_g, max_j s[g, j]);  p = 2^(s - m'_g);  l_g = l_g 2^(m_g - m'_g) + sum_j p
//     acc_g = acc_g 2^(m_g - m'_g) + sum_j p[g, j] v_j   (each v_j converted once, G FMAs rows)
// then the partials of a head's chunks are merged: M = max m_c, l = sum_c l_c 2^(m_c - M),
// out = sum_c acc_c 2^(m_c - M) / l (exact; FlashAttention-2's rescaling, base 2).
//
// GCC 12's AVX-512 headers start some intrinsics (_mm512_cvtph_ps, _mm512_cvtepu16_epi32, ...)
// from _mm512_undefined_*(), which its middle end then reports as -Wmaybe-uninitialized once
// inlined here (GCC bug 105593, fixed in GCC 13). The pragma must precede the includes: the
// warning's location is inside the header.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "attnlab/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnlab/thread_pool.h"
#include "engine/attention_validate.h"
#include "engine/simd.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace attnlab {

int64_t KvDtypeBytes(KvDtype dtype) { return dtype == KvDtype::kF32 ? 4 : 2; }

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kF16: return "f16";
  }
  return "?";
}

Result<KvDtype> ParseKvDtype(std::string_view name) {
  if (name == "f32" || name == "fp32") return KvDtype::kF32;
  if (name == "bf16") return KvDtype::kBF16;
  if (name == "f16" || name == "fp16") return KvDtype::kF16;
  return Status::InvalidArgument("unknown KV cache dtype '" + std::string(name) +
                                 "'; expected f32, bf16 or f16");
}

uint16_t FloatToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t x) {
  const uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToF16(float x) {
  const _Float16 h = static_cast<_Float16>(x);  // IEEE round to nearest even
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

float F16ToFloat(uint16_t x) {
  _Float16 h;
  std::memcpy(&h, &x, 2);
  return static_cast<float>(h);
}

void ConvertToKvDtype(const float* src, int64_t n, KvDtype dtype, void* dst) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KvDtype::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16(src[i]);
      return;
    }
    case KvDtype::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToF16(src[i]);
      return;
    }
  }
}

void ConvertFromKvDtype(const void* src, int64_t n, KvDtype dtype, float* dst) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KvDtype::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i]);
      return;
    }
    case KvDtype::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToFloat(s[i]);
      return;
    }
  }
}

int64_t AttentionDecodeBytes(const DecodeShape& s, KvDtype dtype) {
  return 2 * s.heads_kv * s.len_k * s.head_dim * KvDtypeBytes(dtype);
}

namespace {

using simd::VecF;
constexpr int kL = simd::kLanes;
constexpr int64_t kBlock = 64;     // keys per online-softmax block
constexpr int64_t kMinChunk = 256; // keys per task at least (the merge costs ~G * D per chunk)

// Loads of 16 consecutive elements (or one) as fp32. With AVX-512 the 16-bit formats convert
// in one or two instructions (vcvtph2ps; zero-extend and shift for bf16); GCC's generic vector
// conversion of _Float16 would go element by element.
struct LoadF32 {
  using T = float;
  static VecF Vec(const float* p) { return simd::Load(p); }
  static float One(const float* p) { return *p; }
};
struct LoadBF16 {
  using T = uint16_t;
  static VecF Vec(const uint16_t* p) {
#if defined(__AVX512F__)
    const __m512i i = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
    return reinterpret_cast<VecF>(_mm512_castsi512_ps(i));
#else
    typedef uint16_t VecU16 __attribute__((vector_size(32)));
    VecU16 h;
    std::memcpy(&h, p, sizeof h);
    const simd::VecI i = __builtin_convertvector(h, simd::VecI) << 16;
    VecF f;
    std::memcpy(&f, &i, sizeof f);
    return f;
#endif
  }
  static float One(const uint16_t* p) { return Bf16ToFloat(*p); }
};
struct LoadF16 {
  using T = uint16_t;
  static VecF Vec(const uint16_t* p) {
#if defined(__AVX512F__)
    return reinterpret_cast<VecF>(
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#else
    typedef _Float16 VecH __attribute__((vector_size(32)));
    VecH h;
    std::memcpy(&h, p, sizeof h);
    return __builtin_convertvector(h, VecF);
#endif
  }
  static float One(const uint16_t* p) { return F16ToFloat(*p); }
};

// Horizontal sum; the AVX-512 reduction is a shuffle tree (the generic one a serial chain).
inline float Sum(VecF v) {
#if defined(__AVX512F__)
  return _mm512_reduce_add_ps(reinterpret_cast<__m512>(v));
#else
  return simd::ReduceSum(v);
#endif
}

struct Task {
  const DecodeShape* s;
  const float* q;        // [heads_q, D], already multiplied by scale * log2(e)
  const KvView* k;
  const KvView* v;
  int64_t chunk;         // keys per task
  int64_t n_chunks;
  float* partial;        // per (hk, chunk, g): m, l, acc[D]
};

// Partial record size for one query head: m, l, acc[D].
int64_t PartialSize(int64_t D) { return D + 2; }

template <typename Ld>
void RunTask(const Task& a, int64_t hk, int64_t c) {
  using T = typename Ld::T;
  const DecodeShape& s = *a.s;
  const int64_t D = s.head_dim, G = s.heads_q / s.heads_kv, Dv = D / kL * kL;
  const int64_t t0 = c * a.chunk, t1 = std::min(s.len_k, t0 + a.chunk);
  const T* kbase = static_cast<const T*>(a.k->data) + hk * a.k->stride_head;
  const T* vbase = static_cast<const T*>(a.v->data) + hk * a.v->stride_head;
  float* part = a.partial + (hk * a.n_chunks + c) * G * PartialSize(D);
  // m, l per query head; acc rows in part.
  float m[64], l[64];  // G <= 64 checked by the caller (else it loops over groups of 64)
  for (int64_t g = 0; g < G; ++g) {
    m[g] = -std::numeric_limits<float>::infinity();
    l[g] = 0;
    std::fill(part + g * PartialSize(D) + 2, part + (g + 1) * PartialSize(D), 0.0f);
  }
  alignas(64) float sc[64 * kBlock];  // s[g, j]
  for (int64_t b0 = t0; b0 < t1; b0 += kBlock) {
    const int64_t nb = std::min(kBlock, t1 - b0);
    // Scores.
    for (int64_t j = 0; j < nb; ++j) {
      const T* kr = kbase + (b0 + j) * a.k->stride_token;
      for (int64_t g = 0; g < G; ++g) {
        const float* qg = a.q + (hk * G + g) * D;
        VecF acc = simd::Zero();
        for (int64_t d = 0; d < Dv; d += kL) acc += simd::Load(qg + d) * Ld::Vec(kr + d);
        float dot = Sum(acc);
        for (int64_t d = Dv; d < D; ++d) dot += qg[d] * Ld::One(kr + d);
        sc[g * kBlock + j] = dot;
      }
    }
    // Online softmax update per query head.
    float alpha[64];
    for (int64_t g = 0; g < G; ++g) {
      float* sg = sc + g * kBlock;
      float bm = m[g];
      for (int64_t j = 0; j < nb; ++j) bm = std::max(bm, sg[j]);
      // All -inf (cannot happen with finite inputs): keep weights 0, avoid inf - inf.
      const float mn = std::isinf(bm) && bm < 0 ? 0.0f : bm;
      alpha[g] = simd::Exp2Scalar(m[g] - mn);
      int64_t j = 0;
      VecF sum = simd::Zero();
      for (; j + kL <= nb; j += kL) {
        const VecF p = simd::Exp2(simd::Load(sg + j) - simd::Set1(mn));
        simd::Store(sg + j, p);
        sum += p;
      }
      float tail = 0;
      for (; j < nb; ++j) {
        sg[j] = simd::Exp2Scalar(sg[j] - mn);
        tail += sg[j];
      }
      l[g] = l[g] * alpha[g] + simd::ReduceSum(sum) + tail;
      m[g] = bm;
    }
    // acc_g = alpha_g acc_g + sum_j p[g, j] v_j.
    for (int64_t g = 0; g < G; ++g) {
      float* acc = part + g * PartialSize(D) + 2;
      if (alpha[g] != 1.0f) {
        for (int64_t d = 0; d < D; ++d) acc[d] *= alpha[g];
      }
    }
    for (int64_t j = 0; j < nb; ++j) {
      const T* vr = vbase + (b0 + j) * a.v->stride_token;
      for (int64_t d = 0; d < Dv; d += kL) {
        const VecF vv = Ld::Vec(vr + d);
        for (int64_t g = 0; g < G; ++g) {
          float* acc = part + g * PartialSize(D) + 2 + d;
          simd::Store(acc, simd::Load(acc) + simd::Set1(sc[g * kBlock + j]) * vv);
        }
      }
      for (int64_t d = Dv; d < D; ++d) {
        const float vv = Ld::One(vr + d);
        for (int64_t g = 0; g < G; ++g) part[g * PartialSize(D) + 2 + d] += sc[g * kBlock + j] * vv;
      }
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    part[g * PartialSize(D)] = m[g];
    part[g * PartialSize(D) + 1] = l[g];
  }
}

Status ValidateKv(const char* name, const KvView& x, const DecodeShape& s,
                  internal::AddressRange* range) {
  return internal::ValidateView(name, x.data, x.size, 0, x.stride_head, x.stride_token, 1,
                                s.heads_kv, s.len_k, s.head_dim,
                                static_cast<size_t>(KvDtypeBytes(x.dtype)), false, range);
}

}  // namespace

Status AttentionDecode(const DecodeShape& s, const DecodeParams& params,
                       std::span<const float> q, const KvView& k, const KvView& v,
                       std::span<float> out, std::span<float> lse) {
  if (s.heads_q < 1 || s.heads_kv < 1 || s.len_k < 1 || s.head_dim < 1) {
    return Status::InvalidArgument("decode: heads_q, heads_kv, len_k and head_dim must be >= 1");
  }
  if (s.heads_q % s.heads_kv != 0) {
    return Status::InvalidArgument("decode: heads_q (" + std::to_string(s.heads_q) +
                                   ") is not a multiple of heads_kv (" +
                                   std::to_string(s.heads_kv) + ")");
  }
  if (s.heads_q / s.heads_kv > 64) {
    return Status::InvalidArgument("decode: at most 64 query heads per kv head, got " +
                                   std::to_string(s.heads_q / s.heads_kv));
  }
  if (k.dtype != v.dtype) return Status::InvalidArgument("decode: K and V dtypes differ");
  const int64_t qn = s.heads_q * s.head_dim;
  if (static_cast<int64_t>(q.size()) != qn || static_cast<int64_t>(out.size()) != qn) {
    return Status::InvalidArgument("decode: q and out must hold heads_q * head_dim = " +
                                   std::to_string(qn) + " floats, got " +
                                   std::to_string(q.size()) + " and " +
                                   std::to_string(out.size()));
  }
  if (!lse.empty() && static_cast<int64_t>(lse.size()) != s.heads_q) {
    return Status::InvalidArgument("decode: lse must be empty or hold heads_q floats");
  }
  if (!q.data() || !out.data()) return Status::InvalidArgument("decode: null q or out");
  internal::AddressRange rk, rv;
  ATTNLAB_RETURN_IF_ERROR(ValidateKv("k", k, s, &rk));
  ATTNLAB_RETURN_IF_ERROR(ValidateKv("v", v, s, &rv));
  const auto as_range = [](const void* p, int64_t bytes) {
    internal::AddressRange r;
    r.begin = static_cast<const char*>(p);
    r.end = r.begin + bytes;
    return r;
  };
  const internal::AddressRange ro = as_range(out.data(), qn * 4);
  ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("out", ro, "q", as_range(q.data(), qn * 4)));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("out", ro, "k", rk));
  ATTNLAB_RETURN_IF_ERROR(internal::CheckDisjoint("out", ro, "v", rv));
  if (!lse.empty()) {
    ATTNLAB_RETURN_IF_ERROR(
        internal::CheckDisjoint("lse", as_range(lse.data(), s.heads_q * 4), "out", ro));
  }
  const float scale = params.scale.value_or(1.0f / std::sqrt(static_cast<float>(s.head_dim)));
  if (!std::isfinite(scale)) return Status::InvalidArgument("decode: scale must be finite");

  ThreadPool& pool = params.pool ? *params.pool : DefaultThreadPool();
  const int64_t D = s.head_dim, G = s.heads_q / s.heads_kv;
  std::vector<float> qs(q.begin(), q.end());
  const float qscale = scale * 1.4426950408889634f;  // exp -> exp2
  for (float& x : qs) x *= qscale;
  // Chunks: enough tasks for every thread (4 per thread balances uneven heads), each at least
  // kMinChunk keys.
  const int64_t want = std::max<int64_t>(1, (4 * pool.num_threads() + s.heads_kv - 1) / s.heads_kv);
  const int64_t n_chunks =
      std::max<int64_t>(1, std::min(want, (s.len_k + kMinChunk - 1) / kMinChunk));
  const int64_t chunk = (s.len_k + n_chunks - 1) / n_chunks;
  std::vector<float> partial(s.heads_kv * n_chunks * G * PartialSize(D));
  Task task{&s, qs.data(), &k, &v, chunk, n_chunks, partial.data()};
  const auto run = [&](auto loader) {
    pool.ParallelFor(s.heads_kv * n_chunks, [&](int64_t t, int) {
      RunTask<decltype(loader)>(task, t / n_chunks, t % n_chunks);
    });
  };
  switch (k.dtype) {
    case KvDtype::kF32: run(LoadF32{}); break;
    case KvDtype::kBF16: run(LoadBF16{}); break;
    case KvDtype::kF16: run(LoadF16{}); break;
  }
  // Merge the chunks of each query head.
  for (int64_t h = 0; h < s.heads_q; ++h) {
    const int64_t hk = h / G, g = h % G;
    const auto rec = [&](int64_t c) {
      return partial.data() + ((hk * n_chunks + c) * G + g) * PartialSize(D);
    };
    float M = -std::numeric_limits<float>::infinity();
    bool nan = false;
    for (int64_t c = 0; c < n_chunks; ++c) {
      if (rec(c)[1] > 0 || std::isnan(rec(c)[0])) M = std::max(M, rec(c)[0]);
      nan = nan || std::isnan(rec(c)[0]) || std::isnan(rec(c)[1]);
    }
    float* o = out.data() + h * D;
    std::fill(o, o + D, 0.0f);
    double L = 0;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const float* r = rec(c);
      if (!(r[1] > 0)) continue;
      const float w = simd::Exp2Scalar(r[0] - M);
      L += static_cast<double>(r[1]) * w;
      for (int64_t d = 0; d < D; ++d) o[d] += w * r[2 + d];
    }
    const float inv = static_cast<float>(1.0 / L);
    for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    if (nan) std::fill(o, o + D, std::numeric_limits<float>::quiet_NaN());
    if (!lse.empty()) {
      lse[h] = nan ? std::numeric_limits<float>::quiet_NaN()
                   : static_cast<float>((static_cast<double>(M) + std::log2(L)) *
                                        0.6931471805599453);
    }
  }
  return Status::Ok();
}

}  // namespace attnlab
