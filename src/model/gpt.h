// The GPT decoder for training and full-sequence evaluation: forward with saved activations and
// a hand-written backward for every option of ModelConfig (llm.c's structure: each sublayer's
// forward has its backward mirrored in Backward()).
//
// Shapes: B sequences of T tokens; with a dedicated sink token the transformer sees Tm = T + 1
// positions (the sink at position 0), else Tm = T. N = B * Tm rows of the residual stream [N, C].
#ifndef ATTNLAB_MODEL_GPT_H_
#define ATTNLAB_MODEL_GPT_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "attnlab/attention.h"
#include "attnlab/model_config.h"
#include "attnlab/rope.h"
#include "attnlab/status.h"
#include "core/aligned_buffer.h"
#include "cache/kv_cache.h"
#include "model/forward_hooks.h"
#include "model/matrix_weights.h"
#include "model/parameters.h"

namespace attnlab {

class ThreadPool;
namespace dist {
class Comm;
}

// Optional view into the forward pass, for diagnostics: called once per layer after the layer,
// with that layer's tensors (valid during the call only: a cached forward reuses the buffers
// for the next layer). Rows are the Tm new tokens of each sequence (token-major, [N, ...],
// N = batch * Tm). Keys and values are given as attention views [batch, Hkv, len_k, hd]: with a
// KV cache they are everything the cache holds (the new tokens last, so query row i sits at key
// position i + len_k - len); without, len_k = len. Without an observer the forward pays nothing.
struct LayerTensors {
  int64_t layer = 0, batch = 0, len = 0;  // len = Tm (new tokens per sequence)
  int64_t len_k = 0;                      // keys each query can reach (causal, bottom-right)
  const float* residual_in = nullptr;     // [N, C] the layer's input
  const float* attn_in = nullptr;         // [N, C] input of the attention (after pre-LN); null
                                          // in a lean sequence-parallel forward (chunked)
  const float* qkv = nullptr;             // [N, Q] q | k | v of the new tokens (q after RoPE)
  AttentionTensor k_all, v_all;           // [batch, Hkv, len_k, hd], keys after RoPE
  const float* attn_out = nullptr;        // [N, A] per-head attention outputs (before the gate),
                                          // A = attn_dim() = H * hd (= C unless head_size)
  const float* lse = nullptr;             // [B, H, Tm] row log-sum-exp (see attention.h;
                                          // with key_bias it includes the bias entry)
  const float* key_bias_logits = nullptr; // [B, H, Tm] the key bias's scores s*_i (key_bias
                                          // only: a zero-value entry of each row's softmax)
  const float* gate = nullptr;            // [N, G] the output gate's sigmoid (G = gate_dim():
                                          // H headwise, A elementwise); null without a gate
  const float* residual_out = nullptr;    // [N, C] the layer's output (after the MLP)
  const AttentionParams* attention = nullptr;  // the mask and softmax the layer used
  // Sequence parallel (Gpt::set_sequence_parallel), for observers that take striped rows: with
  // stripe_ranks > 1 the len rows per sequence are global positions stripe_rank + stripe_ranks
  // i, and k_all / v_all hold every rank's keys and values of the whole sequence in position
  // order (len_k = the global length), gathered for the observer; every other tensor is this
  // rank's rows. 1: one process, the rows as above.
  int64_t stripe_rank = 0, stripe_ranks = 1;
};
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void OnLayer(const LayerTensors& t) = 0;
  // Whether OnLayer handles a sequence-parallel forward's striped rows (LayerTensors::
  // stripe_ranks); a sequence-parallel forward refuses an observer that does not.
  virtual bool TakesStripedRows() const { return false; }
};

// Gradients of an auxiliary loss A on intermediate activations of the last Forward (e.g. the
// head-diversity and contrastive losses of train/auxiliary_losses.h), which Backward adds, times
// its grad_scale, where the chain rule meets those activations. Null members: none.
struct AuxiliaryGradients {
  const float* residual = nullptr;   // [L + 1, N, C] dA/d residual(l), l = 0 .. L
  const float* attention = nullptr;  // [L, N, A] dA/d attention_output(l), A = attn_dim()
  const float* qkv = nullptr;        // [L, N, Q] dA/d qkv(l) (q and k after RoPE), Q = qkv_dim()
  const float* logits = nullptr;     // [N, V] dA/d logits (e.g. a KL divergence to reference
                                     // predictions; the targets may all be -1 then)
};

