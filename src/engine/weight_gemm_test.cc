// Products with weights in their file's precision (weight_gemm.h): every block dtype and a toy
// quantized row codec, blocks of awkward row counts (a panel never straddles two blocks), bias
// or none, 1 to 97 input rows, against a double-precision reference on the widened weights;
// bad matrices refused.
//
// Tolerance (derived as in gemm_test.cc): each output is a K-term fp32 dot product of x with
// exactly representable widened weights, error at most gamma_K * sum_k |x_k w_k| (Higham eq. 3.5)
// plus one rounding for the bias; we allow 2x that.
#include "engine/weight_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "attnlab/matmul_precision.h"
#include "attnlab/thread_pool.h"
#include "engine/gemm_bf16.h"

namespace attnlab::internal {
namespace {


struct Stored {
  std::vector<std::vector<uint16_t>> b16;
  std::vector<std::vector<float>> b32;
  std::vector<std::vector<float>> widened;  // per block, [rows, cols] as float
};

// A matrix of the given block row counts and dtypes, random N(0, 1) values rounded to each dtype.
WeightMatrix MakeMatrix(const std::vector<int64_t>& rows, const std::vector<KvDtype>& types,
                        int64_t cols, std::mt19937_64& rng, Stored* s) {
  std::normal_distribution<float> nd;
  WeightMatrix w;
  w.cols = cols;
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t n = rows[b] * cols;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng);
    if (types[b] == KvDtype::kF32) {
      s->b32.push_back(v);
      w.blocks.push_back({s->b32.back().data(), KvDtype::kF32, rows[b]});
    } else {
      std::vector<uint16_t> h(static_cast<size_t>(n));
      ConvertToKvDtype(v.data(), n, types[b], h.data());
      ConvertFromKvDtype(h.data(), n, types[b], v.data());
      s->b16.push_back(std::move(h));
      w.blocks.push_back({s->b16.back().data(), types[b], rows[b]});
    }
    s->widened.push_back(v);
    w.rows += rows[b];
  }
  return w;
}

