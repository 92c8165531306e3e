#include "engine/weight_gemm.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "attnlab/matmul_precision.h"
#include "attnlab/thread_pool.h"
#include "core/aligned_buffer.h"
#include "engine/gemm.h"
#include "engine/gemm_bf16.h"
#include "engine/kernel_table.h"

namespace attnlab::internal {

namespace {

// Rows per panel: about 1 MiB of widened fp32 weights (fits L2 next to a tile of x), a multiple
// of 16, at least 16.
int64_t PanelRows(int64_t cols) {
  const int64_t rows = (int64_t{1} << 18) / std::max<int64_t>(1, cols);
  return std::clamp<int64_t>(rows / 16 * 16, 16, 512);
}

struct Panel {
  const WeightBlock* block;
  int64_t row0;       // first row of the panel inside its block
  int64_t rows;       // rows in the panel
  int64_t out0;       // first row of the panel in W (= first column of y)
};

}  // namespace

void WidenRows(const WeightBlock& b, const void* src, int64_t n, float* out) {
  if (b.quant) {
    b.quant->widen(static_cast<const uint8_t*>(src), n, out);
  } else {
    ConvertFromKvDtype(src, n, b.dtype, out);
  }
}

int64_t WeightRowBytes(const WeightBlock& b, int64_t cols) {
  if (b.quant) return cols / b.quant->block_elems * b.quant->block_bytes;
  return cols * KvDtypeBytes(b.dtype);
}

std::string_view WeightTypeName(const WeightBlock& b) {
  return b.quant ? b.quant->name : KvDtypeName(b.dtype);
}

int64_t WeightMatrix::bytes() const {
  int64_t n = 0;
  for (const WeightBlock& b : blocks) n += b.rows * WeightRowBytes(b, cols);
  return n;
}

Status ValidateWeightMatrix(const WeightMatrix& w) {
  if (w.cols <= 0 || w.rows <= 0 || w.blocks.empty()) {
    return Status::InvalidArgument("weight matrix [" + std::to_string(w.rows) + ", " +
                                   std::to_string(w.cols) + "] is empty");
  }
  int64_t rows = 0;
  for (const WeightBlock& b : w.blocks) {
    if (b.quant && (b.quant->block_elems <= 0 || b.quant->block_bytes <= 0 ||
                    b.quant->widen == nullptr || w.cols % b.quant->block_elems != 0 ||
                    (b.quant->layout == QuantLayout::kQ8_0 &&
                     (b.quant->block_elems != 32 || b.quant->block_bytes != 34)))) {
      return Status::InvalidArgument(
          "weight matrix block of " + std::string(b.quant->name) + " rows: " +
          std::to_string(w.cols) + " columns are not whole blocks of " +
          std::to_string(b.quant->block_elems) + " (or the codec is incomplete)");
    }
    const auto align = b.quant ? uintptr_t{1} : static_cast<uintptr_t>(KvDtypeBytes(b.dtype));
    if (b.data == nullptr || b.rows <= 0 || reinterpret_cast<uintptr_t>(b.data) % align != 0) {
      return Status::InvalidArgument("weight matrix block of " + std::to_string(b.rows) +
                                     " rows is null, empty or misaligned");
    }
    rows += b.rows;
  }
  if (rows != w.rows) {
    return Status::InvalidArgument("weight matrix blocks hold " + std::to_string(rows) +
                                   " rows, the matrix has " + std::to_string(w.rows));
  }
  return Status::Ok();
}

namespace {

// Whether the row kernel reads b as stored.
bool RowKernelReads(const WeightBlock& b) {
  return !b.quant || b.quant->layout == QuantLayout::kQ8_0;
}

// Rows to widen at a time for the row kernel when it cannot read a block as stored: its group.
constexpr int64_t kWidenGroup = 8;

// Few input rows: each task multiplies a run of rows (weight_rows_kernel.cc), read as stored,
// or, for a codec only `widen` knows, widened kWidenGroup rows at a time into per-thread
// scratch that stays in L1/L2 (no 1 MiB panel, no sgemm call per panel).
void MatmulFewRows(int64_t N, const float* x, const WeightMatrix& w, const float* bias, float* y,
                   ThreadPool& tp) {
  const int64_t K = w.cols, M = w.rows;
  // ~4 tasks per thread, runs of a multiple of 8 rows (the kernel's group).
  const int64_t step =
      std::max<int64_t>(8, (M + 4 * tp.num_threads() - 1) / (4 * tp.num_threads()) / 8 * 8);
  std::vector<Panel> runs;
  int64_t out0 = 0;
  for (const WeightBlock& b : w.blocks) {
    for (int64_t r = 0; r < b.rows; r += step) runs.push_back({&b, r, std::min(step, b.rows - r), out0 + r});
    out0 += b.rows;
  }
  const KernelTable& kt = ActiveKernels();
  std::vector<AlignedBuffer<float>> scratch(tp.num_threads());
  tp.ParallelFor(static_cast<int64_t>(runs.size()), [&](int64_t t, int thread) {
    const Panel& p = runs[t];
    WeightRowsArgs a;
    a.row_bytes = WeightRowBytes(*p.block, K);
    a.w = static_cast<const uint8_t*>(p.block->data) + p.row0 * a.row_bytes;
    a.dtype = p.block->dtype;
    a.q8_0 = p.block->quant != nullptr;
    a.K = K;
    a.x = x;
    a.N = N;
    a.y = y + p.out0;
    a.ldy = M;
    if (RowKernelReads(*p.block)) {
      kt.weight_rows_task(a, 0, p.rows);
    } else {
      AlignedBuffer<float>& s = scratch[thread];
      if (s.size() < static_cast<size_t>(kWidenGroup * K)) s.Resize(static_cast<size_t>(kWidenGroup * K));
      WeightRowsArgs g = a;
      g.row_bytes = K * static_cast<int64_t>(sizeof(float));
      g.w = reinterpret_cast<const uint8_t*>(s.data());
      g.dtype = KvDtype::kF32;
      g.q8_0 = false;
      for (int64_t r = 0; r < p.rows; r += kWidenGroup) {
        const int64_t n = std::min(kWidenGroup, p.rows - r);
        WidenRows(*p.block, a.w + r * a.row_bytes, n * K, s.data());
        g.y = a.y + r;
        kt.weight_rows_task(g, 0, n);
      }
    }
    if (bias) {
      for (int64_t i = 0; i < N; ++i) {
        for (int64_t j = 0; j < p.rows; ++j) y[i * M + p.out0 + j] += bias[p.out0 + j];
      }
    }
  });
}

// Whether every block of w is bf16 as stored (the bf16 product reads them in place).
bool AllBf16(const WeightMatrix& w) {
  for (const WeightBlock& b : w.blocks) {
    if (b.quant || b.dtype != KvDtype::kBF16) return false;
  }
  return true;
}

// fp32 -> bf16, round to nearest even, NaN kept a (quiet) NaN; branch-free so it vectorizes.
void RoundToBf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t q = (u >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? q : r);
  }
}

