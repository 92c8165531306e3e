// The analysis pipeline (chunked KV-cache forward, statistics streamed over query rows) against
// the materialised computation (one full forward, every attention map materialised by the
// reference kernel and fed to the reference statistics), on random models at len <= 512.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "diagnostics/analysis.h"

namespace attnlab {
namespace {

// Materialises every layer's full map and keeps its residual stream.
class Materialiser : public ForwardObserver {
 public:
  Materialiser(const ModelConfig& c, const AttentionStatsOptions& o) : c_(c) {
    for (int64_t l = 0; l < c.n_layer; ++l) refs.emplace_back(o, c.n_head);
    streams.resize(c.n_layer);
  }
  void OnLayer(const LayerTensors& t) override {
    const int64_t H = c_.n_head, hd = c_.head_dim(), Q = c_.qkv_dim(), T = t.len;
    AttentionTensor q;
    q.data = t.qkv, q.size = T * Q, q.stride_token = Q, q.stride_head = hd, q.stride_batch = T * Q;
    const AttentionShape s{1, H, c_.kv_heads(), T, t.len_k, hd};
    std::vector<float> out(T * H * hd);
    std::vector<double> probs_d;
    std::vector<float> probs(H * T * t.len_k);
    ASSERT_TRUE(AttentionForwardReference(s, *t.attention, q, t.k_all, t.v_all,
                                          TokenMajorView(out.data(), 1, H, T, hd), {}, probs)
                    .ok());
    probs_d.assign(probs.begin(), probs.end());
    ASSERT_TRUE(refs[t.layer].AddProbs(*t.attention, probs_d, T, t.len_k).ok());
    streams[t.layer].assign(t.residual_out, t.residual_out + T * c_.d_model);
  }
  ModelConfig c_;
  std::vector<AttentionStatsReference> refs;
  std::vector<std::vector<float>> streams;
};

void ExpectRel(double a, double b, double tol, const std::string& what) {
  if (std::isnan(a) && std::isnan(b)) return;
  EXPECT_LE(std::abs(a - b), tol * std::max(1.0, std::abs(b))) << what << ": " << a << " vs " << b;
}

TEST(Analysis, StreamedStatisticsEqualTheMaterialisedOnes) {
  for (SoftmaxKind kind : {SoftmaxKind::kStandard, SoftmaxKind::kSoftmax1}) {
    ModelConfig c;
    c.vocab_size = 60, c.context = 512, c.d_model = 32, c.n_layer = 3, c.n_head = 4;
    c.n_kv_head = 2, c.init_std = 0.15f, c.softmax = kind;
    auto g = Gpt::Create(c);
    ASSERT_TRUE(g.ok());
    g.value()->params().Initialize(c, 21);
    std::mt19937 rng(2);
    std::vector<int32_t> tokens(300);
    for (auto& x : tokens) x = rng() % 60;
    AnalysisOptions ao;
    ao.window = 300;
    ao.chunk = 64;  // five cached chunks of query rows
    ao.jsd_rows = 0;
    ao.pattern_sequences = 0;
    auto r = AnalyzeModel(*g.value(), tokens, ao);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    // Materialised: one full forward, full maps.
    AttentionStatsOptions so;
    so.first_k = ao.first_k, so.jsd_rows = 0, so.diagonals = {AttentionDiagonal{1, 0, -1}};
    Materialiser mat(c, so);
    g.value()->set_observer(&mat);
    ASSERT_TRUE(g.value()->Forward(tokens.data(), nullptr, 1, 300, nullptr).ok());
    g.value()->set_observer(nullptr);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const AttentionLayerStats want = mat.refs[l].Finish();
      const AttentionLayerStats& got = r.value().layers[l].attention;
      for (int64_t h = 0; h < c.n_head; ++h) {
        const auto &a = got.heads[h], &b = want.heads[h];
        const std::string tag = "layer " + std::to_string(l) + " head " + std::to_string(h);
        ExpectRel(a.entropy, b.entropy, 1e-6, tag + " entropy");
        ExpectRel(a.distance, b.distance, 1e-6, tag + " distance");
        ExpectRel(a.sink_mass, b.sink_mass, 1e-6, tag + " sink mass");
        ExpectRel(a.last_key0, b.last_key0, 1e-6, tag + " last row");
        for (size_t k = 0; k < a.alpha.size(); ++k) ExpectRel(a.alpha[k], b.alpha[k], 1e-6, tag + " alpha");
        for (size_t k = 0; k < a.first_mass.size(); ++k) {
          ExpectRel(a.first_mass[k], b.first_mass[k], 1e-6, tag + " first mass");
        }
        ExpectRel(a.diagonal[0], b.diagonal[0], 1e-6, tag + " previous token");
      }
      for (size_t i = 0; i < got.jsd.size(); ++i) ExpectRel(got.jsd[i], want.jsd[i], 1e-6, "jsd");
      // Representation metrics of the layer's output, from the full forward's residual stream.
      auto m = ComputeRepresentationMetrics(MakeTokenMatrix(mat.streams[l].data(), 300, c.d_model));
      ASSERT_TRUE(m.ok());
      const StreamMetrics& s = r.value().layers[l].output;
      ExpectRel(s.relative_residual, m.value().residual.relative, 1e-6, "relative residual");
      ExpectRel(s.mean_cosine, m.value().cosine.mean_cosine, 1e-6, "cosine");
      ExpectRel(s.mad, m.value().cosine.mad, 1e-5, "MAD");
      ExpectRel(s.dirichlet_relative, m.value().dirichlet.relative, 1e-6, "Dirichlet");
      ExpectRel(s.erank, m.value().erank.erank, 1e-5, "effective rank");
      ExpectRel(s.massive.ratio, m.value().massive.ratio, 1e-5, "massive ratio");
    }
  }
}

}  // namespace
}  // namespace attnlab
