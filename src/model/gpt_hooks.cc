// Gpt's hook points (model/forward_hooks.h): the names, the dense copies handed to hooks, and the
// explicit attention path for layers whose scores or pattern are hooked.
#include <cstring>
#include <limits>
#include <vector>

#include "attnlab/thread_pool.h"
#include "engine/attention_explicit.h"
#include "model/gpt.h"

namespace attnlab {

std::string_view HookPointName(HookPoint p) {
  switch (p) {
    case HookPoint::kEmbed: return "hook_embed";
    case HookPoint::kPosEmbed: return "hook_pos_embed";
    case HookPoint::kResidPre: return "hook_resid_pre";
    case HookPoint::kQ: return "attn.hook_q";
    case HookPoint::kK: return "attn.hook_k";
    case HookPoint::kV: return "attn.hook_v";
    case HookPoint::kRotQ: return "attn.hook_rot_q";
    case HookPoint::kRotK: return "attn.hook_rot_k";
    case HookPoint::kAttnScores: return "attn.hook_attn_scores";
    case HookPoint::kPattern: return "attn.hook_pattern";
    case HookPoint::kZ: return "attn.hook_z";
    case HookPoint::kAttnOut: return "hook_attn_out";
    case HookPoint::kResidMid: return "hook_resid_mid";
    case HookPoint::kMlpOut: return "hook_mlp_out";
    case HookPoint::kResidPost: return "hook_resid_post";
    case HookPoint::kLnFinal: return "ln_final.hook_normalized";
    case HookPoint::kLse: return "attn.hook_lse";
    case HookPoint::kFirstMass: return "attn.hook_first_token_mass";
    case HookPoint::kEntropy: return "attn.hook_entropy";
  }
  return "";
}

bool HookPointIsPerLayer(HookPoint p) {
  return p != HookPoint::kEmbed && p != HookPoint::kPosEmbed && p != HookPoint::kLnFinal;
}

Status Gpt::RunHook(HookPoint p, int64_t l, float* data, std::initializer_list<int64_t> shape) {
  HookTensor t;
  t.point = p;
  t.layer = l;
  t.data = data;
  for (int64_t d : shape) t.shape[t.rank++] = d;
  return hooks_->OnHook(t);
}

// qkv rows are [N, Q] = q (H hd) | k (Hkv hd) | v (Hkv hd); the hook sees [B, Tm, heads, hd].
Status Gpt::HookHeads(HookPoint p, int64_t l, float* qkv, int64_t offset, int64_t heads) {
  if (!Hooked(p, l)) return Status::Ok();
  const int64_t N = N_, Q = config_.qkv_dim(), w = heads * config_.head_dim();
  std::vector<float> dense(N * w);
  for (int64_t n = 0; n < N; ++n) std::memcpy(&dense[n * w], qkv + n * Q + offset, sizeof(float) * w);
  ATTNLAB_RETURN_IF_ERROR(RunHook(p, l, dense.data(), {B_, Tm_, heads, config_.head_dim()}));
  for (int64_t n = 0; n < N; ++n) std::memcpy(qkv + n * Q + offset, &dense[n * w], sizeof(float) * w);
  return Status::Ok();
}

// Token embeddings into the stream, hooked; learned positions into a side buffer, hooked, added.
Status Gpt::EmbedForwardHooked() {
  const int64_t N = N_, C = config_.d_model;
  float* x0 = acts_.res.data();
  const bool learned = params_.ptrs().wpe != nullptr;
  std::vector<float> pos(learned ? N * C : 0);
  EmbedForward(learned ? pos.data() : nullptr);
  if (Hooked(HookPoint::kEmbed, -1)) {
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kEmbed, -1, x0, {B_, Tm_, C}));
  }
  if (!learned) return Status::Ok();
  if (Hooked(HookPoint::kPosEmbed, -1)) {
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kPosEmbed, -1, pos.data(), {B_, Tm_, C}));
  }
  for (int64_t i = 0; i < N * C; ++i) x0[i] += pos[i];
  return Status::Ok();
}

// scores (hooked) -> probabilities (hooked) -> P V into the layer's att, the lse into its lse.
Status Gpt::ExplicitAttentionForward(int64_t l, const AttentionParams& ap,
                                     const AttentionShape& shape, const AttentionTensor& q,
                                     const AttentionTensor& k_all, const AttentionTensor& v_all) {
  const int64_t B = B_, Tm = Tm_, H = config_.n_head, hd = config_.head_dim();
  const LayerActivations a = Layer(l);
  AttentionParams p = ap;
  p.pool = pool();
  std::vector<float> map(B * H * Tm * shape.len_k);
  ATTNLAB_RETURN_IF_ERROR(AttentionScores(shape, p, q, k_all, map));
  if (Hooked(HookPoint::kAttnScores, l)) {
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kAttnScores, l, map.data(), {B, H, Tm, shape.len_k}));
  }
  ATTNLAB_RETURN_IF_ERROR(
      AttentionProbsFromScores(shape, p, map, map, std::span<float>(a.lse, B * H * Tm)));
  if (Hooked(HookPoint::kPattern, l)) {
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kPattern, l, map.data(), {B, H, Tm, shape.len_k}));
  }
  return AttentionApplyProbs(shape, map, v_all, TokenMajorView(a.att, B, H, Tm, hd), pool());
}

// The read-only row statistics ([B, H, Tm] each): copies, so a hook's changes go nowhere.
Status Gpt::RowStatHooks(int64_t l, const AttentionParams& ap, const AttentionShape& shape,
                         const AttentionTensor& q, const AttentionTensor& k_all) {
  const bool lse = Hooked(HookPoint::kLse, l), first = Hooked(HookPoint::kFirstMass, l);
  const bool ent = Hooked(HookPoint::kEntropy, l);
  if (!lse && !first && !ent) return Status::Ok();
  if (config_.attention_type == AttentionType::kLinear) {
    return Status::InvalidArgument(
        "a linear-attention model has no softmax row statistics (lse, first-token mass, "
        "entropy) to hook");
  }
  const int64_t B = B_, Tm = Tm_, H = config_.n_head, rows = B * H * Tm;
  if (lse) {
    const float* src = Layer(l).lse;
    std::vector<float> copy(src, src + rows);
    ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kLse, l, copy.data(), {B, H, Tm}));
  }
  if (!first && !ent) return Status::Ok();
  if (config_.key_bias) {
    return Status::InvalidArgument(
        "first-token mass and entropy hooks recompute the rows without a key_bias model's bias "
        "entry: hook lse, or use attnlab analyze");
  }
  std::vector<float> fm(first ? rows : 0), en(ent ? rows : 0);
  AttentionParams p = ap;
  p.pool = pool();
  ATTNLAB_RETURN_IF_ERROR(AttentionRowStats(shape, p, q, k_all, {}, fm, en));
  if (first) ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kFirstMass, l, fm.data(), {B, H, Tm}));
  if (ent) ATTNLAB_RETURN_IF_ERROR(RunHook(HookPoint::kEntropy, l, en.data(), {B, H, Tm}));
  return Status::Ok();
}

}  // namespace attnlab
