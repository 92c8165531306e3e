// Rotary position embeddings: frequencies, the cos/sin table, and the in-place rotation kernels.
// Semantics are defined in include/attnlab/rope.h.
#include "attnlab/rope.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>

#include "attnlab/thread_pool.h"
#include "engine/attention_validate.h"

namespace attnlab {

namespace {

std::string Str(int64_t x) { return std::to_string(x); }
std::string Num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

// Same limit as the attention kernels' dimensions.
constexpr int64_t kMaxDim = int64_t{1} << 31;

// ------------------------------------------------------------------------------------------------
// The rotation of one token vector. sign = +1: forward (y = A R(angle) x); sign = -1: the
// transpose (dx = A R(-angle) dy). cos_a / sin_a: [pairs], already times A.
template <typename T, RopeLayout kLayout>
void RotateToken(T* __restrict x, const float* __restrict cos_a, const float* __restrict sin_a,
                 int64_t pairs, T sign) {
  // Pair i is (x[i], x[i + pairs]) for NeoX (two contiguous halves: vectorises), (x[2i], x[2i + 1])
  // for GPT-J.
  constexpr int64_t step = kLayout == RopeLayout::kNeox ? 1 : 2;
  const int64_t other = kLayout == RopeLayout::kNeox ? pairs : 1;
  for (int64_t i = 0; i < pairs; ++i) {
    T* a = x + i * step;
    T* b = a + other;
    const T c = static_cast<T>(cos_a[i]);
    const T s = sign * static_cast<T>(sin_a[i]);
    const T xa = *a, xb = *b;
    *a = xa * c - xb * s;
    *b = xa * s + xb * c;
  }
}

Status ValidatePositions(const RopeTable& table, int64_t len, std::span<const int64_t> positions) {
  if (static_cast<int64_t>(positions.size()) != len) {
    return Status::InvalidArgument("rope: expected one position per token (" + Str(len) +
                                   "), got " + Str(static_cast<int64_t>(positions.size())));
  }
  for (size_t t = 0; t < positions.size(); ++t) {
    const int64_t p = positions[t];
    if (p < 0 || p >= table.max_position()) {
      return Status::OutOfRange("rope: position " + Str(p) + " of token " +
                                Str(static_cast<int64_t>(t)) + " is outside the table's [0, " +
                                Str(table.max_position()) +
                                "); build the RopeTable with a larger max_position");
    }
  }
  return Status::Ok();
}

template <typename T>
Status RopeApply(const char* what, const RopeTable& table, const TensorView4<T>& x, int64_t batch,
                 int64_t heads, int64_t len, std::span<const int64_t> positions, T sign) {
  if (batch < 0 || heads < 0 || len < 0) {
    return Status::InvalidArgument(std::string(what) + ": batch, heads and len must be >= 0, got " +
                                   Str(batch) + ", " + Str(heads) + ", " + Str(len));
  }
  if (batch > kMaxDim || heads > kMaxDim || len > kMaxDim) {
    return Status::OutOfRange(std::string(what) + ": batch, heads and len must be <= 2^31");
  }
  ATTNLAB_RETURN_IF_ERROR(ValidatePositions(table, len, positions).WithContext(what));
  if (batch == 0 || heads == 0 || len == 0) return Status::Ok();
  internal::AddressRange range;
  // In place: x is an output, so it must not alias itself.
  ATTNLAB_RETURN_IF_ERROR(
      internal::ValidateView4(what, x, batch, heads, len, table.head_dim(), true, &range));

  const int64_t pairs = table.pairs();
  const bool neox = table.config().layout == RopeLayout::kNeox;
  // Threaded over (batch, head): every token vector is rotated independently.
  DefaultThreadPool().ParallelFor(batch * heads, [&](int64_t bh, int) {
    const int64_t b = bh / heads, h = bh % heads;
    for (int64_t t = 0; t < len; ++t) {
      const float* c = table.Cos(positions[t]).data();
      const float* s = table.Sin(positions[t]).data();
      if (neox) {
        RotateToken<T, RopeLayout::kNeox>(x.at(b, h, t), c, s, pairs, sign);
      } else {
        RotateToken<T, RopeLayout::kGptJ>(x.at(b, h, t), c, s, pairs, sign);
      }
    }
  });
  return Status::Ok();
}

template <typename T>
void RotateVectorImpl(const RopeTable& table, T* x, int64_t position_delta) {
  const std::vector<double>& freqs = table.Frequencies();
  const int64_t pairs = table.pairs();
  const RopeLayout layout = table.config().layout;
  const int64_t step = layout == RopeLayout::kNeox ? 1 : 2;
  const int64_t other = layout == RopeLayout::kNeox ? pairs : 1;
  const double delta = static_cast<double>(position_delta);
  for (int64_t i = 0; i < pairs; ++i) {
    const double angle = delta * freqs[i];
    const double c = std::cos(angle), s = std::sin(angle);
    T* a = x + i * step;
    T* b = a + other;
    const double xa = static_cast<double>(*a), xb = static_cast<double>(*b);
    *a = static_cast<T>(xa * c - xb * s);
    *b = static_cast<T>(xa * s + xb * c);
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Configuration and frequencies.

Status ValidateRope(const RopeConfig& c) {
  if (c.head_dim <= 0) {
    return Status::InvalidArgument("rope: head_dim must be >= 1, got " + Str(c.head_dim));
  }
  if (c.head_dim > kMaxDim) {
    return Status::OutOfRange("rope: head_dim = " + Str(c.head_dim) + " exceeds the limit 2^31");
  }
  if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return Status::InvalidArgument(
        "rope: rotary_dim must be even and in [2, head_dim = " + Str(c.head_dim) + "], got " +
        Str(c.rotary_dim) + " (use rotary_dim = head_dim for full rotary)");
  }
  if (!std::isfinite(c.base) || c.base <= 1.0) {
    return Status::InvalidArgument("rope: base must be finite and > 1 (typically 10000), got " +
                                   Num(c.base));
  }
  if (c.layout != RopeLayout::kNeox && c.layout != RopeLayout::kGptJ) {
    return Status::InvalidArgument("rope: unknown layout " + Str(static_cast<int64_t>(c.layout)));
  }
  if (!std::isfinite(c.factor) || c.factor < 1.0) {
    return Status::InvalidArgument(
        "rope: scaling factor must be finite and >= 1 (it extends the context by that much), "
        "got " +
        Num(c.factor));
  }
  if (c.original_context < 0) {
    return Status::InvalidArgument("rope: original_context must be >= 0, got " +
                                   Str(c.original_context));
  }
  switch (c.scaling) {
    case RopeScaling::kNone:
      if (c.factor != 1.0) {
        return Status::InvalidArgument("rope: factor is " + Num(c.factor) +
                                       " but scaling is none; choose a scaling (linear, ntk, "
                                       "yarn) or set factor = 1");
      }
      break;
    case RopeScaling::kLinear:
      break;
    case RopeScaling::kNtk:
      if (c.rotary_dim < 4) {
        return Status::InvalidArgument(
            "rope: NTK scaling needs rotary_dim >= 4 (base' = base * s^(d/(d-2))), got " +
            Str(c.rotary_dim));
      }
      break;
    case RopeScaling::kYarn:
      if (c.original_context <= 0) {
        return Status::InvalidArgument(
            "rope: YaRN needs original_context, the model's training context length (e.g. "
            "4096), got " +
            Str(c.original_context));
      }
      if (!std::isfinite(c.yarn_alpha) || !std::isfinite(c.yarn_beta) || c.yarn_alpha < 0 ||
          c.yarn_beta <= c.yarn_alpha) {
        return Status::InvalidArgument("rope: YaRN needs 0 <= alpha < beta (defaults 1, 32), got " +
                                       Num(c.yarn_alpha) + ", " + Num(c.yarn_beta));
      }
      break;
    case RopeScaling::kYarnHf:
      if (c.original_context <= 0) {
        return Status::InvalidArgument("rope: YaRN needs original_context > 0, got " +
                                       Str(c.original_context));
      }
      if (!std::isfinite(c.attention_factor) || c.attention_factor < 0) {
        return Status::InvalidArgument("rope: YaRN's attention_factor must be >= 0, got " +
                                       Num(c.attention_factor));
      }
      break;
    case RopeScaling::kDynamicHf:
      if (c.original_context <= 0 || c.rotary_dim < 4 || c.dynamic_length < 0) {
        return Status::InvalidArgument(
            "rope: dynamic NTK scaling needs original_context (max_position_embeddings) > 0, "
            "rotary_dim >= 4 and dynamic_length >= 0, got " + Str(c.original_context) + ", " +
            Str(c.rotary_dim) + ", " + Str(c.dynamic_length));
      }
      break;
    case RopeScaling::kLlama3:
      if (c.original_context <= 0) {
        return Status::InvalidArgument(
            "rope: llama3 scaling needs original_context (original_max_position_embeddings) > 0");
      }
      if (!std::isfinite(c.low_freq_factor) || !std::isfinite(c.high_freq_factor) ||
          c.low_freq_factor <= 0 || c.high_freq_factor <= c.low_freq_factor) {
        return Status::InvalidArgument(
            "rope: llama3 scaling needs 0 < low_freq_factor < high_freq_factor, got " +
            Num(c.low_freq_factor) + ", " + Num(c.high_freq_factor));
      }
      break;
    default:
      return Status::InvalidArgument("rope: unknown scaling " +
                                     Str(static_cast<int64_t>(c.scaling)));
  }
  return Status::Ok();
}

double YarnAttentionFactor(double s) { return 0.1 * std::log(s) + 1.0; }

Result<std::vector<double>> RopeFrequencies(const RopeConfig& c) {
  ATTNLAB_RETURN_IF_ERROR(ValidateRope(c));
  const int64_t pairs = c.rotary_dim / 2;
  const double d = static_cast<double>(c.rotary_dim);
  const double s = c.factor;
  // ref: NTK-aware, https://www.reddit.com/r/LocalLLaMA/comments/14lz7j5/ (bloc97 2023).
  double base = c.scaling == RopeScaling::kNtk ? c.base * std::pow(s, d / (d - 2.0)) : c.base;
  if (c.scaling == RopeScaling::kDynamicHf) {  // ref: transformers' _compute_dynamic_ntk_parameters
    const double L = static_cast<double>(c.original_context);
    const double S = std::max(static_cast<double>(c.dynamic_length), L);
    base = c.base * std::pow(s * S / L - (s - 1.0), d / (d - 2.0));
  }
  std::vector<double> freqs(pairs);
  // kYarnHf's ramp over pair indices (transformers' find_correction_range, linear_ramp_factor).
  double ramp_lo = 0, ramp_hi = 1;
  if (c.scaling == RopeScaling::kYarnHf) {
    auto correction_dim = [&](double rotations) {
      return d * std::log(static_cast<double>(c.original_context) /
                          (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(c.base));
    };
    ramp_lo = std::max(0.0, std::floor(correction_dim(c.yarn_beta)));
    ramp_hi = std::min(d - 1.0, std::ceil(correction_dim(c.yarn_alpha)));
    if (ramp_lo == ramp_hi) ramp_hi += 0.001;
  }
  for (int64_t i = 0; i < pairs; ++i) {
    const double theta = std::pow(base, -2.0 * static_cast<double>(i) / d);
    switch (c.scaling) {
      case RopeScaling::kNone:
      case RopeScaling::kNtk:
      case RopeScaling::kDynamicHf:
        freqs[i] = theta;
        break;
      case RopeScaling::kLinear:  // ref: https://arxiv.org/abs/2306.15595
        freqs[i] = theta / s;
        break;
      case RopeScaling::kYarn: {  // ref: https://arxiv.org/abs/2309.00071 (eqs. 16-18)
        const double wavelength = 2.0 * std::numbers::pi / theta;
        const double r = static_cast<double>(c.original_context) / wavelength;
        double gamma;
        if (r < c.yarn_alpha) {
          gamma = 0.0;
        } else if (r > c.yarn_beta) {
          gamma = 1.0;
        } else {
          gamma = (r - c.yarn_alpha) / (c.yarn_beta - c.yarn_alpha);
        }
        freqs[i] = (1.0 - gamma) * theta / s + gamma * theta;
        break;
      }
      case RopeScaling::kYarnHf: {
        const double ramp =
            std::clamp((static_cast<double>(i) - ramp_lo) / (ramp_hi - ramp_lo), 0.0, 1.0);
        freqs[i] = theta / s * ramp + theta * (1.0 - ramp);
        break;
      }
      case RopeScaling::kLlama3: {  // ref: transformers' _compute_llama3_parameters
        const double L = static_cast<double>(c.original_context);
        const double w = 2.0 * std::numbers::pi / theta;
        if (w < L / c.high_freq_factor) {
          freqs[i] = theta;
        } else if (w > L / c.low_freq_factor) {
          freqs[i] = theta / s;
        } else {
          const double k =
              (L / w - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
          freqs[i] = (1.0 - k) * theta / s + k * theta;
        }
        break;
      }
    }
  }
  return freqs;
}

// ------------------------------------------------------------------------------------------------
// The table.

Result<RopeTable> RopeTable::Make(const RopeConfig& config, int64_t max_position) {
  ATTNLAB_ASSIGN_OR_RETURN(std::vector<double> freqs, RopeFrequencies(config));
  if (max_position < 1) {
    return Status::InvalidArgument("rope: max_position must be >= 1, got " + Str(max_position));
  }
  if (max_position > kMaxDim ||
      static_cast<__int128>(max_position) * config.rotary_dim > static_cast<__int128>(kMaxDim)) {
    return Status::OutOfRange("rope: table of " + Str(max_position) + " positions x " +
                              Str(config.rotary_dim) +
                              " rotary dims exceeds 2^31 entries; lower max_position");
  }
  RopeTable t;
  t.config_ = config;
  t.max_position_ = max_position;
  t.freqs_ = std::move(freqs);
  t.attention_factor_ = 1.0;
  if (config.scaling == RopeScaling::kYarn) t.attention_factor_ = YarnAttentionFactor(config.factor);
  if (config.scaling == RopeScaling::kYarnHf) {
    t.attention_factor_ = config.attention_factor > 0 ? config.attention_factor
                                                      : YarnAttentionFactor(config.factor);
  }
  const int64_t pairs = t.pairs();
  t.cos_.resize(static_cast<size_t>(max_position * pairs));
  t.sin_.resize(static_cast<size_t>(max_position * pairs));
  for (int64_t m = 0; m < max_position; ++m) {
    for (int64_t i = 0; i < pairs; ++i) {
      const double angle = static_cast<double>(m) * t.freqs_[i];
      t.cos_[m * pairs + i] = static_cast<float>(t.attention_factor_ * std::cos(angle));
      t.sin_[m * pairs + i] = static_cast<float>(t.attention_factor_ * std::sin(angle));
    }
  }
  return t;
}

// ------------------------------------------------------------------------------------------------
// Kernels.

Status RopeForward(const RopeTable& table, const TensorView4<float>& x, int64_t batch,
                   int64_t heads, int64_t len, std::span<const int64_t> positions) {
  return RopeApply("RopeForward", table, x, batch, heads, len, positions, 1.0f);
}
Status RopeForward(const RopeTable& table, const TensorView4<double>& x, int64_t batch,
                   int64_t heads, int64_t len, std::span<const int64_t> positions) {
  return RopeApply("RopeForward", table, x, batch, heads, len, positions, 1.0);
}

// In the forward pass this was y = A R(m theta') x per pair; dx = (A R(m theta'))^T dy =
// A R(-m theta') dy: the same cos, the sin negated.
Status RopeBackward(const RopeTable& table, const TensorView4<float>& grad, int64_t batch,
                    int64_t heads, int64_t len, std::span<const int64_t> positions) {
  return RopeApply("RopeBackward", table, grad, batch, heads, len, positions, -1.0f);
}
Status RopeBackward(const RopeTable& table, const TensorView4<double>& grad, int64_t batch,
                    int64_t heads, int64_t len, std::span<const int64_t> positions) {
  return RopeApply("RopeBackward", table, grad, batch, heads, len, positions, -1.0);
}

void RopeRotateVector(const RopeTable& table, float* x, int64_t position_delta) {
  RotateVectorImpl(table, x, position_delta);
}
void RopeRotateVector(const RopeTable& table, double* x, int64_t position_delta) {
  RotateVectorImpl(table, x, position_delta);
}

}  // namespace attnlab
