// The decoder run sequence-parallel under mpirun (issue 40; Gpt::set_sequence_parallel, ring
// attention in every layer) against the same model on the whole sequence in one process, which
// every rank computes itself from the same seeded weights and tokens. Run as
//   mpirun -np 3 --oversubscribe --mca btl self,vader build/tests/dist_model_check
// (ctest: mpi.model_check.np1/2/3). Exit 0 when every rank's checks hold.
//
// Checked on every rank for its striped rows (global position t on rank t % P): the logits
// within 2e-5 of the reference's largest magnitude, the loss's targets-weighted mean over the
// ranks to 1e-5, and every parameter gradient (each rank's share scaled by its share of the
// targets, summed over the ranks) within 1e-4 of the reference's largest, over GPT-2 (learned positions, LayerNorm,
// GELU), Llama (RoPE, GQA, RMSNorm, SwiGLU, no biases), NeoX-style (partial rotary, parallel
// residual), dynamic NTK RoPE scaling (the frequencies follow the global length on every rank),
// softmax1, a sink logit, an output gate, qk-norm and causal + mask_first_key, at lengths equal
// to P and not divisible by P, batch 1 and 2. Errors end with the same message on every rank,
// never a hang: fewer tokens than ranks, a wrong local length on one rank, a bad token on one
// rank, a batch that differs between ranks, a window (ring attention refuses it), a cache, an
// observer that does not take striped rows. An observer that does (the attention statistics,
// AttentionStatsAccumulator::AddStripedRows) sees every layer's keys gathered in position order
// (within 2e-5 of one process's) and, merged over the ranks, one process's statistics (1e-4);
// a lean forward (no targets, set_partial_forward's skip_head: one layer's activations at a
// time, the MLP in chunks of 5 rows, no LM head) shows it the same tensors bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnlab/model_config.h"
#include "cache/kv_cache.h"
#include "diagnostics/attention_stats.h"
#include "dist/comm.h"
#include "dist/ring_attention.h"
#include "dist_check_util.h"
#include "model/gpt.h"

namespace {

using attnlab::Gpt;
using attnlab::ModelConfig;
using attnlab::Status;
namespace dist = attnlab::dist;
using attnlab::dist_check::Expect;

struct Case {
  std::string name;
  ModelConfig c;
};

ModelConfig Base() {
  ModelConfig c;
  c.vocab_size = 41;
  c.context = 64;
  c.d_model = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.mlp_hidden = 48;
  c.init_std = 0.2f;
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> cs;
  {
    ModelConfig c = Base();
    c.position = attnlab::PositionEncoding::kLearned;
    cs.push_back({"gpt2", c});
  }
  {
    ModelConfig c = Base();
    c.n_kv_head = 2;
    c.norm_type = attnlab::NormType::kRmsNorm;
    c.mlp_activation = attnlab::MlpActivation::kSwiGlu;
    c.bias = false;
    c.rope_layout = attnlab::RopeLayout::kGptJ;
    cs.push_back({"llama", c});
  }
  {
    ModelConfig c = Base();
    c.rotary_dim = 4;
    c.parallel_residual = true;
    cs.push_back({"neox", c});
  }
  {
    ModelConfig c = Base();
    c.rope_scaling = attnlab::RopeScaling::kDynamicHf;
    c.rope_factor = 2.0f;
    c.rope_original_context = 16;
    cs.push_back({"dynamic-ntk", c});
  }
  {
    ModelConfig c = Base();
    c.softmax = attnlab::SoftmaxKind::kSoftmax1;
    cs.push_back({"softmax1", c});
  }
  {
    ModelConfig c = Base();
    c.softmax = attnlab::SoftmaxKind::kSinkLogit;
    c.output_gate = true;
    cs.push_back({"sink-logit+gate", c});
  }
  {
    ModelConfig c = Base();
    c.qk_norm = true;
    c.mask_first_key = true;
    cs.push_back({"qk-norm+mask-first-key", c});
  }
  return cs;
}

std::unique_ptr<Gpt> Model(const ModelConfig& c, uint64_t seed) {
  auto g = Gpt::Create(c);
  if (!g.ok()) {
    Expect(false, "create: " + g.status().ToString());
    return nullptr;
  }
  g.value()->params().Initialize(c, seed);
  return std::move(g.value());
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// Rows [B, n_r] of the global [B, N] tokens that rank r holds.
std::vector<int32_t> Stripe(const std::vector<int32_t>& g, int64_t B, int64_t N, int r, int P) {
  const int64_t n = dist::RingLocalLength(N, r, P);
  std::vector<int32_t> out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) out.push_back(g[b * N + r + i * P]);
  }
  return out;
}

