// ggml_flash_bench.c: same-run peer benchmark of ggml's ggml_flash_attn_ext on the CPU backend
// (attnlab issue 20). Only this driver is ours; it calls ggml's public C API and is built against
// a ggml checkout outside the repo by bench/ggml/run.sh. ggml's code is never committed here.
//
// Shapes (the ones `attnlab bench suite --full` / `bench decode` time):
//   prefill: B=1, H=8 (heads_kv = 8), N = len_q = len_k = 4096, D = 64 and 128, full and causal;
//            Q, K, V in F32. Causal uses ggml's F16 mask [len_k, len_q(padded), 1, 1]:
//            0 on and below the diagonal, -inf above.
//   decode:  one query per head (len_q = 1), 12 heads (--heads), KV length 32768 (--len), D = 64;
//            K and V in F32 and in F16, no mask. Warm: the same step repeated.
// Precision: ggml_flash_attn_ext_set_prec(GGML_PREC_F32) (F32 accumulators).
// Rates:
//   prefill GFLOP/s = 4*B*H*N*N*D / time (QK^T and PV, 2 flops per multiply-add) for full,
//                     half of that (2*B*H*N*N*D) for causal; softmax flops are not counted.
//   decode  GB/s    = 2*heads_kv*len*D*bytes(dtype) / time: the K and V cache read once.
// Time: warm-up 2 runs, then the median of --repeats (default 3 prefill, 20 decode).
// Check: a few output rows of every shape against a naive softmax attention in double
//        (max abs error); exit status 1 if any error > 1e-3.
#define _POSIX_C_SOURCE 200809L  // clock_gettime under -std=c11
#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef GGML_BENCH_COMMIT
#define GGML_BENCH_COMMIT NULL  // run.sh passes the full hash; otherwise ggml_commit()
#endif

static const double kTol = 1e-3;

typedef struct {
  const char *kernel;  // "flash_fwd" or "decode"
  int n, d, heads, heads_kv, causal;
  const char *dtype;   // decode: "f32" / "f16"
  double ms, rate, err;
} row_t;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float urand(void) {  // uniform in [-1, 1)
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) * (1.0 / 8388608.0) - 1.0);
}

static void fill(struct ggml_tensor *t) {
  const int64_t n = ggml_nelements(t);
  for (int64_t i = 0; i < n; i++) {
    if (t->type == GGML_TYPE_F32) ((float *)t->data)[i] = urand();
    else ((ggml_fp16_t *)t->data)[i] = ggml_fp32_to_fp16(urand());
  }
}

static float get(const struct ggml_tensor *t, int64_t i) {  // contiguous element i as float
  return t->type == GGML_TYPE_F32 ? ((const float *)t->data)[i]
                                  : ggml_fp16_to_fp32(((const ggml_fp16_t *)t->data)[i]);
}

// Naive softmax(scale q.k^T [+ causal]) v for query row i of head h, in double, against ggml's
// output out[D, H, Nq] (ggml permutes the result to [D, heads, len_q]). Layouts: q [D, Nq, H],
// k/v [D, Nk, Hkv]; queries aligned to the last keys (row i sees keys j <= i + Nk - Nq).
static double check_row(const struct ggml_tensor *q, const struct ggml_tensor *k,
                        const struct ggml_tensor *v, const struct ggml_tensor *out, int i,
                        int h, int causal, float scale) {
  const int64_t D = q->ne[0], Nq = q->ne[1], H = q->ne[2], Nk = k->ne[1];
  const int64_t hk = h / (H / k->ne[2]);
  const int64_t last = causal ? i + Nk - Nq : Nk - 1;
  double *s = malloc(sizeof(double) * Nk), *o = calloc(D, sizeof(double)), mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j <= last; j++) {
    double dot = 0;
    for (int64_t c = 0; c < D; c++)
      dot += (double)get(q, (h * Nq + i) * D + c) * get(k, (hk * Nk + j) * D + c);
    s[j] = scale * dot;
    if (s[j] > mx) mx = s[j];
  }
  for (int64_t j = 0; j <= last; j++) {
    const double p = exp(s[j] - mx);
    sum += p;
    for (int64_t c = 0; c < D; c++) o[c] += p * get(v, (hk * Nk + j) * D + c);
  }
  double err = 0;
  for (int64_t c = 0; c < D; c++) {
    const double e = fabs(o[c] / sum - ((const float *)out->data)[(i * H + h) * D + c]);
    if (e > err) err = e;
  }
  free(s);
  free(o);
  return err;
}