class Gpt {
 public:
  // Allocates parameters (zero) and gradients for a validated config.
  static Result<std::unique_ptr<Gpt>> Create(const ModelConfig& config);
  // The same with the given parameters, moved in (a loaded model's weights are not held twice).
  // InvalidArgument unless `params` has exactly ParameterLayout(config).
  static Result<std::unique_ptr<Gpt>> Create(const ModelConfig& config, ParameterStore&& params);
  // An inference-only model whose linear layers' weights stay in their file's precision
  // (matrix_weights.h; params laid out by MatrixFreeLayout): Forward and decode as above,
  // Backward is refused. InvalidArgument unless every matrix has the config's shape.
  static Result<std::unique_ptr<Gpt>> Create(const ModelConfig& config, ParameterStore&& params,
                                             std::shared_ptr<const MatrixWeights> matrices);

  const ModelConfig& config() const { return config_; }
  ParameterStore& params() { return params_; }
  const ParameterStore& params() const { return params_; }
  // Gradients, allocated on first use (inference never pays for a second copy of the weights).
  ParameterStore& grads() {
    EnsureGradients();
    return grads_;
  }

  const RopeTable* rope() const { return rope_.get(); }
  // The 16-bit matrices of an inference-only model; null when every weight is in params().
  const MatrixWeights* matrices() const { return mats_.get(); }

  void set_pool(ThreadPool* pool) { pool_ = pool; }
  // Called by Backward as soon as gradients are final: with l after layer l's (l = L-1 .. 0;
  // the parameters named h.{l}.*), then with -1 after the rest (embeddings, final norm, head).
  // Data-parallel training starts summing a layer's gradients over the ranks there
  // (dist/grad_reducer.h). Empty: none.
  void set_backward_listener(std::function<void(int64_t layer)> f) { backward_listener_ = std::move(f); }
  void set_observer(ForwardObserver* obs) { observer_ = obs; }
  // TransformerLens-style hook points (model/forward_hooks.h), for Forwards without a cache;
  // null: none. A Forward with a cache and hooks is refused.
  void set_hooks(ForwardHooks* hooks) { hooks_ = hooks; }
  // For observers that need only early layers and no logits (diagnostics): cached Forwards run
  // layers [0, layers) (0: all) and, with skip_head, not the LM head (logits() then holds nothing
  // of this Forward). The cache's later layers stay empty, so use one cache per setting. Ignored
  // by other Forwards, except a sequence-parallel one without targets when skip_head is set: it
  // runs layers [0, layers) and no head, and keeps one layer's activations at a time, as a cached
  // Forward does (its observer sees every layer; residual() etc. are null after it), so one long
  // sequence costs each rank O(N/P) activation memory, not O(L N/P).
  void set_partial_forward(int64_t layers, bool skip_head) {
    partial_layers_ = layers;
    skip_head_ = skip_head;
  }
  // With a cache only: cached Forwards start at layer `first` (> 0), the stream entering it
  // read from residual_in ([rows, d_model]: row r is the r-th row the cache has seen, the
  // dedicated sink token's row included, i.e. the rows an observer saw leave layer first - 1)
  // instead of computed from the tokens, which still give the positions. Layers below `first`
  // are not run and their part of the cache stays empty. first = 0: from the embeddings.
  // Diagnostics analyse a long window in layer groups this way, one forward's work in all.
  void set_forward_start(int64_t first, const float* residual_in, int64_t rows) {
    start_layer_ = first;
    start_residual_ = residual_in;
    start_rows_ = rows;
  }
  // Sequence parallel over the ranks of `comm` (ring attention, dist/ring_attention.h): each
  // Forward without a cache takes this rank's striped share of one global sequence of
  // `global_len` tokens per batch row (global token t on rank t % P at local index t / P, so T
  // must be RingLocalLength(global_len, rank, P)) and attends over the whole sequence through
  // the ring; positions are global, everything but the attention is row-local, so row i of
  // logits() is global position rank + i P. Every rank calls Forward with the same B; a bad
  // input on any rank is an error on every rank (the ranks agree before the first transfer).
  // Backward (every rank calls it) passes dK/dV around the ring and leaves this rank's share of
  // every parameter gradient for the mean loss of its own targets: with grad_scale = this
  // rank's targets / all ranks' targets, the sum of grads() over the ranks (an all-reduce) is the
  // gradient of the whole sequence's mean loss. Refused while on: a cache, hooks, observers that
  // do not take striped rows (ForwardObserver::TakesStripedRows; those that do see every rank's
  // keys and values gathered in each layer), a dedicated sink token, a key bias, linear or
  // sparse attention, and global_len > context.
  // Null comm: off.
  // Rows per chunk of a lean sequence-parallel Forward (set_partial_forward; default 256): its
  // row-local parts (LN1 and the q|k|v projection before the ring; the output gate, projection,
  // residual and MLP after it) run a chunk at a time, so only the tensors the ring and the
  // observer need hold every local row (the residual stream in and out, q|k|v, the attention
  // output and lse, the gate): about 3.9k floats per row for Qwen2.5-0.5B's shapes, against
  // 7.4k with the normalised inputs, mid and o kept and 23k with SwiGLU's hidden activations.
  // Results do not depend on it beyond the weight products' blocking.
  void set_lean_chunk_rows(int64_t rows) { lean_chunk_rows_ = std::max<int64_t>(1, rows); }
  void set_sequence_parallel(dist::Comm* comm, int64_t global_len) {
    ring_ = comm;
    ring_len_ = global_len;
  }
  // Seconds spent in parts of Forward, accumulated while set (null: not measured).
  struct ForwardProfile {
    double total = 0;      // Forward
    double attention = 0;  // the attention kernel (AttentionCoreForward)
    double observer = 0;   // the observer's OnLayer (diagnostics fed by the forward)
  };
  void set_profile(ForwardProfile* p) { profile_ = p; }

