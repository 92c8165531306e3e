// Hook points of Gpt::Forward, TransformerLens-style (docs/PYTHON.md): at each point a hook sees
// the activation and may change it in place; the forward continues with what the hook left.
// attnlab's Python API (`run_with_cache`, `run_with_hooks`) is built on this; names and shapes
// follow TransformerLens (HookedTransformer) so its users' code carries over.
//
// Tensors are dense, row-major float32, batch first. The positions are the model's Tm = T (+1
// with a dedicated sink token, which then sits at position 0). Shapes, for batch B:
//   kEmbed, kPosEmbed           [B, Tm, C]  token embeddings; learned position embeddings
//                                           (GPT-2 layouts only); their sum is resid_pre of 0
//   kResidPre, kResidMid, kResidPost, kAttnOut, kMlpOut, kLnFinal   [B, Tm, C]
//   kQ, kRotQ                   [B, Tm, H, hd]    q before / after RoPE (after qk_norm)
//   kK, kRotK, kV               [B, Tm, Hkv, hd]  (GQA: the kv heads, as TransformerLens' _k, _v)
//   kAttnScores, kPattern       [B, H, Tm, Tm]    scale * q.k with -inf where invisible; the
//                                                 probabilities (attention.h's softmax variant)
//   kZ                          [B, Tm, H, hd]    per-head attention output (before the gate)
//   kLse, kFirstMass, kEntropy  [B, H, Tm]        attnlab's row statistics without an N x N map
//                                                 (engine/attention_explicit.h); read-only
// Layers that no hook asks for kAttnScores or kPattern run the flash kernel; the others run
// the explicit steps (same values up to fp32 rounding), so patterns cost N x N only where asked.
// kRotQ / kRotK exist only for RoPE models, kPosEmbed only with learned positions, kMlpOut only
// with an MLP, kLnFinal only with pre-LN (a final norm).
#ifndef ATTNLAB_MODEL_FORWARD_HOOKS_H_
#define ATTNLAB_MODEL_FORWARD_HOOKS_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "attnlab/status.h"

namespace attnlab {

enum class HookPoint : int {
  kEmbed, kPosEmbed, kResidPre, kQ, kK, kV, kRotQ, kRotK, kAttnScores, kPattern, kZ,
  kAttnOut, kResidMid, kMlpOut, kResidPost, kLnFinal, kLse, kFirstMass, kEntropy,
};
inline constexpr int kNumHookPoints = static_cast<int>(HookPoint::kEntropy) + 1;

// TransformerLens' name of a point, without the "blocks.{l}." prefix of per-layer points:
// "hook_embed", "hook_pos_embed", "hook_resid_pre", "attn.hook_q", ..., "ln_final.hook_normalized",
// and attnlab's "attn.hook_lse", "attn.hook_first_token_mass", "attn.hook_entropy".
std::string_view HookPointName(HookPoint p);
// Per-layer points are named "blocks.{l}." + HookPointName; kEmbed, kPosEmbed and kLnFinal are
// global (layer -1).
bool HookPointIsPerLayer(HookPoint p);

struct HookTensor {
  HookPoint point = HookPoint::kEmbed;
  int64_t layer = -1;           // -1 for the global points
  float* data = nullptr;        // dense, row-major; valid during the call only
  int rank = 0;
  std::array<int64_t, 4> shape{};
  int64_t size() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
};

class ForwardHooks {
 public:
  virtual ~ForwardHooks() = default;
  // Whether OnHook wants this point of this layer (-1 for the global ones). Asked once per
  // forward and point; points nobody wants cost nothing.
  virtual bool Wants(HookPoint point, int64_t layer) const = 0;
  // Sees (and may change in place) the activation. An error stops the forward with it.
  virtual Status OnHook(const HookTensor& t) = 0;
};

}  // namespace attnlab

#endif  // ATTNLAB_MODEL_FORWARD_HOOKS_H_