TEST(WeightGemm, MatchesADoubleReferenceForEveryDtypeAndBlockLayout) {
  ScopedWeightMatmul fp32(WeightMatmul::kF32);  // fp32 activations (the bf16 path: the test below)
  ThreadPool pool(3);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<KvDtype>>> layouts = {
      {{1}, {KvDtype::kBF16}},
      {{7, 1, 59}, {KvDtype::kF16, KvDtype::kBF16, KvDtype::kF32}},
      {{113, 97}, {KvDtype::kBF16, KvDtype::kBF16}},
      {{1025}, {KvDtype::kF16}},
      {{300, 600}, {KvDtype::kF32, KvDtype::kF16}},
  };
  int checked = 0;
  for (const auto& [rows, types] : layouts) {
    for (int64_t cols : {1, 7, 59, 97, 1025}) {
      for (int64_t N : {1, 3, 7, 97}) {  // 1 and 3: the row kernel; 7, 97: panels + sgemm
        for (bool with_bias : {false, true}) {
          Stored s;
          s.b16.reserve(rows.size());
          s.b32.reserve(rows.size());
          const WeightMatrix w = MakeMatrix(rows, types, cols, rng, &s);
          ASSERT_TRUE(ValidateWeightMatrix(w).ok());
          std::vector<float> x(static_cast<size_t>(N * cols)), bias(static_cast<size_t>(w.rows));
          for (float& v : x) v = nd(rng);
          for (float& v : bias) v = nd(rng);
          std::vector<float> y(static_cast<size_t>(N * w.rows), NAN);
          MatmulWeightT(N, x.data(), w, with_bias ? bias.data() : nullptr, y.data(), &pool);
          const double u = std::ldexp(1.0, -24), gamma = cols * u / (1 - cols * u);
          for (int64_t i = 0; i < N; ++i) {
            int64_t r = 0;
            for (size_t b = 0; b < rows.size(); ++b) {
              for (int64_t j = 0; j < rows[b]; ++j, ++r) {
                double ref = with_bias ? bias[r] : 0.0, mag = 0.0;
                for (int64_t k = 0; k < cols; ++k) {
                  const double p = double(x[i * cols + k]) * s.widened[b][j * cols + k];
                  ref += p;
                  mag += std::fabs(p);
                }
                const double tol = 2 * (gamma * mag + u * std::fabs(ref)) + 1e-30;
                ASSERT_NEAR(y[i * w.rows + r], ref, tol)
                    << "N " << N << " cols " << cols << " row " << r << " block " << b;
              }
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 200);
}

// The bf16 path (gemm_bf16.h): x rounded to bf16, products with the stored bf16 rows in fp32.
// Two bounds per output, with mag = sum_k |x_k w_k|:
//  - against the double product of bf16(x) and w: fp32 accumulation only, gamma_K mag (x2);
//  - against the double product of x itself: plus the rounding of x, 2^-8 mag.
// Shapes: one and several blocks of awkward row counts (runs of 16 rows straddle none), K = 1
// to 1025, N from 5 (just past the row kernel) across the 512-row chunk boundary, bias or none.
TEST(WeightGemm, Bf16PathMatchesADoubleReferenceOnBf16RoundedInputs) {
  ScopedWeightMatmul bf16(WeightMatmul::kBf16);
  if (!bf16.status().ok()) GTEST_SKIP() << "oneDNN cannot multiply bf16 on this CPU";
  ThreadPool pool(3);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> nd;
  struct Case {
    std::vector<int64_t> rows;
    int64_t cols, N;
  };
  const std::vector<Case> cases = {
      {{1}, 1, 5},         {{1}, 7, 97},       {{7, 1, 59}, 59, 5},  {{7, 1, 59}, 97, 33},
      {{113, 97}, 1025, 7}, {{113, 97}, 33, 600}, {{17}, 300, 1030}, {{1025}, 64, 20},
  };
  for (const Case& c : cases) {
    for (bool with_bias : {false, true}) {
      Stored s;
      s.b16.reserve(c.rows.size());
      const WeightMatrix w = MakeMatrix(c.rows, std::vector<KvDtype>(c.rows.size(), KvDtype::kBF16),
                                        c.cols, rng, &s);
      std::vector<float> x(static_cast<size_t>(c.N * c.cols)), bias(static_cast<size_t>(w.rows));
      for (float& v : x) v = nd(rng);
      for (float& v : bias) v = nd(rng);
      std::vector<uint16_t> xh(x.size());
      std::vector<float> xr(x.size());
      ConvertToKvDtype(x.data(), static_cast<int64_t>(x.size()), KvDtype::kBF16, xh.data());
      ConvertFromKvDtype(xh.data(), static_cast<int64_t>(x.size()), KvDtype::kBF16, xr.data());
      std::vector<float> y(static_cast<size_t>(c.N * w.rows), NAN);
      MatmulWeightT(c.N, x.data(), w, with_bias ? bias.data() : nullptr, y.data(), &pool);
      const double u = std::ldexp(1.0, -24), gamma = c.cols * u / (1 - c.cols * u);
      for (int64_t i = 0; i < c.N; ++i) {
        int64_t r = 0;
        for (size_t b = 0; b < c.rows.size(); ++b) {
          for (int64_t j = 0; j < c.rows[b]; ++j, ++r) {
            double ref = with_bias ? bias[r] : 0.0, ref_x = ref, mag = 0.0;
            for (int64_t k = 0; k < c.cols; ++k) {
              const double wk = s.widened[b][j * c.cols + k];
              ref += double(xr[i * c.cols + k]) * wk;
              ref_x += double(x[i * c.cols + k]) * wk;
              mag += std::fabs(double(x[i * c.cols + k]) * wk);
            }
            const double acc = 2 * (gamma * mag * (1 + std::ldexp(1.0, -8)) + u * std::fabs(ref));
            const double got = y[i * w.rows + r];
            ASSERT_NEAR(got, ref, acc + 1e-30) << "N " << c.N << " cols " << c.cols << " row " << r;
            ASSERT_NEAR(got, ref_x, acc + std::ldexp(mag, -8) + 1e-30)
                << "N " << c.N << " cols " << c.cols << " row " << r;
          }
        }
      }
    }
  }
}

TEST(WeightGemm, MatmulSettingParsesAndDescribesItself) {
  EXPECT_EQ(*ParseWeightMatmul("fp32"), WeightMatmul::kF32);
  EXPECT_EQ(*ParseWeightMatmul("bf16"), WeightMatmul::kBf16);
  EXPECT_EQ(*ParseWeightMatmul("auto"), WeightMatmul::kAuto);
  const Result<WeightMatmul> bad = ParseWeightMatmul("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected auto, fp32 or bf16"), std::string::npos);
  {
    ScopedWeightMatmul fp32(WeightMatmul::kF32);
    EXPECT_FALSE(Bf16WeightMatmulActive());
    EXPECT_EQ(WeightMatmulDescription().rfind("fp32", 0), 0u) << WeightMatmulDescription();
  }
  {
    ScopedWeightMatmul bf16(WeightMatmul::kBf16);
    if (bf16.status().ok()) {
      EXPECT_TRUE(Bf16WeightMatmulActive());
      EXPECT_EQ(WeightMatmulDescription().rfind("bf16 (oneDNN ", 0), 0u) << WeightMatmulDescription();
    } else {
      EXPECT_FALSE(Bf16GemmImplementation().ok());
    }
  }
  // A bad product is refused, not run.
  uint16_t a = 0, b = 0;
  float c = 0;
  EXPECT_FALSE(GemmBf16NT(1, 1, 2, &a, 1, &b, 2, &c, 1).ok());  // lda < K
  EXPECT_FALSE(GemmBf16NT(0, 1, 1, &a, 1, &b, 1, &c, 1).ok());
}

TEST(WeightGemm, ReproducibleForAThreadCountAndRowLookupIsExact) {
  std::mt19937_64 rng(3);
  Stored s;
  const WeightMatrix w = MakeMatrix({130, 3}, {KvDtype::kBF16, KvDtype::kF16}, 300, rng, &s);
  std::vector<float> x(5 * 300);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  std::vector<float> y1(5 * 133), y3(5 * 133), y3b(5 * 133);
  ThreadPool one(1), three(3);
  MatmulWeightT(5, x.data(), w, nullptr, y1.data(), &one);
  MatmulWeightT(5, x.data(), w, nullptr, y3.data(), &three);
  MatmulWeightT(5, x.data(), w, nullptr, y3b.data(), &three);
  EXPECT_EQ(y3, y3b);  // fixed panels per thread count: each column is one task's sgemm
  // One input row (decode): each output is one dot product, whatever the thread count.
  std::vector<float> d1(133), d3(133);
  MatmulWeightT(1, x.data(), w, nullptr, d1.data(), &one);
  MatmulWeightT(1, x.data(), w, nullptr, d3.data(), &three);
  EXPECT_EQ(d1, d3);
  for (size_t i = 0; i < y1.size(); ++i) {
    // Panels differ with the thread count; per-element sums may round differently (300 terms).
    EXPECT_NEAR(y1[i], y3[i], 1e-4f * (1.0f + std::fabs(y1[i]))) << i;
  }
  std::vector<float> row(300);
  WeightRowToFloat(w, 131, row.data());  // second block, row 1
  for (int64_t k = 0; k < 300; ++k) ASSERT_EQ(row[k], s.widened[1][300 + k]);
  WeightRowToFloat(w, 0, row.data());
  for (int64_t k = 0; k < 300; ++k) ASSERT_EQ(row[k], s.widened[0][k]);
}

// A toy quantized row format: blocks of 4 elements in 5 bytes (int8 scale s, int8 q[4]),
// x = s / 16 * q. Its 5-byte blocks put rows at any alignment, as GGUF's Q8_0 (34 bytes) does.
void WidenToy(const uint8_t* src, int64_t n, float* out) {
  for (int64_t b = 0; b < n / 4; ++b) {
    const float d = static_cast<float>(static_cast<int8_t>(src[5 * b])) / 16.0f;
    for (int j = 0; j < 4; ++j) {
      out[4 * b + j] = d * static_cast<float>(static_cast<int8_t>(src[5 * b + 1 + j]));
    }
  }
}
constexpr QuantCodec kToy{"TOY", 4, 5, &WidenToy};

// ggml's Q8_0 layout (fp16 d, int8 q[32]), which the row kernel multiplies without widening.
void WidenQ8(const uint8_t* src, int64_t n, float* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t h;
    std::memcpy(&h, src + 34 * b, 2);
    float d;
    ConvertFromKvDtype(&h, 1, KvDtype::kF16, &d);
    for (int j = 0; j < 32; ++j) {
      out[32 * b + j] = d * static_cast<float>(static_cast<int8_t>(src[34 * b + 2 + j]));
    }
  }
}
constexpr QuantCodec kQ8{"Q8_0", 32, 34, &WidenQ8, QuantLayout::kQ8_0};

TEST(WeightGemm, QuantizedBlocksMatchADoubleReferenceOnTheirWidenedValues) {
  ScopedWeightMatmul fp32(WeightMatmul::kF32);  // its all-bf16 layouts: fp32 activations
  ThreadPool pool(3);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> byte(-128, 127);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<bool>>> layouts = {
      {{1}, {true}}, {{7, 1, 59}, {true, false, true}}, {{113, 97}, {false, true}}, {{1025}, {true}}};
  for (const auto& [rows, quant] : layouts) {
    for (int64_t cols : {4, 60, 100, 1028}) {
      for (int64_t N : {1, 7, 97}) {
        WeightMatrix w;
        w.cols = cols;
        std::vector<std::vector<uint8_t>> q;  // the stored blocks (1 byte past, to misalign)
        std::vector<std::vector<uint16_t>> h;
        std::vector<std::vector<float>> widened;
        q.reserve(rows.size());
        h.reserve(rows.size());
        for (size_t b = 0; b < rows.size(); ++b) {
          const int64_t n = rows[b] * cols;
          std::vector<float> v(static_cast<size_t>(n));
          if (quant[b]) {
            std::vector<uint8_t>& bytes = q.emplace_back(static_cast<size_t>(n / 4 * 5 + 1));
            for (uint8_t& x : bytes) x = static_cast<uint8_t>(byte(rng));
            WidenToy(bytes.data() + 1, n, v.data());
            w.blocks.push_back({bytes.data() + 1, KvDtype::kF32, rows[b], &kToy});
          } else {
            for (float& x : v) x = nd(rng);
            std::vector<uint16_t>& hb = h.emplace_back(static_cast<size_t>(n));
            ConvertToKvDtype(v.data(), n, KvDtype::kBF16, hb.data());
            ConvertFromKvDtype(hb.data(), n, KvDtype::kBF16, v.data());
            w.blocks.push_back({hb.data(), KvDtype::kBF16, rows[b]});
          }
          widened.push_back(std::move(v));
          w.rows += rows[b];
        }
        ASSERT_TRUE(ValidateWeightMatrix(w).ok());
        std::vector<float> x(static_cast<size_t>(N * cols));
        for (float& v : x) v = nd(rng);
        std::vector<float> y(static_cast<size_t>(N * w.rows), NAN);
        MatmulWeightT(N, x.data(), w, nullptr, y.data(), &pool);
        const double u = std::ldexp(1.0, -24), gamma = cols * u / (1 - cols * u);
        for (int64_t i = 0; i < N; ++i) {
          int64_t r = 0;
          for (size_t b = 0; b < rows.size(); ++b) {
            for (int64_t j = 0; j < rows[b]; ++j, ++r) {
              double ref = 0.0, mag = 0.0;
              for (int64_t k = 0; k < cols; ++k) {
                const double p = double(x[i * cols + k]) * widened[b][j * cols + k];
                ref += p;
                mag += std::fabs(p);
              }
              ASSERT_NEAR(y[i * w.rows + r], ref, 2 * gamma * mag + 1e-30)
                  << "N " << N << " cols " << cols << " row " << r << " block " << b;
            }
          }
        }
        // Row lookups widen exactly.
        std::vector<float> row(static_cast<size_t>(cols));
        WeightRowToFloat(w, w.rows - 1, row.data());
        for (int64_t k = 0; k < cols; ++k) {
          ASSERT_EQ(row[k], widened.back()[(rows.back() - 1) * cols + k]);
        }
        int64_t bytes = 0;
        for (size_t b = 0; b < rows.size(); ++b) bytes += rows[b] * (quant[b] ? cols / 4 * 5 : cols * 2);
        EXPECT_EQ(w.bytes(), bytes);
      }
    }
  }
}

TEST(WeightGemm, Q8_0BlocksMultiplyInPlaceAsTheirWidenedValues) {
  // Few input rows go through the row kernel, which reads the Q8_0 blocks as stored; more go
  // through widened panels. Both against a double reference on the widened values.
  ThreadPool pool(3);
  std::mt19937_64 rng(13);
  std::normal_distribution<float> nd;
  for (int64_t rows : {1, 7, 8, 59, 1025}) {
    for (int64_t cols : {32, 96, 1024}) {
      for (int64_t N : {1, 2, 4, 5}) {
        const int64_t n = rows * cols;
        std::vector<uint8_t> bytes(static_cast<size_t>(n / 32 * 34 + 1));
        for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
        for (int64_t b = 0; b < n / 32; ++b) {  // sane scales (random bits could be NaN)
          const float d = 0.01f * (1.0f + std::fabs(nd(rng)));
          uint16_t h;
          ConvertToKvDtype(&d, 1, KvDtype::kF16, &h);
          std::memcpy(&bytes[static_cast<size_t>(1 + 34 * b)], &h, 2);
        }
        std::vector<float> widened(static_cast<size_t>(n));
        WidenQ8(bytes.data() + 1, n, widened.data());  // data at an odd address
        WeightMatrix w;
        w.rows = rows, w.cols = cols;
        w.blocks.push_back({bytes.data() + 1, KvDtype::kF32, rows, &kQ8});
        ASSERT_TRUE(ValidateWeightMatrix(w).ok());
        std::vector<float> x(static_cast<size_t>(N * cols)), bias(static_cast<size_t>(rows));
        for (float& v : x) v = nd(rng);
        for (float& v : bias) v = nd(rng);
        std::vector<float> y(static_cast<size_t>(N * rows), NAN);
        MatmulWeightT(N, x.data(), w, bias.data(), y.data(), &pool);
        const double u = std::ldexp(1.0, -24), gamma = (cols + 1) * u / (1 - (cols + 1) * u);
        for (int64_t i = 0; i < N; ++i) {
          for (int64_t r = 0; r < rows; ++r) {
            double ref = bias[r], mag = std::fabs(bias[r]);
            for (int64_t k = 0; k < cols; ++k) {
              const double p = double(x[i * cols + k]) * widened[r * cols + k];
              ref += p;
              mag += std::fabs(p);
            }
            // The row kernel rounds d q once more before multiplying (one more u per term).
            ASSERT_NEAR(y[i * rows + r], ref, 2 * (gamma + u) * mag + 1e-30)
                << "rows " << rows << " cols " << cols << " N " << N << " row " << r;
          }
        }
      }
    }
  }
}

TEST(WeightGemm, BadMatricesAreRefused) {
  std::vector<uint16_t> buf(64);
  WeightMatrix w;
  EXPECT_FALSE(ValidateWeightMatrix(w).ok());  // empty
  w.rows = 4, w.cols = 8;
  w.blocks.push_back({buf.data(), KvDtype::kBF16, 3});
  EXPECT_FALSE(ValidateWeightMatrix(w).ok());  // 3 rows of 4
  w.blocks[0].rows = 4;
  EXPECT_TRUE(ValidateWeightMatrix(w).ok());
  w.blocks[0].data = reinterpret_cast<const char*>(buf.data()) + 1;
  EXPECT_FALSE(ValidateWeightMatrix(w).ok());  // misaligned
  w.blocks[0].data = nullptr;
  EXPECT_FALSE(ValidateWeightMatrix(w).ok());
  // Quantized rows: any alignment, but whole blocks of the codec and a complete codec.
  w.blocks[0] = {reinterpret_cast<const char*>(buf.data()) + 1, KvDtype::kF32, 4, &kToy};
  EXPECT_TRUE(ValidateWeightMatrix(w).ok());
  w.cols = 6;
  EXPECT_FALSE(ValidateWeightMatrix(w).ok());  // 6 columns are not whole 4-element blocks
  w.cols = 8;
  const QuantCodec broken{"BROKEN", 4, 5, nullptr};
  w.blocks[0].quant = &broken;
  EXPECT_FALSE(ValidateWeightMatrix(w).ok());
}

}  // namespace
}  // namespace attnlab::internal
