// The attention view's data against the patterns it came from (brute force: every key sorted per
// row, block means in double), the page's placeholders and escaping, and bad input.
#include "report/attention_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "report/report_test_util.h"

namespace attnlab::report {
namespace {

using testing::Base64Decode;
using testing::IsValidUtf8;

// [H, N, N] causal softmax rows of random scores.
std::vector<float> RandomPatterns(std::mt19937& rng, int64_t H, int64_t N) {
  std::normal_distribution<float> z(0.0f, 1.5f);
  std::vector<float> p(H * N * N, 0.0f);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < N; ++i) {
      float* row = p.data() + (h * N + i) * N;
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += row[j] = std::exp(z(rng));
      for (int64_t j = 0; j <= i; ++j) row[j] = static_cast<float>(row[j] / sum);
    }
  }
  return p;
}

std::vector<std::string> Names(int64_t n) {
  std::vector<std::string> t;
  for (int64_t i = 0; i < n; ++i) {
    std::string s = "t";
    s += std::to_string(i);  // (not "t" + ...: GCC 12 -Wrestrict false positive, bug 105329)
    t.push_back(s);
  }
  return t;
}

TEST(AttentionView, DataIsTheTopKeysFirstColumnAndBlockMeans) {
  std::mt19937 rng(7);
  const int64_t H = 3, N = 130, k = 5;  // blocks of ceil(130 / 64) = 3 tokens, 44 of them
  auto b = AttentionViewBuilder::Create(Names(N), H, k);
  ASSERT_TRUE(b.ok()) << b.status().message();
  const std::vector<float> p2 = RandomPatterns(rng, H, N), p0 = RandomPatterns(rng, H, N);
  ASSERT_TRUE(b->AddLayer(2, p2).ok());  // out of order: the page lists layers ascending
  ASSERT_TRUE(b->AddLayer(0, p0).ok());
  const nlohmann::json d = b->Data();
  EXPECT_EQ(d["n"], N);
  EXPECT_EQ(d["layers"], nlohmann::json({0, 2}));
  EXPECT_EQ(d["block"], 3);
  EXPECT_EQ(d["nblocks"], 44);
  EXPECT_EQ(d["key_bytes"], 2);
  EXPECT_EQ(d["top_k"], k);
  ASSERT_EQ(d["maps"].size(), 6u);
  for (const nlohmann::json& m : d["maps"]) {
    const int64_t l = m["layer"], h = m["head"];
    const float* ph = (l == 0 ? p0 : p2).data() + h * N * N;
    const std::string keys = Base64Decode(m["keys"].get<std::string>());
    const std::string w = Base64Decode(m["w"].get<std::string>());
    ASSERT_EQ(keys.size(), static_cast<size_t>(N * k * 2));
    ASSERT_EQ(w.size(), static_cast<size_t>(N * k));
    for (int64_t i = 0; i < N; ++i) {
      std::vector<int64_t> order(N);
      for (int64_t j = 0; j < N; ++j) order[j] = j;
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t c) { return ph[i * N + a] > ph[i * N + c]; });
      for (int64_t r = 0; r < k; ++r) {
        const int64_t key = static_cast<uint8_t>(keys[(i * k + r) * 2]) |
                            static_cast<uint8_t>(keys[(i * k + r) * 2 + 1]) << 8;
        EXPECT_EQ(key, order[r]) << "layer " << l << " head " << h << " row " << i << " rank " << r;
        EXPECT_NEAR(static_cast<uint8_t>(w[i * k + r]) / 255.0, ph[i * N + order[r]], 0.5 / 255 + 1e-7);
      }
      EXPECT_NEAR(m["first"][i].get<double>(), ph[i * N], 0.5e-4 + 1e-9);
    }
    const std::string blocks = Base64Decode(m["blocks"].get<std::string>());
    ASSERT_EQ(blocks.size(), 44u * 44u);
    std::vector<double> mean(44 * 44, 0.0);
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < N; ++j) mean[(i / 3) * 44 + j / 3] += ph[i * N + j] / 9.0;
    }
    const double top = *std::max_element(mean.begin(), mean.end());
    for (int64_t i = 0; i < 44 * 44; ++i) {
      EXPECT_NEAR(static_cast<uint8_t>(blocks[i]) / 255.0, mean[i] / top, 0.5 / 255 + 1e-9);
    }
  }
}

