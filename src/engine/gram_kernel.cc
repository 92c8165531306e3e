// The lower triangle of a Gram matrix in double (diagnostics/representation_metrics.cc's feature
// Gram, the effective rank's and CKA's O(T n^2) part), compiled once per SIMD target (engine/
// target.h) and dispatched through engine/kernel_table.h (GramTable states the contract).
// Register tile: 8 rows of G by two double vectors of columns (16 accumulators); for each row
// t of x one pair of column loads and eight broadcasts feed 16 fused multiply-adds. x comes
// packed in panels of 8 columns (kernel_table.h), so the three streams a tile reads are
// contiguous: 1.3-1.45x the row-major block's rate in a single-thread test at 128 x 896 (the
// row-major block touched a new page every row), the same sums in the same order.
#include <cstdint>

#include "engine/kernel_table.h"
#include "engine/simd.h"
#include "engine/target.h"

ATTNLAB_TARGET_BEGIN
namespace attnlab::ATTNLAB_TARGET_NS {

namespace {

typedef double VecD __attribute__((vector_size(sizeof(simd::VecF))));
constexpr int64_t kLanesD = sizeof(VecD) / sizeof(double);
constexpr int64_t kTileRows = 8;

inline VecD LoadD(const double* p) {
  VecD v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreD(double* p, VecD v) { __builtin_memcpy(p, &v, sizeof(v)); }

}  // namespace

int64_t GramColumns() { return 2 * kLanesD; }

void GramLowerColumns(const double* x, int64_t rows, int64_t n, int64_t b0, double* g,
                      int64_t ldg) {
  static_assert(kTileRows == internal::kGramPanel && internal::kGramPanel % kLanesD == 0);
  const int64_t panel = rows * internal::kGramPanel;  // doubles per packed panel
  // The tile's two column vectors: each inside one panel (kLanesD divides the panel width).
  const double* c0p = x + internal::GramPackedIndex(0, b0, rows);
  const double* c1p = x + internal::GramPackedIndex(0, b0 + kLanesD, rows);
  const int64_t a_begin = b0 / kTileRows * kTileRows;  // tiles touching the diagonal block too
  for (int64_t a0 = a_begin; a0 < n; a0 += kTileRows) {
    const double* ap = x + (a0 / kTileRows) * panel;  // rows of kTileRows values: a0 .. a0 + 7
    VecD acc[kTileRows][2] = {};
    for (int64_t t = 0; t < rows; ++t) {
      const VecD c0 = LoadD(c0p + t * internal::kGramPanel);
      const VecD c1 = LoadD(c1p + t * internal::kGramPanel);
      const double* at = ap + t * kTileRows;
      for (int64_t i = 0; i < kTileRows; ++i) {
        const double a = at[i];  // broadcast into the vector products
        acc[i][0] += a * c0;
        acc[i][1] += a * c1;
      }
    }
    for (int64_t i = 0; i < kTileRows && a0 + i < n; ++i) {
      double* gr = g + (a0 + i) * ldg + b0;
      StoreD(gr, LoadD(gr) + acc[i][0]);
      StoreD(gr + kLanesD, LoadD(gr + kLanesD) + acc[i][1]);
    }
  }
}

}  // namespace attnlab::ATTNLAB_TARGET_NS
ATTNLAB_TARGET_END
