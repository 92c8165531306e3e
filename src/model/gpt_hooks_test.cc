// Gpt's hook points (model/forward_hooks.h): hooks that change nothing leave the logits as they
// are (the explicit attention path equals the flash one), hooks see every point with its shape,
// an edit through the scores is the model's own mask_first_key, and hooks refuse a KV cache.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cache/kv_cache.h"
#include "model/forward_hooks.h"
#include "model/gpt.h"
#include "model/test_models.h"

namespace attnlab {
namespace {

using namespace test_models;  // TinyConfig, TinyModel, RandomTokens

// Wants every point (or only those in `only`); records the shapes; applies `edit` if set.
class RecordingHooks : public ForwardHooks {
 public:
  std::set<HookPoint> only;
  std::function<void(const HookTensor&)> edit;
  std::map<std::pair<int, int64_t>, std::vector<int64_t>> seen;  // (point, layer) -> shape

  bool Wants(HookPoint p, int64_t) const override { return only.empty() || only.count(p); }
  Status OnHook(const HookTensor& t) override {
    seen[{static_cast<int>(t.point), t.layer}] =
        std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.rank);
    if (edit) edit(t);
    return Status::Ok();
  }
};

std::vector<float> Logits(Gpt& g, const std::vector<int32_t>& toks, int64_t B, ForwardHooks* h) {
  g.set_hooks(h);
  const int64_t T = static_cast<int64_t>(toks.size()) / B;
  EXPECT_TRUE(g.Forward(toks.data(), nullptr, B, T, nullptr).ok());
  g.set_hooks(nullptr);
  return std::vector<float>(g.logits(), g.logits() + B * g.last_len() * g.config().vocab_size);
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(GptHooks, IdentityHooksKeepTheLogitsInEveryConfiguration) {
  std::mt19937_64 rng(4);
  for (int variant = 0; variant < 4; ++variant) {
    ModelConfig c = TinyConfig();
    if (variant == 1) c.sink_token = true, c.position = PositionEncoding::kLearned;
    if (variant == 2) c.norm = NormPlacement::kPost, c.output_gate = true;
    if (variant == 3) c.n_kv_head = 2, c.softmax = SoftmaxKind::kSinkLogit;
    SCOPED_TRACE("variant " + std::to_string(variant));
    auto g = TinyModel(c, 9);
    ASSERT_TRUE(g);
    PerturbConstantInitTensors(g->params(), rng, 0.5f);
    const std::vector<int32_t> toks = RandomTokens(2 * 9, c.vocab_size, rng);
    const std::vector<float> plain = Logits(*g, toks, 2, nullptr);
    RecordingHooks all;
    const std::vector<float> hooked = Logits(*g, toks, 2, &all);
    EXPECT_LE(MaxDiff(plain, hooked), 2e-5);
    const int64_t Tm = 9 + (c.sink_token ? 1 : 0), hd = c.head_dim();
    using P = HookPoint;
    auto shape = [&](P p, int64_t l) { return all.seen[{static_cast<int>(p), l}]; };
    EXPECT_EQ(shape(P::kQ, 1), (std::vector<int64_t>{2, Tm, c.n_head, hd}));
    EXPECT_EQ(shape(P::kK, 0), (std::vector<int64_t>{2, Tm, c.kv_heads(), hd}));
    EXPECT_EQ(shape(P::kPattern, 1), (std::vector<int64_t>{2, c.n_head, Tm, Tm}));
    EXPECT_EQ(shape(P::kEntropy, 0), (std::vector<int64_t>{2, c.n_head, Tm}));
    EXPECT_EQ(shape(P::kResidPost, 1), (std::vector<int64_t>{2, Tm, c.d_model}));
    EXPECT_EQ(all.seen.count({static_cast<int>(P::kRotQ), 0}), c.position == PositionEncoding::kRope ? 1u : 0u);
    EXPECT_EQ(all.seen.count({static_cast<int>(P::kPosEmbed), -1}), c.position == PositionEncoding::kLearned ? 1u : 0u);
    EXPECT_EQ(all.seen.count({static_cast<int>(P::kLnFinal), -1}), c.norm == NormPlacement::kPre ? 1u : 0u);
  }
}

TEST(GptHooks, ScoresEditedToMaskKeyZeroIsMaskFirstKey) {
  std::mt19937_64 rng(8);
  ModelConfig c = TinyConfig();
  auto g = TinyModel(c, 3);
  ModelConfig masked = c;
  masked.mask_first_key = true;
  auto want_model = TinyModel(masked, 3);  // the same initialisation
  ASSERT_TRUE(g && want_model);
  const std::vector<int32_t> toks = RandomTokens(10, c.vocab_size, rng);
  RecordingHooks h;
  h.only = {HookPoint::kAttnScores};
  h.edit = [](const HookTensor& t) {  // [B, H, Tq, Tk]: column 0 -> -inf
    const int64_t rows = t.shape[0] * t.shape[1] * t.shape[2], Tk = t.shape[3];
    for (int64_t r = 0; r < rows; ++r) t.data[r * Tk] = -std::numeric_limits<float>::infinity();
  };
  const std::vector<float> got = Logits(*g, toks, 1, &h);
  const std::vector<float> want = Logits(*want_model, toks, 1, nullptr);
  EXPECT_LE(MaxDiff(got, want), 2e-5);
  EXPECT_GT(MaxDiff(got, Logits(*g, toks, 1, nullptr)), 1e-3);  // the edit mattered
}

TEST(GptHooks, HookErrorsStopTheForwardAndACacheIsRefused) {
  std::mt19937_64 rng(1);
  auto g = TinyModel(5);
  ASSERT_TRUE(g);
  const std::vector<int32_t> toks = RandomTokens(6, g->config().vocab_size, rng);
  class Failing : public ForwardHooks {
    bool Wants(HookPoint p, int64_t l) const override { return p == HookPoint::kZ && l == 1; }
    Status OnHook(const HookTensor&) override { return Status::InvalidArgument("no thanks"); }
  } failing;
  g->set_hooks(&failing);
  Status st = g->Forward(toks.data(), nullptr, 1, 6, nullptr);
  EXPECT_EQ(st.message(), "no thanks");
  auto cache = MakeKvCache(g->config());
  st = g->Forward(toks.data(), nullptr, 1, 6, nullptr, cache.get());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not with a KV cache"), std::string::npos) << st.message();
  g->set_hooks(nullptr);
  EXPECT_TRUE(g->Forward(toks.data(), nullptr, 1, 6, nullptr, cache.get()).ok());
}

}  // namespace
}  // namespace attnlab