// Builds and times one ggml_flash_attn_ext graph. nq = 1 is a decode step.
static row_t run_case(const char *kernel, int nq, int nk, int d, int heads, int heads_kv,
                      int causal, enum ggml_type kv_type, int threads, int repeats) {
  const size_t kvb = ggml_type_size(kv_type);
#ifdef GGML_KQ_MASK_PAD  // older ggml wants the mask's rows padded; newer versions dropped this
  const int64_t nq_pad = GGML_PAD(nq, GGML_KQ_MASK_PAD);
#else
  const int64_t nq_pad = nq;
#endif
  const size_t bytes = 4ull * d * nq * heads * 2 + 2ull * kvb * d * nk * heads_kv +
                       (causal ? 2ull * nk * nq_pad : 0) + 16 * ggml_tensor_overhead() +
                       ggml_graph_overhead() + (1u << 20);
  struct ggml_init_params ip = {bytes, NULL, false};
  struct ggml_context *ctx = ggml_init(ip);
  if (!ctx) { fprintf(stderr, "ggml_init(%zu bytes) failed\n", bytes); exit(2); }

  struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, nq, heads);
  struct ggml_tensor *k = ggml_new_tensor_3d(ctx, kv_type, d, nk, heads_kv);
  struct ggml_tensor *v = ggml_new_tensor_3d(ctx, kv_type, d, nk, heads_kv);
  struct ggml_tensor *mask = NULL;
  fill(q);
  fill(k);
  fill(v);
  if (causal) {  // 0 where key j <= i + nk - nq (aligned to the last keys), -inf elsewhere
    mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, nk, nq_pad);
    ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), ninf = ggml_fp32_to_fp16(-INFINITY);
    for (int64_t i = 0; i < nq_pad; i++)
      for (int64_t j = 0; j < nk; j++)
        ((ggml_fp16_t *)mask->data)[i * nk + j] = (i < nq && j <= i + nk - nq) ? zero : ninf;
  }
  const float scale = 1.0f / sqrtf((float)d);
  struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
  ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);

  struct ggml_cplan plan = ggml_graph_plan(gf, threads, NULL);
  plan.work_data = plan.work_size ? malloc(plan.work_size) : NULL;

  double *t = malloc(sizeof(double) * repeats);
  for (int r = -2; r < repeats; r++) {  // 2 warm-up runs
    const double t0 = now_s();
    if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS) {
      fprintf(stderr, "ggml_graph_compute failed\n");
      exit(2);
    }
    if (r >= 0) t[r] = now_s() - t0;
  }
  qsort(t, repeats, sizeof(double), cmp_double);
  const double sec = t[repeats / 2];

  // rows checked: prefill the first, a middle and the last query of the last head;
  // decode the single query of the first and last head
  double err = 0, e;
  const int rows[3] = {0, nq / 2 + 1, nq - 1};
  for (int r = 0; r < 3; r++) {
    if (rows[r] >= nq) continue;
    e = check_row(q, k, v, out, rows[r], heads - 1, causal, scale);
    if (e > err) err = e;
  }
  e = check_row(q, k, v, out, nq - 1, 0, causal, scale);
  if (e > err) err = e;

  row_t row = {kernel, nq == 1 ? nk : nq, d, heads, heads_kv, causal,
               kv_type == GGML_TYPE_F16 ? "f16" : "f32", sec * 1e3, 0, err};
  if (nq == 1) row.rate = 2.0 * heads_kv * nk * d * kvb / sec * 1e-9;
  else row.rate = (causal ? 2.0 : 4.0) * heads * (double)nq * nk * d / sec * 1e-9;  // B = 1

  free(t);
  free(plan.work_data);
  ggml_free(ctx);
  return row;
}

