#include "diagnostics/token_class_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "engine/attention_explicit.h"
#include "engine/gemm.h"
#include "engine/kernel_table.h"

namespace attnlab {
namespace {

constexpr double kLog2e = 1.4426950408889634074;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kPad = 16;  // the row kernels read rows padded to a multiple of 16

bool PlainMask(const AttentionMask& m) {
  return m.window_left < 0 && m.window_right < 0 && m.n_sink == 0 && m.n_global == 0 &&
         !m.explicit_mask;
}

}  // namespace

std::string TokenClassName(int c) {
  switch (c) {
    case kClassFirst: return "first";
    case kClassRecent: return "recent";
    case kClassDelimiter: return "delimiter";
    case kClassWhitespace: return "whitespace";
    case kClassSpecial: return "special";
    default: return "freq_d" + std::to_string(c - kClassDecile1 + 1);
  }
}

uint32_t TokenTextClasses(std::string_view text) {
  bool any_punct = false, all_space = !text.empty();
  for (unsigned char ch : text) {
    const bool space = ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
    const bool punct = ch < 0x80 && std::ispunct(ch);
    if (!space && !punct) return 0;  // a letter, digit, control or non-ASCII byte
    all_space = all_space && space;
    any_punct = any_punct || punct;
  }
  if (all_space) return 1u << kClassWhitespace;
  return any_punct ? 1u << kClassDelimiter : 0u;
}

std::vector<uint32_t> FrequencyDecileClasses(std::span<const int32_t> tokens, int64_t vocab) {
  std::vector<int64_t> count(std::max<int64_t>(vocab, 0), 0);
  int64_t total = 0;
  for (int32_t t : tokens) {
    if (t >= 0 && t < vocab) ++count[t], ++total;
  }
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < vocab; ++i) {
    if (count[i] > 0) ids.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return count[a] > count[b]; });
  std::vector<uint32_t> out(count.size(), 0);
  int64_t before = 0;
  for (int32_t id : ids) {
    const int64_t d = std::min<int64_t>(9, before * 10 / total);
    out[id] = 1u << (kClassDecile1 + d);
    before += count[id];
  }
  return out;
}

Result<TokenClassAccumulator> TokenClassAccumulator::Create(const TokenClassOptions& o,
                                                            int64_t heads_q, int64_t heads_kv,
                                                            int64_t head_dim) {
  if (heads_q < 1 || heads_kv < 1 || heads_q % heads_kv != 0 || head_dim < 1) {
    return Status::InvalidArgument("token classes: heads_q must be a positive multiple of heads_kv "
                                   "and head_dim >= 1");
  }
  if (o.first_k < 0 || o.recent < 0 || o.rows_per_window < 1) {
    return Status::InvalidArgument("token classes: first_k and recent must be >= 0 and "
                                   "rows_per_window >= 1");
  }
  TokenClassAccumulator a(o, heads_q, heads_kv, head_dim);
  a.mass_.assign(heads_q * kNumTokenClasses, 0.0);
  a.uniform_.assign(heads_q * kNumTokenClasses, 0.0);
  return a;
}

bool TokenClassAccumulator::Supports(const AttentionParams& p) {
  return p.softmax == SoftmaxKind::kStandard || p.softmax == SoftmaxKind::kSoftmax1 ||
         p.softmax == SoftmaxKind::kSinkLogit;
}

Status TokenClassAccumulator::BeginWindow(std::vector<uint32_t> key_classes) {
  EndWindow();
  const int64_t keys = static_cast<int64_t>(key_classes.size());
  for (int64_t j = 0; j < keys && j < o_.first_k; ++j) key_classes[j] |= 1u << kClassFirst;
  labels_ = std::move(key_classes);
  prefix_.assign(kNumTokenClasses * (keys + 1), 0);  // prefix_[c][j]: keys < j in class c
  for (int c = 0; c < kNumTokenClasses; ++c) {
    int32_t* pc = prefix_.data() + c * (keys + 1);
    for (int64_t j = 0; j < keys; ++j) pc[j + 1] = pc[j] + ((labels_[j] >> c) & 1u);
  }
  stride_ = std::max<int64_t>(1, (keys + o_.rows_per_window - 1) / o_.rows_per_window);
  key_mass_.assign(heads_q_ * keys, 0.0f);
  return Status::Ok();
}