void RunCase(const Case& cs, int64_t B, int64_t N) {
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  const std::string what = cs.name + " B " + std::to_string(B) + " N " + std::to_string(N);
  std::unique_ptr<Gpt> g = Model(cs.c, 7);
  if (!g) return;
  const int64_t V = cs.c.vocab_size;
  const std::vector<int32_t> x = Tokens(B * N, V, static_cast<uint32_t>(N * 31 + B));
  Status st = g->Forward(x.data(), nullptr, B, N, nullptr);
  Expect(st.ok(), what + ": reference " + st.ToString());
  const std::vector<float> want(g->logits(), g->logits() + B * N * V);
  const int64_t n = dist::RingLocalLength(N, r, P);
  const std::vector<int32_t> lx = Stripe(x, B, N, r, P);
  g->set_sequence_parallel(&w, N);
  st = g->Forward(lx.data(), nullptr, B, n, nullptr);
  Expect(st.ok(), what + ": sequence parallel " + st.ToString());
  if (!st.ok()) return;
  double scale = 1e-30, worst = 0;
  for (float v : want) scale = std::max(scale, std::abs(static_cast<double>(v)));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      const float* got = g->logits() + (b * n + i) * V;
      const float* ref = want.data() + (b * N + r + i * P) * V;
      for (int64_t v = 0; v < V; ++v) {
        worst = std::max(worst, std::abs(static_cast<double>(got[v]) - ref[v]) / scale);
      }
    }
  }
  Expect(worst <= 2e-5, what + ": logits max error " + std::to_string(worst) + " of the largest");

  // Backward: the reference's gradients of the mean loss over every target, against the ranks'
  // shares (each scaled by its share of the targets) summed by an all-reduce.
  std::vector<int32_t> y(B * N);
  for (int64_t i = 0; i < B * N; ++i) y[i] = (x[i] * 7 + 3) % static_cast<int32_t>(V);
  // Ignored targets: the first (at N = P, B = 1 rank 0 then has none and must still take part
  // in the ring), one left at least.
  if (B * N > 1) y[0] = -1;
  g->set_sequence_parallel(nullptr, 0);
  double loss = 0;
  st = g->Forward(x.data(), y.data(), B, N, &loss);
  Expect(st.ok(), what + ": reference forward with targets " + st.ToString());
  g->grads().Zero();
  st = g->Backward();
  Expect(st.ok(), what + ": reference backward " + st.ToString());
  const std::vector<float> gwant(g->grads().data(), g->grads().data() + g->grads().size());
  const std::vector<int32_t> ly = Stripe(y, B, N, r, P);
  int64_t mine = 0, all = 0;
  for (int32_t t : ly) mine += t >= 0;
  for (int32_t t : y) all += t >= 0;
  g->set_sequence_parallel(&w, N);
  double local_loss = 0;
  st = g->Forward(lx.data(), ly.data(), B, n, &local_loss);
  Expect(st.ok(), what + ": sequence-parallel forward with targets " + st.ToString());
  g->grads().Zero();
  st = g->Backward(static_cast<float>(static_cast<double>(mine) / static_cast<double>(all)));
  Expect(st.ok(), what + ": sequence-parallel backward " + st.ToString());
  if (!st.ok()) return;
  std::vector<float> got(g->grads().data(), g->grads().data() + g->grads().size());
  st = w.AllReduceSum(std::span<float>(got), "gradients");
  Expect(st.ok(), what + ": all-reduce " + st.ToString());
  double gscale = 1e-30, gworst = 0;
  for (float v : gwant) gscale = std::max(gscale, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < got.size(); ++i) {
    gworst = std::max(gworst, std::abs(static_cast<double>(got[i]) - gwant[i]) / gscale);
  }
  Expect(gworst <= 1e-4, what + ": gradients max error " + std::to_string(gworst) + " of the largest");
  // The loss: the targets-weighted mean of the ranks' means is the global mean.
  double lsum[2] = {mine > 0 ? local_loss * static_cast<double>(mine) : 0.0,
                    static_cast<double>(mine)};
  st = w.AllReduceSum(std::span<double>(lsum, 2), "loss");
  Expect(st.ok() && std::abs(lsum[0] / lsum[1] - loss) <= 1e-5 * std::abs(loss),
         what + ": loss " + std::to_string(lsum[0] / lsum[1]) + " vs " + std::to_string(loss));
  g->set_sequence_parallel(nullptr, 0);
}

