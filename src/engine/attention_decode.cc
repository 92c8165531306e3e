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
// This file validates, chunks and merges; the task body is in attention_decode_kernel.cc,
// compiled per SIMD target (engine/kernel_table.h).
//
#include "attnlab/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnlab/thread_pool.h"
#include "engine/attention_validate.h"
#include "engine/kernel_table.h"
#include "engine/simd.h"


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

// IEEE binary16 by bit manipulation (not _Float16: clang 14 has it on x86 only with AVX512-FP16,
// and the baseline build must not depend on it). Round to nearest, ties to even; overflow to
// +-Inf; NaN stays a (quiet) NaN. Checked against GCC's _Float16 on every half and 2^20 floats
// (attention_decode_test.cc).
uint16_t FloatToF16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((u >> 13) & 0x3ffu);  // NaN
  if (u >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf (and Inf itself)
  if (u >= 0x38800000u) {                       // normal half: rebias the exponent, round
    const uint32_t r = u - 0x38000000u;
    return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
  }
  // Zero or subnormal half: the value in units of 2^-24, rounded to nearest even (exact in
  // float: |x| * 2^24 < 2^10 has 13 fraction bits to spare; 1024 becomes the smallest normal).
  float f;
  std::memcpy(&f, &u, 4);
  return sign | static_cast<uint16_t>(std::nearbyint(f * 16777216.0f));
}

float F16ToFloat(uint16_t x) {
  const uint32_t sign = static_cast<uint32_t>(x & 0x8000u) << 16;
  const uint32_t exp = (x >> 10) & 0x1fu, mant = x & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (exp == 31) {  // Inf or NaN
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
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

constexpr int64_t kMinChunk = 256; // keys per task at least (the merge costs ~G * D per chunk)

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
  std::vector<float> partial(s.heads_kv * n_chunks * G * internal::DecodePartialSize(D));
  const internal::DecodeArgs task{&s, qs.data(), &k, &v, chunk, n_chunks, partial.data()};
  const internal::KernelTable& kernels = internal::ActiveKernels();
  pool.ParallelFor(s.heads_kv * n_chunks, [&](int64_t t, int) {
    kernels.decode_task(task, t / n_chunks, t % n_chunks);
  });
  // Merge the chunks of each query head.
  for (int64_t h = 0; h < s.heads_q; ++h) {
    const int64_t hk = h / G, g = h % G;
    const auto rec = [&](int64_t c) {
      return partial.data() + ((hk * n_chunks + c) * G + g) * internal::DecodePartialSize(D);
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