TEST(AttentionView, TiesKeepTheLowerKeyAndTopKIsClamped) {
  const int64_t N = 4;
  auto b = AttentionViewBuilder::Create(Names(N), 1, 99);  // more keys than tokens: N
  ASSERT_TRUE(b.ok());
  std::vector<float> p(N * N, 0.25f);  // every row uniform over all four keys
  ASSERT_TRUE(b->AddLayer(0, p).ok());
  const nlohmann::json d = b->Data();
  EXPECT_EQ(d["top_k"], N);
  const std::string keys = Base64Decode(d["maps"][0]["keys"].get<std::string>());
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t r = 0; r < N; ++r) EXPECT_EQ(keys[(i * N + r) * 2], static_cast<char>(r));
  }
}

TEST(AttentionView, PageCarriesTheDataAndNothingEndsItsScriptEarly) {
  std::vector<std::string> tokens = {"</script><b>x</b>", "<!--", "__TITLE__", "\xff\xfe", "a"};
  auto b = AttentionViewBuilder::Create(tokens, 2, 3);
  ASSERT_TRUE(b.ok());
  std::mt19937 rng(3);
  ASSERT_TRUE(b->AddLayer(1, RandomPatterns(rng, 2, 5)).ok());
  auto page = b->Render("view of <model> & \"__DATA__\"", 16);
  ASSERT_TRUE(page.ok()) << page.status().message();
  const std::string& s = *page;
  EXPECT_TRUE(IsValidUtf8(s));
  EXPECT_NE(s.find("view of &lt;model&gt; &amp; &quot;__DATA__&quot;"), std::string::npos);
  EXPECT_EQ(s.find("<b>x"), std::string::npos);
  EXPECT_EQ(s.find("<!--\""), std::string::npos);
  // Exactly one </script>: the template's own.
  const size_t close = s.find("</script>");
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(s.find("</script>", close + 1), std::string::npos);
  // The data line parses back to the builder's data plus the page size.
  const std::string start = "const D = ";
  const size_t a = s.find(start);
  ASSERT_NE(a, std::string::npos);
  const size_t e = s.find(";\n", a);
  nlohmann::json d = nlohmann::json::parse(s.substr(a + start.size(), e - a - start.size()));
  nlohmann::json want = b->Data();
  want["page"] = 16;
  EXPECT_EQ(d, want);
  EXPECT_EQ(d["tokens"][0], "</script><b>x</b>");
  EXPECT_EQ(d["tokens"][3], "\xEF\xBF\xBD\xEF\xBF\xBD");  // each ill-formed byte: U+FFFD
}

TEST(AttentionView, BadInputIsAnErrorAndAddsNothing) {
  EXPECT_FALSE(AttentionViewBuilder::Create({}, 1, 4).ok());
  EXPECT_FALSE(AttentionViewBuilder::Create(Names(3), 0, 4).ok());
  auto b = AttentionViewBuilder::Create(Names(3), 2, 4);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->Render("x", 16).ok());  // no layer yet
  std::vector<float> p(2 * 9, 1.0f / 3);
  EXPECT_FALSE(b->AddLayer(0, std::span<const float>(p).first(17)).ok());
  p[5] = std::nanf("");
  EXPECT_FALSE(b->AddLayer(0, p).ok());
  p[5] = INFINITY;
  EXPECT_FALSE(b->AddLayer(0, p).ok());
  EXPECT_EQ(b->layers(), 0);
  p[5] = 0.5f;
  ASSERT_TRUE(b->AddLayer(0, p).ok());
  EXPECT_FALSE(b->AddLayer(0, p).ok());  // twice
  EXPECT_EQ(b->layers(), 1);
  EXPECT_FALSE(b->Render("x", 15).ok());
  EXPECT_TRUE(b->Render("x", 16).ok());
}

}  // namespace
}  // namespace attnlab::report