void TokenClassAccumulator::EndWindow() {
  const int64_t keys = static_cast<int64_t>(labels_.size());
  for (int64_t h = 0; h < heads_q_ && !key_mass_.empty(); ++h) {
    double* m = mass_.data() + h * kNumTokenClasses;
    const float* km = key_mass_.data() + h * keys;
    for (int64_t j = 0; j < keys; ++j) {
      for (uint32_t bits = labels_[j]; bits; bits &= bits - 1) m[__builtin_ctz(bits)] += km[j];
    }
  }
  // Released, not only cleared: one accumulator per layer lives through the whole analysis,
  // and a long window's buffers are megabytes each.
  std::vector<float>().swap(key_mass_);
  std::vector<uint32_t>().swap(labels_);
  std::vector<int32_t>().swap(prefix_);
}

Status TokenClassAccumulator::AddRows(const AttentionParams& params, const float* q,
                                      int64_t q_row_stride, int64_t len_q,
                                      const AttentionTensor& k_all, int64_t len_k,
                                      std::span<const float> row_extra_logits) {
  const int64_t keys = static_cast<int64_t>(labels_.size());
  if (len_q < 1 || len_q > len_k || len_k > keys) {
    return Status::InvalidArgument("token classes: rows [" + std::to_string(len_k - len_q) + ", " +
                                   std::to_string(len_k) + ") do not fit the window's " +
                                   std::to_string(keys) + " keys");
  }
  return AddRowsAt(params, q, q_row_stride, len_q, len_k - len_q, 1, k_all, len_k,
                   row_extra_logits);
}

Status TokenClassAccumulator::AddStripedRows(const AttentionParams& params, const float* q,
                                             int64_t q_row_stride, int64_t rank, int64_t ranks,
                                             const AttentionTensor& k_all, int64_t len_k,
                                             std::span<const float> row_extra_logits) {
  const int64_t keys = static_cast<int64_t>(labels_.size());
  if (ranks < 1 || rank < 0 || rank >= ranks || len_k < 1 || len_k > keys) {
    return Status::InvalidArgument("token classes: striped rows of rank " + std::to_string(rank) +
                                   " of " + std::to_string(ranks) + " over " +
                                   std::to_string(len_k) + " keys do not fit the window's " +
                                   std::to_string(keys) + " keys");
  }
  const int64_t len_q = len_k > rank ? (len_k - rank + ranks - 1) / ranks : 0;
  if (len_q == 0) return Status::Ok();  // more ranks than rows: none here
  return AddRowsAt(params, q, q_row_stride, len_q, rank, ranks, k_all, len_k, row_extra_logits);
}

// Query i of q sits at key position first + i step.
Status TokenClassAccumulator::AddRowsAt(const AttentionParams& params, const float* q,
                                        int64_t q_row_stride, int64_t len_q, int64_t first,
                                        int64_t step, const AttentionTensor& k_all, int64_t len_k,
                                        std::span<const float> row_extra_logits) {
  const int64_t Hq = heads_q_;
  if (!Supports(params)) return Status::InvalidArgument("token classes: softmax-family weights only");
  const auto pos = [&](int64_t i) { return first + i * step; };
  if (!row_extra_logits.empty() && static_cast<int64_t>(row_extra_logits.size()) != Hq * len_q) {
    return Status::InvalidArgument("token classes: row_extra_logits needs heads_q * len_q values");
  }
  const AttentionMask& mask = params.mask;
  if (!mask.causal && (mask.window_left >= 0 || mask.window_right >= 0)) {
    return Status::InvalidArgument("token classes: a non-causal windowed mask is not supported");
  }
  std::vector<int64_t> sampled;  // the sampled rows of this call (indices into q)
  for (int64_t i = 0; i < len_q; ++i) {
    if (pos(i) % stride_ == 0) sampled.push_back(i);
  }
  // In blocks of rows: the scores and the GEMM's output take (Hq + Hq / Hkv) x rows x keys
  // floats (a striped rank's whole window comes in one call: 512 rows x 32k keys x 14 heads
  // would be 0.9 GB at once), so a block holds at most kSampleBlock rows and kScoreFloats.
  const int64_t per_row = (Hq + Hq / heads_kv_) * std::max<int64_t>(1, len_k);
  const size_t block = static_cast<size_t>(
      std::clamp<int64_t>(kScoreFloats / per_row, 1, static_cast<int64_t>(kSampleBlock)));
  for (size_t b0 = 0; b0 < sampled.size(); b0 += block) {
    const std::vector<int64_t> rows(
        sampled.begin() + b0, sampled.begin() + std::min(sampled.size(), b0 + block));
    ATTNLAB_RETURN_IF_ERROR(AddSampledRows(params, q, q_row_stride, len_q, first, step, k_all,
                                           len_k, row_extra_logits, rows));
  }
  return Status::Ok();
}