// Input rows rounded to bf16 at a time: bounds the bf16 copy of x at kBf16ChunkRows x K x 2
// bytes (3.2 MB for K = 1536) instead of half of x, and still reuses each weight panel across
// 512 rows (AMX's tiles want at least 16 x 16; oneDNN's brgemm blocks the rest).
constexpr int64_t kBf16ChunkRows = 512;

// y = x W^T with x rounded to bf16 and the stored bf16 rows (gemm_bf16.h): per chunk of input
// rows, the chunk is rounded (in parallel by rows), then each task multiplies it with a run of
// weight rows (a multiple of 16, about two runs per thread, never straddling two blocks).
void MatmulBf16(int64_t N, const float* x, const WeightMatrix& w, const float* bias, float* y,
                ThreadPool& tp) {
  const int64_t K = w.cols, M = w.rows;
  const int64_t per_thread = (M + 2 * tp.num_threads() - 1) / (2 * tp.num_threads());
  const int64_t step = std::max<int64_t>(16, (per_thread + 15) / 16 * 16);
  std::vector<Panel> runs;
  int64_t out0 = 0;
  for (const WeightBlock& b : w.blocks) {
    for (int64_t r = 0; r < b.rows; r += step) runs.push_back({&b, r, std::min(step, b.rows - r), out0 + r});
    out0 += b.rows;
  }
  const int64_t chunk = std::min(N, kBf16ChunkRows);
  AlignedBuffer<uint16_t> xb(static_cast<size_t>(chunk * K));
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nc = std::min(chunk, N - n0);
    const int64_t row_step = 32;
    tp.ParallelFor((nc + row_step - 1) / row_step, [&](int64_t t, int) {
      const int64_t r0 = t * row_step, r1 = std::min(nc, r0 + row_step);
      RoundToBf16(x + (n0 + r0) * K, (r1 - r0) * K, xb.data() + r0 * K);
    });
    tp.ParallelFor(static_cast<int64_t>(runs.size()), [&](int64_t t, int) {
      const Panel& p = runs[t];
      const auto* wr = static_cast<const uint16_t*>(p.block->data) + p.row0 * K;
      float* yc = y + n0 * M + p.out0;
      const Status st = GemmBf16NT(nc, p.rows, K, xb.data(), K, wr, K, yc, M);
      ATTNLAB_CHECK(st.ok());  // the setting was checked: oneDNN runs bf16 products here
      if (bias) {
        for (int64_t i = 0; i < nc; ++i) {
          for (int64_t j = 0; j < p.rows; ++j) yc[i * M + j] += bias[p.out0 + j];
        }
      }
    });
  }
}

}  // namespace