// An observer of the attention statistics of every layer (as analyze keeps them): striped rows
// through AddStripedRows, one process's through AddRows; each sequence of the batch on its own.
class StatsObserver : public attnlab::ForwardObserver {
 public:
  explicit StatsObserver(const ModelConfig& c) : c_(c) {
    attnlab::AttentionStatsOptions o;
    o.first_k = 3;
    o.jsd_rows = 8;
    o.diagonals = {attnlab::AttentionDiagonal{1, 0, -1}};
    for (int64_t l = 0; l < c.n_layer; ++l) {
      auto a = attnlab::AttentionStatsAccumulator::Create(o, c.n_head, c.kv_heads(), c.head_dim());
      if (a.ok()) stats_.push_back(std::move(a).value());
    }
    keys_.resize(c.n_layer);
    rows_.resize(c.n_layer);
  }
  bool TakesStripedRows() const override { return true; }
  void OnLayer(const attnlab::LayerTensors& t) override {
    const int64_t Q = c_.qkv_dim();
    for (int64_t b = 0; b < t.batch; ++b) {
      attnlab::AttentionTensor k = t.k_all;
      k.data += b * k.stride_batch;
      k.size -= b * k.stride_batch;
      const float* q = t.qkv + b * t.len * Q;
      const Status st =
          t.stripe_ranks > 1
              ? stats_[t.layer].AddStripedRows(*t.attention, q, Q, t.stripe_rank, t.stripe_ranks,
                                               k, t.len_k)
              : stats_[t.layer].AddRows(*t.attention, q, Q, t.len, k, t.len_k);
      Expect(st.ok(), "observer: " + st.ToString());
    }
    ++layers_seen_;
    // This rank's rows as the observer sees them: the stream in and out, the attention output
    // and the gate (when the model has one).
    const int64_t N = t.batch * t.len, C = c_.d_model;
    std::vector<float>& rows = rows_[t.layer];
    rows.assign(t.residual_in, t.residual_in + N * C);
    rows.insert(rows.end(), t.residual_out, t.residual_out + N * C);
    rows.insert(rows.end(), t.attn_out, t.attn_out + N * c_.attn_dim());
    if (t.gate) rows.insert(rows.end(), t.gate, t.gate + N * c_.gate_dim());
    // The keys as the observer sees them: [B, Hkv, len_k, hd] in position order.
    std::vector<float>& out = keys_[t.layer];
    out.clear();
    for (int64_t b = 0; b < t.batch; ++b) {
      for (int64_t h = 0; h < c_.kv_heads(); ++h) {
        for (int64_t j = 0; j < t.len_k; ++j) {
          const float* row = t.k_all.at(b, h, j);
          out.insert(out.end(), row, row + c_.head_dim());
        }
      }
    }
  }
  std::vector<attnlab::AttentionStatsAccumulator>& stats() { return stats_; }
  const std::vector<std::vector<float>>& keys() const { return keys_; }
  const std::vector<std::vector<float>>& rows() const { return rows_; }
  int64_t layers_seen() const { return layers_seen_; }

 private:
  ModelConfig c_;
  std::vector<attnlab::AttentionStatsAccumulator> stats_;
  std::vector<std::vector<float>> keys_, rows_;
  int64_t layers_seen_ = 0;
};

bool Near(double got, double want, double rtol, double atol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  return std::abs(got - want) <= rtol * std::abs(want) + atol;
}

// got vs want within tol of want's largest magnitude.
void ExpectKeysNear(const std::vector<float>& got, const std::vector<float>& want, double tol,
                    const std::string& what) {
  double scale = 1e-30, worst = 0;
  for (float v : want) scale = std::max(scale, std::abs(static_cast<double>(v)));
  Expect(got.size() == want.size(), what + ": size");
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / scale);
  }
  Expect(worst <= tol, what + " differ by " + std::to_string(worst) + " of the largest |x|");
}