// The sampled rows `rows` (indices into q, increasing) of AddRowsAt's call.
Status TokenClassAccumulator::AddSampledRows(const AttentionParams& params, const float* q,
                                             int64_t q_row_stride, int64_t len_q, int64_t first,
                                             int64_t step, const AttentionTensor& k_all,
                                             int64_t len_k, std::span<const float> row_extra_logits,
                                             const std::vector<int64_t>& rows) {
  const int64_t Hq = heads_q_, Hkv = heads_kv_, hd = head_dim_, group = Hq / Hkv;
  const int64_t keys = static_cast<int64_t>(labels_.size());
  const auto pos = [&](int64_t i) { return first + i * step; };
  const AttentionMask& mask = params.mask;
  const int64_t R = static_cast<int64_t>(rows.size());
  const int64_t p_last = pos(rows.back());
  const int64_t L = mask.causal ? p_last + 1 : len_k;  // keys any sampled row may see
  const int64_t ld = (L + kPad - 1) / kPad * kPad;
  const double scale = params.scale ? *params.scale : 1.0 / std::sqrt(static_cast<double>(hd));
  // scores[h][r][0, ld): base-2 scores of sampled row r, -inf where invisible and as padding.
  // This call's own (a member kept at its peak would hold Hq x 64 x keys floats per layer while
  // a sequence-parallel window has every layer's accumulator open: 0.7 GB at 8k tokens).
  std::vector<float> scores(Hq * R * ld, kNegInf);
  if (PlainMask(mask)) {
    // One GEMM per KV head over its group's query heads and the sampled rows; then causality
    // and mask_first_key by hand.
    std::vector<float> qb(group * R * hd), sb(group * R * ld);
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t e = 0; e < group; ++e) {
        for (int64_t r = 0; r < R; ++r) {
          const float* src = q + rows[r] * q_row_stride + (g * group + e) * hd;
          std::copy(src, src + hd, qb.data() + (e * R + r) * hd);
        }
      }
      internal::Sgemm(internal::Trans::kNo, internal::Trans::kYes, group * R, L, hd,
                      static_cast<float>(scale * kLog2e), qb.data(), hd, k_all.at(0, g, 0),
                      k_all.stride_token, 0.0f, sb.data(), ld, params.pool);
      for (int64_t e = 0; e < group; ++e) {
        for (int64_t r = 0; r < R; ++r) {
          const int64_t p = pos(rows[r]);
          const int64_t visible = mask.causal ? p + 1 : L;
          float* dst = scores.data() + ((g * group + e) * R + r) * ld;
          std::copy_n(sb.data() + (e * R + r) * ld, visible, dst);
          if (mask.mask_first_key) dst[0] = kNegInf;
        }
      }
    }
  } else {
    // Any other mask: attention's own visibility, one row at a time (query at position p).
    std::vector<float> s;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t p = pos(rows[r]);
      const AttentionShape shape{1, Hq, Hkv, 1, p + 1, hd};
      AttentionTensor qv;
      qv.data = q + rows[r] * q_row_stride, qv.size = Hq * hd;
      qv.stride_head = hd, qv.stride_token = q_row_stride, qv.stride_batch = Hq * hd;
      s.assign(Hq * (p + 1), 0.0f);
      ATTNLAB_RETURN_IF_ERROR(AttentionScores(shape, params, qv, k_all, s));
      for (int64_t h = 0; h < Hq; ++h) {
        float* dst = scores.data() + (h * R + r) * ld;
        for (int64_t j = 0; j <= p; ++j) dst[j] = static_cast<float>(s[h * (p + 1) + j] * kLog2e);
      }
    }
  }
  const internal::RowStatsTable& kern = internal::ActiveKernels().row_stats;
  const bool plain = PlainMask(mask);
  std::vector<double> counts(kNumTokenClasses);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t i = rows[r], p = pos(i);
    bool any_row = false;
    for (int64_t h = 0; h < Hq; ++h) {
      float* t = scores.data() + (h * R + r) * ld;
      // The row's extra denominator terms, base 2: softmax1's e^0, a sink logit, key_bias's s*.
      std::vector<double> extra;
      if (params.softmax == SoftmaxKind::kSoftmax1) extra.push_back(0.0);
      if (params.softmax == SoftmaxKind::kSinkLogit) extra.push_back(params.sink_logits[h] * kLog2e);
      if (!row_extra_logits.empty()) extra.push_back(row_extra_logits[h * len_q + i] * kLog2e);
      double m2 = kern.row_max(t, ld);
      for (double x : extra) m2 = std::max(m2, x);
      if (m2 == -std::numeric_limits<double>::infinity()) continue;  // no visible key or term
      double s0 = kern.softmax_row_sums(t, ld, static_cast<float>(m2), 0).s0;
      for (double x : extra) s0 += std::exp2(x - m2);
      const float lse2 = static_cast<float>(m2 + std::log2(s0));
      kern.exp2_accumulate(t, L, lse2, key_mass_.data() + h * keys);
      double recent = 0;
      for (int64_t j = std::max<int64_t>(0, p - o_.recent + 1); j <= p && j < L; ++j) {
        recent += std::exp2(static_cast<double>(t[j]) - lse2);
      }
      mass_[h * kNumTokenClasses + kClassRecent] += recent;
      // The uniform baseline over this head's visible keys: by prefix counts for a plain
      // mask (keys [0, vis), key 0 out with mask_first_key), else by looking at each key.
      std::fill(counts.begin(), counts.end(), 0.0);
      int64_t visible = 0;
      if (plain) {
        const int64_t vis = mask.causal ? p + 1 : L;
        const int64_t j0 = mask.mask_first_key ? 1 : 0;
        visible = std::max<int64_t>(0, vis - j0);
        for (int c = 0; c < kNumTokenClasses; ++c) {
          counts[c] = prefix_[c * (keys + 1) + vis] - prefix_[c * (keys + 1) + std::min(j0, vis)];
        }
        // The recent keys [p - recent + 1, p] that are visible (p < vis always).
        counts[kClassRecent] = static_cast<double>(
            std::max<int64_t>(0, p - std::max<int64_t>(j0, p - o_.recent + 1) + 1));
      } else {
        for (int64_t j = 0; j < L; ++j) {
          if (t[j] == kNegInf) continue;
          ++visible;
          for (uint32_t bits = labels_[j]; bits; bits &= bits - 1) counts[__builtin_ctz(bits)] += 1;
          if (p - j >= 0 && p - j < o_.recent) counts[kClassRecent] += 1;
        }
      }
      if (visible == 0) continue;
      any_row = true;
      for (int c = 0; c < kNumTokenClasses; ++c) {
        uniform_[h * kNumTokenClasses + c] += counts[c] / static_cast<double>(visible);
      }
    }
    if (any_row) ++rows_;
  }
  return Status::Ok();
}

TokenClassStats TokenClassAccumulator::Finish() {
  EndWindow();
  TokenClassStats s;
  s.rows = rows_;
  const double n = static_cast<double>(std::max<int64_t>(rows_, 1));
  for (int64_t h = 0; h < heads_q_; ++h) {
    std::vector<double> m(kNumTokenClasses), u(kNumTokenClasses);
    for (int c = 0; c < kNumTokenClasses; ++c) {
      m[c] = mass_[h * kNumTokenClasses + c] / n;
      u[c] = uniform_[h * kNumTokenClasses + c] / n;
    }
    s.mass.push_back(std::move(m));
    s.uniform.push_back(std::move(u));
  }
  return s;
}

Status TokenClassAccumulator::AllReduce(dist::Comm& comm, const std::string& what) {
  EndWindow();
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(mass_), what + " (mass)"));
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<double>(uniform_), what + " (uniform)"));
  std::vector<int64_t> rows{rows_};
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(std::span<int64_t>(rows), what + " (rows)"));
  rows_ = rows[0];
  return Status::Ok();
}

}  // namespace attnlab
