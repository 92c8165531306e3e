// attnlab/attention_decode.h: one query token per head against a key/value cache stored in
// fp32, bf16 or fp16 (decode in autoregressive generation), fp32 accumulation.
//
// Decode is memory-bound: each step reads the whole cache, 2 * len * heads_kv * head_dim
// elements, and does ~4 FLOPs per element read. Storing the cache in 16 bits halves the bytes
// per step (and the cache's memory); the kernel converts each element to fp32 as it loads it
// (bf16: the top half of an fp32; fp16: IEEE half, F16C/AVX512-FP16 conversion) and accumulates
// in fp32, so the only accuracy cost is the rounding of K and V on insertion (relative 2^-8 for
// bf16, 2^-11 for fp16; fp16 also overflows to Inf above 65504, so bf16 is the safe choice for
// activations of unknown range).
//
// Split-K ("flash-decoding", Dao et al. 2023): the keys of each kv head are cut into chunks,
// every (kv head, chunk) is a task with its own online-softmax partial (max, sum, accumulator)
// for the group's query heads, and the partials are merged exactly afterwards, so a few heads
// still use every thread.
#ifndef ATTNLAB_ATTENTION_DECODE_H_
#define ATTNLAB_ATTENTION_DECODE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "attnlab/status.h"

namespace attnlab {

class ThreadPool;

enum class KvDtype { kF32, kBF16, kF16 };

int64_t KvDtypeBytes(KvDtype dtype);           // 4, 2, 2
std::string_view KvDtypeName(KvDtype dtype);   // "f32", "bf16", "f16"
Result<KvDtype> ParseKvDtype(std::string_view name);

// Conversions used to fill a 16-bit cache. bf16: round to nearest even (NaN stays NaN, never
// becomes Inf). fp16: round to nearest even; values beyond the fp16 range become +-Inf.
uint16_t FloatToBf16(float x);
float Bf16ToFloat(uint16_t x);
uint16_t FloatToF16(float x);
float F16ToFloat(uint16_t x);
// n elements from src (fp32) into dst in `dtype` (dst holds n * KvDtypeBytes(dtype) bytes).
void ConvertToKvDtype(const float* src, int64_t n, KvDtype dtype, void* dst);
// Back to fp32 (for references and tests).
void ConvertFromKvDtype(const void* src, int64_t n, KvDtype dtype, float* dst);

// A cache tensor: element (h, t, d) of head h, token t, dimension d at
// data + (h * stride_head + t * stride_token + d) * KvDtypeBytes(dtype) bytes.
struct KvView {
  const void* data = nullptr;
  KvDtype dtype = KvDtype::kF32;
  int64_t size = 0;  // elements addressable from data
  int64_t stride_head = 0;
  int64_t stride_token = 0;
};

struct DecodeShape {
  int64_t heads_q = 1;
  int64_t heads_kv = 1;  // divides heads_q (GQA / MQA)
  int64_t len_k = 1;     // >= 1
  int64_t head_dim = 1;
};

struct DecodeParams {
  std::optional<float> scale;  // default 1/sqrt(head_dim)
  ThreadPool* pool = nullptr;  // nullptr: DefaultThreadPool()
};

// out[h, :] = softmax(scale * q[h, :] . K[hk, t, :] over t) V[hk, t, :], hk = h / (heads_q /
// heads_kv); every key is visible (the new token attends to the whole cache). q and out:
// [heads_q, head_dim] contiguous fp32; lse: [heads_q] natural-log log-sum-exp of the scaled
// scores, or empty. Validates shapes, sizes and aliasing first; NaN in q, K or V propagates.
Status AttentionDecode(const DecodeShape& shape, const DecodeParams& params,
                       std::span<const float> q, const KvView& k, const KvView& v,
                       std::span<float> out, std::span<float> lse = {});

// 2 * heads_kv * len_k * head_dim * bytes: what one decode step must read.
int64_t AttentionDecodeBytes(const DecodeShape& shape, KvDtype dtype);

}  // namespace attnlab

#endif  // ATTNLAB_ATTENTION_DECODE_H_
