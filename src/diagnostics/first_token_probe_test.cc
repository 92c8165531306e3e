// The first-token probe (O(N d), from q . k_0 and the saved lse) equals the same quantities read
// off materialised attention maps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "attnlab/attention.h"
#include "diagnostics/first_token_probe.h"

namespace attnlab {
namespace {

// Materialises every layer's attention map with the reference kernel.
class MapRecorder : public ForwardObserver {
 public:
  explicit MapRecorder(const ModelConfig& c) : c_(c) {}
  void OnLayer(const LayerTensors& t) override {
    const int64_t H = c_.n_head, Hkv = c_.kv_heads(), hd = c_.head_dim(), Q = c_.qkv_dim();
    const int64_t T = t.len, N = t.batch * T;
    auto view = [&](int64_t off) {
      AttentionTensor v;
      v.data = t.qkv + off;
      v.size = N * Q - off;
      v.stride_batch = T * Q, v.stride_token = Q, v.stride_head = hd;
      return v;
    };
    AttentionParams p;
    p.mask.causal = true;
    p.mask.mask_first_key = c_.mask_first_key;
    p.softmax = c_.softmax;
    p.sigmoid_bias = c_.effective_sigmoid_bias();
    std::vector<float> out(N * H * hd), probs(t.batch * H * T * T);
    const AttentionShape s{t.batch, H, Hkv, T, T, hd};
    ASSERT_TRUE(AttentionForwardReference(s, p, view(0), view(H * hd), view((H + Hkv) * hd),
                                          ContiguousView(out.data(), t.batch, H, T, hd), {}, probs)
                    .ok());
    maps.push_back(std::move(probs));
  }
  std::vector<std::vector<float>> maps;  // per layer [B, H, T, T]
  ModelConfig c_;
};

TEST(FirstTokenProbe, MatchesMaterialisedMaps) {
  for (SoftmaxKind kind : {SoftmaxKind::kStandard, SoftmaxKind::kSoftmax1, SoftmaxKind::kSigmoid,
                           SoftmaxKind::kSoftpick}) {
    ModelConfig c;
    c.vocab_size = 50, c.context = 20, c.d_model = 32, c.n_layer = 2, c.n_head = 4;
    c.n_kv_head = 2, c.init_std = 0.2f, c.softmax = kind;
    auto g = Gpt::Create(c);
    ASSERT_TRUE(g.ok());
    g.value()->params().Initialize(c, 3);
    std::vector<int32_t> tokens(3 * 20);
    std::mt19937 rng(1);
    for (auto& x : tokens) x = rng() % 50;
    FirstTokenProbe probe(c);
    MapRecorder rec(c);
    g.value()->set_observer(&probe);
    ASSERT_TRUE(g.value()->Forward(tokens.data(), nullptr, 3, 20, nullptr).ok());
    g.value()->set_observer(&rec);
    ASSERT_TRUE(g.value()->Forward(tokens.data(), nullptr, 3, 20, nullptr).ok());
    const auto alpha = probe.alpha1(), last = probe.last_row();
    for (int64_t l = 0; l < 2; ++l) {
      for (int64_t h = 0; h < 4; ++h) {
        double a = 0, z = 0;
        for (int64_t b = 0; b < 3; ++b) {
          const float* m = rec.maps[l].data() + (b * 4 + h) * 20 * 20;
          for (int64_t t = 0; t < 20; ++t) a += m[t * 20];
          z += m[19 * 20];
        }
        EXPECT_NEAR(alpha[l][h], a / (3 * 20), 1e-5);
        EXPECT_NEAR(last[l][h], z / 3, 1e-5);
      }
    }
  }
}

// The trainer's record (MeasureFirstToken, passed as TrainOptions::probe) is the probe's own
// numbers on the same batch, and the progress text
// names the largest alpha_1 and the sink rate.
TEST(FirstTokenProbe, TrainingRecordIsTheProbesNumbers) {
  ModelConfig c;
  c.vocab_size = 50, c.context = 16, c.d_model = 32, c.n_layer = 2, c.n_head = 4;
  c.init_std = 0.2f;
  auto g = Gpt::Create(c);
  ASSERT_TRUE(g.ok());
  g.value()->params().Initialize(c, 5);
  std::vector<int32_t> tokens(2 * 16);
  std::mt19937 rng(2);
  for (auto& x : tokens) x = rng() % 50;
  FirstTokenProbe probe(c);
  g.value()->set_observer(&probe);
  ASSERT_TRUE(g.value()->Forward(tokens.data(), nullptr, 2, 16, nullptr).ok());
  g.value()->set_observer(nullptr);

  auto rec = MeasureFirstToken(*g.value(), tokens.data(), 2, 16);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ((*rec)["alpha1"].get<std::vector<std::vector<double>>>(), probe.alpha1());
  EXPECT_EQ((*rec)["last_row"].get<std::vector<std::vector<double>>>(), probe.last_row());
  EXPECT_DOUBLE_EQ((*rec)["uniform_last"].get<double>(), 1.0 / 16);
  EXPECT_DOUBLE_EQ((*rec)["sink_rate"].get<double>(), probe.SinkRate(0.3));

  double best = 0;
  for (const auto& l : probe.alpha1()) {
    for (double a : l) best = std::max(best, a);
  }
  char want[64];
  std::snprintf(want, sizeof(want), "max alpha1 %.3f sink %.2f", best, probe.SinkRate(0.3));
  EXPECT_EQ(FirstTokenProgressText(*rec), want);
  // A bad batch is an error, not a crash.
  EXPECT_FALSE(MeasureFirstToken(*g.value(), tokens.data(), 2, 17).ok());
}

}  // namespace
}  // namespace attnlab