  // Runs the model on tokens [B, T] (T <= context, every token in [0, vocab)). With targets
  // ([B, T], -1 = ignore) computes the mean cross-entropy into *loss and keeps what Backward
  // needs; without, logits() holds the raw logits [B, Tm, V].
  //
  // With a cache (inference: B must be 1), the T tokens are appended to the cache and attend to
  // everything it holds; positions come from the cache. The dedicated sink token, if any, is
  // prepended only when the cache is empty. Backward is not available after a cached Forward.
  // A linear-attention model (attention_type linear) decodes with a LinearAttentionCache, its
  // running state (MakeKvCache(config) picks the right cache for any model).
  Status Forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                 double* loss, KvCache* cache = nullptr);

  // Gradients of the mean loss of the last Forward (which must have had targets), ADDED to
  // grads() scaled by grad_scale (e.g. 1 / micro-batches). With aux, the gradients of the total
  // loss + A (see AuxiliaryGradients). Once per Forward: the probabilities become the logits'
  // gradients (HeadBuffer), so a second call is refused.
  Status Backward(float grad_scale = 1.0f, const AuxiliaryGradients* aux = nullptr);

  // After Forward: [B, Tm, V] raw logits (without targets) or probabilities (with targets);
  // after Backward, dL/dlogits (one buffer, see HeadBuffer).
  const float* logits() const { return head_.values.data(); }
  int64_t last_batch() const { return B_; }
  int64_t last_len() const { return Tm_; }  // positions per sequence (T + sink)
  // Residual stream entering layer l ([N, C]); l == n_layer is the final stream (before ln_f).
  // After a Forward without a cache only: a cached (inference) Forward keeps one layer's
  // activations at a time, so both return null then (a ForwardObserver sees every layer); so
  // does a lean sequence-parallel Forward (set_partial_forward).
  const float* residual(int64_t l) const {
    return one_layer_ ? nullptr : acts_.res.data() + l * N_ * config_.d_model;
  }
  // q | k | v of layer l ([N, Q], q and k after RoPE), as the attention read them.
  const float* qkv(int64_t l) const {
    return one_layer_ ? nullptr : acts_.qkv.data() + l * N_ * config_.qkv_dim();
  }
  // After Backward: dL/d residual(0) ([N, C]), the gradient at the stream entering layer 0
  // (the embeddings, blocks.0.hook_resid_pre: a hook's additive change there has this
  // gradient). Valid until the next Forward or Backward; null before any Backward.
  const float* input_gradient() const { return input_grad_ready_ ? d_.residual.data() : nullptr; }
  // Per-head attention outputs of layer l ([N, H, hd] = [N, A], before the output gate).
  const float* attention_output(int64_t l) const {
    return one_layer_ ? nullptr : acts_.att.data() + l * N_ * config_.attn_dim();
  }

 private:
  // Pointers to one layer's saved activations inside Activations (null where the configuration
  // keeps no such tensor). Shapes as in Activations, for that layer; in a lean forward the
  // row-local ones (ln*, sum*, mid, attg, o, h, gelu, m) hold one chunk's rows (RowChunk).
  struct LayerActivations {
    float* x;           // [N, C] residual stream entering the layer
    float* mid;         // [N, C] stream after the attention sublayer
    float* out;         // [N, C] stream leaving the layer (= the next layer's x)
    float *ln1, *ln2;   // [N, C] pre-LN normalised inputs
    float *sum1, *sum2; // [N, C] post-LN pre-norm sums
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;  // [N]
    float* qkv;         // [N, Q]
    float* qk_raw;      // [N, H + Hkv, hd] q and k before qk_norm (qk_norm only)
    float* qk_rstd;     // [N, H + Hkv] their RMSNorm statistics
    float* att;         // [N, A] per-head attention output
    float* lse;         // [B, H, Tm]
    float* kb_logit;    // [B, H, Tm] the key bias's scores s* (key_bias only)
    float* gate;        // [N, G] output gate sigmoid (G = gate_dim())
    float* attg;        // [N, A] gated attention output
    float* o;           // [N, C] attention projection output
    float *h, *gelu;    // [N, F1] (F1 = fc_dim(): 2F with SwiGLU), [N, F] the activation
    float* m;           // [N, C] MLP output
  };

  Gpt(const ModelConfig& config, ParameterStore&& params,
      std::shared_ptr<const MatrixWeights> matrices);
  Status Init();  // the RoPE table
  void EnsureGradients();
  void EnsureActivations(int64_t B, int64_t Tm);
  ThreadPool* pool() const;
  LayerActivations Layer(int64_t l);
  // The mask and softmax of layer l's attention (with its sink logits, if any): the one place
  // both Forward and Backward take them from.
  AttentionParams MakeAttentionParams(int64_t l) const;

  // Forward, step by step (Forward() runs them in this order).
  Status CheckForwardInputs(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                            const KvCache* cache) const;
  Status PlaceTokens(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                     int64_t off, KvCache* cache);
  // With pos_out, learned positions go there ([N, C]) instead of into the stream (hooks).
  void EmbedForward(float* pos_out = nullptr);
  Status EmbedForwardHooked();
  void AddPositions(float* x);  // position_every_layer: x [N, C] += wpe[position]
  Status GatherStripedKv(const AttentionTensor& k, const AttentionTensor& v, int64_t B,
                         int64_t Tm, LayerTensors* seen);
  Status AttentionBlockForward(int64_t l, const AttentionParams& ap, KvCache* cache,
                               LayerTensors* seen);
  Status AttentionCoreForward(int64_t l, const AttentionParams& ap, KvCache* cache,
                              const AttentionShape& shape, const AttentionTensor& q,
                              const AttentionTensor& k_all, const AttentionTensor& v_all);
  // The explicit steps (engine/attention_explicit.h) instead of the flash kernel, for layers
  // whose scores or pattern a hook reads or edits; and the read-only row-statistics hooks.
  Status ExplicitAttentionForward(int64_t l, const AttentionParams& ap, const AttentionShape& shape,
                                  const AttentionTensor& q, const AttentionTensor& k_all,
                                  const AttentionTensor& v_all);
  Status RowStatHooks(int64_t l, const AttentionParams& ap, const AttentionShape& shape,
                      const AttentionTensor& q, const AttentionTensor& k_all);
  void QkNormForward(int64_t l);
  // Row-local parts of layer l on n rows whose activations `a` points at (Layer(l), or a lean
  // forward's RowChunk): before the attention (LN1, q|k|v), after it (gate, projection,
  // residual, then the MLP; chunked: LN1 recomputed for the gate), the MLP sublayer alone.
  Status AttentionInputRows(int64_t l, const LayerActivations& a, int64_t n);
  Status LayerRowsForward(int64_t l, const LayerActivations& a, int64_t n, bool chunked);
  Status MlpRowsForward(int64_t l, const LayerActivations& a, int64_t n);
  // Rows [r0, ...) of a lean forward's layer; fn over all rows or over row_chunk_-row chunks.
  LayerActivations RowChunk(const LayerActivations& a, int64_t r0) const;
  Status ForEachRowChunk(const LayerActivations& a,
                         const std::function<Status(const LayerActivations&, int64_t)>& fn);
  Status HeadForward(const int32_t* targets, double* loss);
  // Hooks: whether one wants point p of layer l; run it on a dense [shape] tensor; run it on
  // `heads` head vectors at column `offset` of each [N, Q] qkv row (copied out and back).
  bool Hooked(HookPoint p, int64_t l) const { return hooks_ && hooks_->Wants(p, l); }
  Status RunHook(HookPoint p, int64_t l, float* data, std::initializer_list<int64_t> shape);
  Status HookHeads(HookPoint p, int64_t l, float* qkv, int64_t offset, int64_t heads);
  // Backward, the same steps in reverse. HeadBackward returns false when no gradient flows.
  bool HeadBackward(float grad_scale, const AuxiliaryGradients* aux);
  void MlpBlockBackward(int64_t l);
  void QkNormBackward(int64_t l);
  Status AttentionBlockBackward(int64_t l, const AttentionParams& ap, float grad_scale,
                                const AuxiliaryGradients* aux);
  void EmbedBackward();
  void PositionsBackward();  // d wpe += dL/dx at each row's position (d_.residual)

  ModelConfig config_;
  ParameterStore params_, grads_;
  std::shared_ptr<const MatrixWeights> mats_;  // null: every weight in params_
  std::unique_ptr<RopeTable> rope_;
  ThreadPool* pool_ = nullptr;
  ForwardObserver* observer_ = nullptr;
  std::function<void(int64_t)> backward_listener_;
  ForwardHooks* hooks_ = nullptr;
  int64_t partial_layers_ = 0;  // set_partial_forward
  int64_t start_layer_ = 0, start_rows_ = 0;  // set_forward_start
  const float* start_residual_ = nullptr;
  ForwardProfile* profile_ = nullptr;
  bool skip_head_ = false;
  dist::Comm* ring_ = nullptr;  // set_sequence_parallel
  int64_t ring_len_ = 0;
  std::vector<float> striped_kv_;  // [2, B, Hkv, ring_len_, hd]: K and V gathered for observers
  // The sequence-parallel Forward's own checks, then every rank's verdict gathered: the same
  // error on every rank when any rank's input is bad (before any ring transfer).
  Status CheckSequenceParallel(Status local, int64_t B, int64_t T, const KvCache* cache) const;

  // Saved activations of the last Forward (sized for the largest N seen).
  int64_t B_ = 0, Tm_ = 0, N_ = 0, capacity_ = 0;
  int64_t capacity_layers_ = 0;  // layers the buffers hold: n_layer, or 1 (cached forwards)
  // A lean forward runs the row-local parts on chunks of row_chunk_ rows (0: all rows at once),
  // their buffers (LN inputs and statistics, mid, o, attg, the MLP's h, gelu, m) sized for one
  // chunk; capacity_chunk_ is the rows they hold.
  int64_t row_chunk_ = 0, capacity_chunk_ = 0;
  int64_t grad_rows_ = 0;  // rows the backward's scratch d_ holds (EnsureGradientScratch)
  void EnsureGradientScratch(int64_t N);
  int64_t lean_chunk_rows_ = 256;  // set_lean_chunk_rows
  bool has_targets_ = false;
  bool input_grad_ready_ = false;  // d_.residual holds dL/d residual(0) (input_gradient)
  // The last Forward kept the activations of one layer at a time (a cached Forward, or a lean
  // sequence-parallel one: set_partial_forward); Backward is refused after it.
  bool one_layer_ = false;
  // Slot of the residual stream entering layer l in acts_.res: l, or l % 2 when one_layer_.
  int64_t ResidualSlot(int64_t l) const { return one_layer_ ? l % 2 : l; }
  std::vector<int32_t> tokens_, targets_;  // [N] per row (sink row: token -1, target -1)
  std::vector<int64_t> positions_;         // [Tm]
  // [L, ...] below: L = 1 after a cached forward (one layer's buffers, reused).
  struct Activations {
    AlignedBuffer<float> res;        // [L + 1, N, C] residual stream entering each layer
    AlignedBuffer<float> mid;        // [L, N, C] stream after the attention sublayer
    AlignedBuffer<float> ln1, ln2;   // [L, N, C] normalised inputs (pre-LN)
    AlignedBuffer<float> sum1, sum2; // [L, N, C] pre-norm sums (post-LN)
    AlignedBuffer<float> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;  // [L, N]
    AlignedBuffer<float> qkv;        // [L, N, Q]
    AlignedBuffer<float> qk_raw;     // [L, N, (H + Hkv) hd] (qk_norm)
    AlignedBuffer<float> qk_rstd;    // [L, N, H + Hkv] (qk_norm)
    AlignedBuffer<float> att;        // [L, N, A]
    AlignedBuffer<float> lse;        // [L, B, H, Tm]
    AlignedBuffer<float> kb_logit;   // [L, B, H, Tm] the key bias's scores (key_bias)
    AlignedBuffer<float> gate;       // [L, N, G] sigmoid outputs (G = gate_dim())
    AlignedBuffer<float> attg;       // [L, N, A] gated attention output
    AlignedBuffer<float> o;          // [L, N, C] attention projection output
    AlignedBuffer<float> h, gelu;    // [L, N, F1], [L, N, F]
    AlignedBuffer<float> m;          // [L, N, C] MLP output
    AlignedBuffer<float> lnf, lnf_mean, lnf_rstd;  // [N, C], [N], [N]
    AlignedBuffer<float> losses;     // [N]
  } acts_;
  // The head's [N, V] buffer, the largest activation, deliberately holds three things in turn
  // (one copy of N * V floats instead of three): the raw logits (Forward), overwritten by the
  // softmax probabilities (Forward with targets: the cross-entropy normalises in place), then by
  // dL/dlogits (Backward, in place).
  struct HeadBuffer {
    enum class Holds { kLogits, kProbabilities, kLogitGradients };
    AlignedBuffer<float> values;  // [N, V]
    Holds holds = Holds::kLogits;
  } head_;
  // Backward's gradient buffers, one per role, for the layer being differentiated: each is dL/d
  // the named forward tensor of that layer ([N, ...] like it) and is written or zeroed before
  // it is read. Sized by EnsureActivations (empty where the configuration has no such tensor).
  struct Gradients {
    AlignedBuffer<float> residual;  // [N, C] the stream at the current depth: leaving layer l on
                                    // entering its backward, entering layer l on leaving it
    AlignedBuffer<float> lnf_out;   // [N, C] ln_f's output (pre-LN)
    AlignedBuffer<float> sum2;      // [N, C] the MLP's pre-norm sum (post-LN)
    AlignedBuffer<float> m;         // [N, C] the MLP output
    AlignedBuffer<float> gelu, h;   // [N, F], [N, F1] the MLP's activations after and before
                                    // the activation function
    AlignedBuffer<float> ln2;       // [N, C] the MLP's normalised input (pre-LN)
    AlignedBuffer<float> mid;       // [N, C] the stream after the attention sublayer
    AlignedBuffer<float> sum1;      // [N, C] the attention's pre-norm sum (post-LN)
    AlignedBuffer<float> o;         // [N, C] the attention projection output
    AlignedBuffer<float> attg;      // [N, A] the projection's input (gated attention output)
    AlignedBuffer<float> parallel;  // [N, C] the MLP branch's dL/dx (parallel residual only)
    AlignedBuffer<float> att;       // [N, A] the attention output before the gate (gate only;
                                    // without a gate attg is att and d attg serves)
    AlignedBuffer<float> gate;      // [N, G] the gate's pre-sigmoid logits
    AlignedBuffer<float> qkv;       // [N, Q] q | k | v (q and k after RoPE)
    AlignedBuffer<float> attn_in;   // [N, C] the attention sublayer's input (LN1(x) or x)
    AlignedBuffer<float> sink;      // [H] the layer's sink logits (softmax sink_logit)
  } d_;
};

}  // namespace attnlab

#endif  // ATTNLAB_MODEL_GPT_H_