void MatmulWeightT(int64_t N, const float* x, const WeightMatrix& w, const float* bias, float* y,
                   ThreadPool* pool) {
  if (N <= 0) return;
  ThreadPool& tp = pool ? *pool : DefaultThreadPool();
  if (N <= kWeightRowsMaxN) {
    MatmulFewRows(N, x, w, bias, y, tp);
    return;
  }
  if (AllBf16(w) && Bf16WeightMatmulActive()) {
    MatmulBf16(N, x, w, bias, y, tp);
    return;
  }
  const int64_t K = w.cols, M = w.rows;
  // At most ~1 MiB panels, and at least ~4 per thread so small matrices (decode) spread too.
  const int64_t per_thread = (M + 4 * tp.num_threads() - 1) / (4 * tp.num_threads());
  const int64_t step = std::min(PanelRows(K), std::max<int64_t>(16, (per_thread + 15) / 16 * 16));
  std::vector<Panel> panels;
  int64_t out0 = 0;
  for (const WeightBlock& b : w.blocks) {
    for (int64_t r = 0; r < b.rows; r += step) {
      panels.push_back({&b, r, std::min(step, b.rows - r), out0 + r});
    }
    out0 += b.rows;
  }
  std::vector<AlignedBuffer<float>> scratch(tp.num_threads());
  const KernelTable& kt = ActiveKernels();
  tp.ParallelFor(static_cast<int64_t>(panels.size()), [&](int64_t t, int thread) {
    const Panel& p = panels[t];
    const void* src =
        static_cast<const char*>(p.block->data) + p.row0 * WeightRowBytes(*p.block, K);
    const float* wp;
    if (p.block->dtype == KvDtype::kF32 && !p.block->quant) {
      wp = static_cast<const float*>(src);
    } else {
      AlignedBuffer<float>& s = scratch[thread];
      if (s.size() < static_cast<size_t>(p.rows * K)) s.Resize(static_cast<size_t>(step * K));
      if (RowKernelReads(*p.block)) {  // the dispatched widening (vector loads per target)
        WeightRowsArgs a{};
        a.w = static_cast<const uint8_t*>(src);
        a.row_bytes = WeightRowBytes(*p.block, K);
        a.dtype = p.block->dtype;
        a.q8_0 = p.block->quant != nullptr;
        a.K = K;
        kt.widen_rows(a, p.rows, s.data());
      } else {
        WidenRows(*p.block, src, p.rows * K, s.data());
      }
      wp = s.data();
    }
    // Inside a task the pool runs Sgemm's tiles inline, on this thread.
    Sgemm(Trans::kNo, Trans::kYes, N, p.rows, K, 1.0f, x, K, wp, K, 0.0f, y + p.out0, M, &tp);
    if (bias) {
      for (int64_t i = 0; i < N; ++i) {
        float* yi = y + i * M + p.out0;
        const float* bi = bias + p.out0;
        for (int64_t j = 0; j < p.rows; ++j) yi[j] += bi[j];
      }
    }
  });
}

void WeightRowToFloat(const WeightMatrix& w, int64_t r, float* out) {
  for (const WeightBlock& b : w.blocks) {
    if (r < b.rows) {
      WidenRows(b, static_cast<const char*>(b.data) + r * WeightRowBytes(b, w.cols), w.cols, out);
      return;
    }
    r -= b.rows;
  }
}

}  // namespace attnlab::internal