static void usage(void) {
  fprintf(stderr,
          "usage: ggml_flash_bench [--threads T] [--json] [--n 4096] [--len 32768]\n"
          "                        [--heads 12] [--heads-kv H] [--repeats R] [--decode-repeats R]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int threads = 2, json = 0, n = 4096, len = 32768, heads = 12, heads_kv = 0;
  int repeats = 3, drepeats = 20;
  for (int a = 1; a < argc; a++) {
    const char *s = argv[a];
    const int has = a + 1 < argc;
    if (!strcmp(s, "--json")) json = 1;
    else if (!strcmp(s, "--threads") && has) threads = atoi(argv[++a]);
    else if (!strcmp(s, "--n") && has) n = atoi(argv[++a]);
    else if (!strcmp(s, "--len") && has) len = atoi(argv[++a]);
    else if (!strcmp(s, "--heads") && has) heads = atoi(argv[++a]);
    else if (!strcmp(s, "--heads-kv") && has) heads_kv = atoi(argv[++a]);
    else if (!strcmp(s, "--repeats") && has) repeats = atoi(argv[++a]);
    else if (!strcmp(s, "--decode-repeats") && has) drepeats = atoi(argv[++a]);
    else usage();
  }
  if (heads_kv <= 0) heads_kv = heads;
  if (threads < 1 || n < 1 || len < 1 || heads < 1 || heads % heads_kv || repeats < 1 ||
      drepeats < 1)
    usage();
  ggml_cpu_init();
  const char *commit = GGML_BENCH_COMMIT ? GGML_BENCH_COMMIT : ggml_commit();
  const char *isa = ggml_cpu_has_avx512() ? "avx512" : ggml_cpu_has_avx2() ? "avx2" : "other";
  if (!json)
    printf("# ggml %s (commit %s), CPU backend, %s, threads %d; prefill B=1 H=8 N=%d, "
           "decode heads %d/%d len %d D=64\n",
           ggml_version(), commit, isa, threads, n, heads, heads_kv, len);

  row_t rows[8];
  int nr = 0;
  const int dims[2] = {64, 128};
  for (int di = 0; di < 2; di++)
    for (int c = 0; c < 2; c++)
      rows[nr++] = run_case("flash_fwd", n, n, dims[di], 8, 8, c, GGML_TYPE_F32, threads, repeats);
  rows[nr++] = run_case("decode", 1, len, 64, heads, heads_kv, 0, GGML_TYPE_F32, threads, drepeats);
  rows[nr++] = run_case("decode", 1, len, 64, heads, heads_kv, 0, GGML_TYPE_F16, threads, drepeats);

  int ok = 1;
  for (int i = 0; i < nr; i++) ok &= rows[i].err <= kTol;
  if (json) {
    printf("{\"tool\": \"ggml\", \"version\": \"%s\", \"commit\": \"%s\", \"isa\": \"%s\", "
           "\"threads\": %d, \"precision\": \"GGML_PREC_F32\",\n \"flops\": \"flash_fwd: "
           "4*B*H*N*N*D full, 2*B*H*N*N*D causal; decode: GB/s = 2*heads_kv*len*D*bytes/time\",\n"
           " \"rows\": [",
           ggml_version(), commit, isa, threads);
    for (int i = 0; i < nr; i++) {
      const row_t *r = &rows[i];
      if (!strcmp(r->kernel, "flash_fwd"))
        printf("%s\n  {\"kernel\": \"flash_fwd\", \"n\": %d, \"d\": %d, \"heads\": %d, "
               "\"causal\": %s, \"time_ms\": %.4g, \"gflops\": %.4g, \"max_err\": %.3g}",
               i ? "," : "", r->n, r->d, r->heads, r->causal ? "true" : "false", r->ms, r->rate,
               r->err);
      else
        printf(",\n  {\"kernel\": \"decode\", \"len\": %d, \"d\": %d, \"heads\": %d, "
               "\"heads_kv\": %d, \"dtype\": \"%s\", \"time_ms\": %.4g, \"gbs\": %.4g, "
               "\"max_err\": %.3g}",
               r->n, r->d, r->heads, r->heads_kv, r->dtype, r->ms, r->rate, r->err);
    }
    printf("],\n \"passed\": %s}\n", ok ? "true" : "false");
  } else {
    printf("%-10s %-32s %10s %12s %10s\n", "kernel", "shape", "time_ms", "rate", "max_err");
    for (int i = 0; i < nr; i++) {
      const row_t *r = &rows[i];
      char shape[64];
      if (!strcmp(r->kernel, "flash_fwd"))
        snprintf(shape, sizeof shape, "B=1 H=%d N=%d D=%d %s", r->heads, r->n, r->d,
                 r->causal ? "causal" : "full");
      else
        snprintf(shape, sizeof shape, "H=%d/%d KV=%d D=%d %s", r->heads, r->heads_kv, r->n, r->d,
                 r->dtype);
      printf("%-10s %-32s %10.3f %7.2f %-4s %10.2e%s\n", r->kernel, shape, r->ms, r->rate,
             strcmp(r->kernel, "decode") ? "GF/s" : "GB/s", r->err, r->err > kTol ? " FAIL" : "");
    }
    printf("# GFLOP/s: 4*B*H*N*N*D full, half of it causal; GB/s: 2*heads_kv*len*D*bytes "
           "(K+V read once, warm cache); median of %d (prefill) / %d (decode) after 2 warm-ups\n",
           repeats, drepeats);
  }
  if (!ok) fprintf(stderr, "ggml_flash_bench: error: max abs error above %g\n", kTol);
  return ok ? 0 : 1;
}