// Counts exactly; values within 1e-4 relative (the layers' inputs carry the forward's rounding).
void ExpectStatsNear(const attnlab::AttentionLayerStats& got,
                     const attnlab::AttentionLayerStats& want, const std::string& what) {
  Expect(got.rows == want.rows && got.alpha_rows == want.alpha_rows &&
             got.jsd_sample_rows == want.jsd_sample_rows && got.heads.size() == want.heads.size(),
         what + ": counts");
  for (size_t h = 0; h < std::min(got.heads.size(), want.heads.size()); ++h) {
    const attnlab::AttentionHeadStats &gh = got.heads[h], &wh = want.heads[h];
    const bool ok = gh.live_rows == wh.live_rows && gh.last_visible == wh.last_visible &&
                    Near(gh.entropy, wh.entropy, 1e-4, 1e-7) &&
                    Near(gh.sink_mass, wh.sink_mass, 1e-4, 1e-7) &&
                    Near(gh.distance, wh.distance, 1e-4, 1e-6) &&
                    Near(gh.alpha[0], wh.alpha[0], 1e-4, 1e-7) &&
                    Near(gh.last_key0, wh.last_key0, 1e-4, 1e-7) &&
                    Near(gh.diagonal[0], wh.diagonal[0], 1e-4, 1e-7);
    Expect(ok, what + " head " + std::to_string(h) + ": statistics (entropy " +
                   std::to_string(gh.entropy) + " vs " + std::to_string(wh.entropy) + ", alpha_1 " +
                   std::to_string(gh.alpha[0]) + " vs " + std::to_string(wh.alpha[0]) + ")");
  }
  for (size_t e = 0; e < std::min(got.jsd.size(), want.jsd.size()); ++e) {
    Expect(Near(got.jsd[e], want.jsd[e], 0.0, 1e-4), what + ": jsd");
  }
}

// The observer on a sequence-parallel forward: every layer's gathered keys equal one process's
// (within the forward's own tolerance), and its striped statistics merged over the ranks equal
// one process's statistics (counts exactly; values within 1e-4: the layers' inputs carry the
// ring's rounding). An observer that does not take striped rows is refused on every rank.
void RunObserverCase(const Case& cs, int64_t B, int64_t N) {
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  const std::string what = cs.name + " observer B " + std::to_string(B) + " N " + std::to_string(N);
  std::unique_ptr<Gpt> g = Model(cs.c, 11);
  if (!g) return;
  const std::vector<int32_t> x = Tokens(B * N, cs.c.vocab_size, static_cast<uint32_t>(N * 17 + B));
  StatsObserver one(cs.c), mine(cs.c);
  g->set_observer(&one);
  Status st = g->Forward(x.data(), nullptr, B, N, nullptr);
  Expect(st.ok(), what + ": reference " + st.ToString());
  g->set_observer(&mine);
  g->set_sequence_parallel(&w, N);
  const std::vector<int32_t> lx = Stripe(x, B, N, r, P);
  st = g->Forward(lx.data(), nullptr, B, dist::RingLocalLength(N, r, P), nullptr);
  Expect(st.ok(), what + ": sequence parallel " + st.ToString());
  // The lean forward (no targets, skip_head): one layer's activations at a time, its row-local
  // parts in chunks, no head; the observer sees the same tensors to the weight products'
  // rounding (chunks of 5 rows block them differently). With layers = 1 it sees layer 0 only.
  StatsObserver lean(cs.c), first(cs.c);
  g->set_partial_forward(0, /*skip_head=*/true);
  g->set_lean_chunk_rows(5);  // row-local parts in chunks of 5 rows (and a shorter last one)
  g->set_observer(&lean);
  Status sl = g->Forward(lx.data(), nullptr, B, dist::RingLocalLength(N, r, P), nullptr);
  Expect(sl.ok(), what + ": lean " + sl.ToString());
  Expect(g->residual(0) == nullptr && g->qkv(0) == nullptr && g->attention_output(0) == nullptr,
         what + ": a lean forward keeps no layer's activations to hand out");
  Expect(!g->Backward().ok(), what + ": Backward after a lean forward was accepted");
  g->set_partial_forward(1, /*skip_head=*/true);
  g->set_observer(&first);
  sl = g->Forward(lx.data(), nullptr, B, dist::RingLocalLength(N, r, P), nullptr);
  Expect(sl.ok() && first.layers_seen() == 1, what + ": lean forward of layer 0 only");
  g->set_partial_forward(0, false);
  g->set_lean_chunk_rows(256);
  g->set_sequence_parallel(nullptr, 0);
  g->set_observer(nullptr);
  if (!st.ok()) return;
  Expect(lean.layers_seen() == cs.c.n_layer, what + ": lean forward's layers");
  for (int64_t l = 0; l < cs.c.n_layer && sl.ok(); ++l) {
    const std::string wl = what + " layer " + std::to_string(l);
    // Chunked row-local parts: the weight products' row blocking may round differently.
    ExpectKeysNear(lean.keys()[l], mine.keys()[l], 1e-5, wl + ": the lean forward's keys");
    ExpectKeysNear(lean.rows()[l], mine.rows()[l], 1e-5, wl + ": the lean forward's rows");
    ExpectStatsNear(lean.stats()[l].Finish(), mine.stats()[l].Finish(),
                    wl + ": the lean forward's statistics");
  }
  for (int64_t l = 0; l < cs.c.n_layer; ++l) {
    const std::string wl = what + " layer " + std::to_string(l);
    ExpectKeysNear(mine.keys()[l], one.keys()[l], 2e-5, wl + ": gathered keys");
    st = mine.stats()[l].AllReduce(w, "observer statistics");
    Expect(st.ok(), wl + ": AllReduce " + st.ToString());
    ExpectStatsNear(mine.stats()[l].Finish(), one.stats()[l].Finish(), wl);
  }
}

// A plain observer (one that does not take striped rows).
class PlainObserver : public attnlab::ForwardObserver {
 public:
  void OnLayer(const attnlab::LayerTensors&) override {}
};

// Every rank must get an error; rank 0 prints it.
void ExpectError(Gpt& g, int64_t global, int64_t B, int64_t T, std::vector<int32_t> x,
                 attnlab::KvCache* cache, const std::string& what) {
  dist::Comm& w = dist::World();
  g.set_sequence_parallel(&w, global);
  if (x.empty()) x.assign(std::max<int64_t>(1, B * T), 1);
  const Status st = g.Forward(x.data(), nullptr, B, T, nullptr, cache);
  Expect(!st.ok(), what + ": accepted");
  if (w.root() && !st.ok()) std::printf("  error, as expected (%s): %s\n", what.c_str(), st.message().c_str());
  g.set_sequence_parallel(nullptr, 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (!attnlab::dist_check::Start(&argc, &argv)) return 1;
  dist::Comm& w = dist::World();
  const int P = w.size(), r = w.rank();
  int cases = 0;
  for (const Case& cs : Cases()) {
    for (int64_t N : {static_cast<int64_t>(P), int64_t{33}}) RunObserverCase(cs, N == 33 ? 2 : 1, N);
    for (int64_t N : {static_cast<int64_t>(P), int64_t{7}, int64_t{33}}) {
      for (int64_t B : {int64_t{1}, int64_t{2}}) {
        RunCase(cs, B, N);
        ++cases;
      }
    }
  }
  // Bad input: an error on every rank, never a hang.
  std::unique_ptr<Gpt> g = Model(Base(), 3);
  if (g) {
    const int64_t N = 20, n = dist::RingLocalLength(N, r, P);
    if (P > 1) ExpectError(*g, P - 1, 1, std::max<int64_t>(1, dist::RingLocalLength(P - 1, r, P)), {}, nullptr, "fewer tokens than ranks");
    ExpectError(*g, N, 1, r == P - 1 ? n + 1 : n, {}, nullptr, "a wrong local length on one rank");
    std::vector<int32_t> bad(n, 1);
    if (r == P - 1) bad[0] = 1000;
    ExpectError(*g, N, 1, n, bad, nullptr, "a bad token on one rank");
    if (P > 1) ExpectError(*g, N, r == 0 ? 2 : 1, n, std::vector<int32_t>(2 * n, 1), nullptr, "batches differ");
    ExpectError(*g, 200, 1, dist::RingLocalLength(200, r, P), {}, nullptr, "longer than the context");
    auto cache = attnlab::MakeKvCache(Base());
    ExpectError(*g, N, 1, n, {}, cache.get(), "a cache");
    ModelConfig wc = Base();
    wc.attention_window = 4;
    std::unique_ptr<Gpt> gw = Model(wc, 3);
    if (gw) ExpectError(*gw, N, 1, n, {}, nullptr, "a window");
    PlainObserver plain;
    g->set_observer(&plain);
    ExpectError(*g, N, 1, n, {}, nullptr, "an observer that does not take striped rows");
    g->set_observer(nullptr);
    // Still usable after the errors.
    RunCase({"after errors", Base()}, 1, 11);
  }
  return attnlab::dist_check::Finish("sequence-parallel decoder: " + std::to_string(cases) +
                                         " cases on " + std::to_string(P) + " rank(s)",
                                     "all match the single-process forward");
}
