// `attnlab memory`: how many bytes attention needs at sequence length N, materialised versus
// tiled, spelled out so that a wrong figure cannot hide in a unit.
//
//   attnlab memory --n N [--heads H] [--kv-heads HKV] [--head-dim D] [--batch B]
//                  [--dtype fp32|bf16|fp16] [--layers L] [--json]
//
// (a) A materialised score/probability matrix is N x N per head:
//       per head   N*N*bytes
//       per layer  batch*heads*N*N*bytes
//     and every layer's maps when a framework keeps them (autograd saving the probabilities for
//     the backward, or output_attentions=True returning them): layers times that.
// (b) The flash kernel (src/engine/attention_flash_forward.cc) never holds N x N. Its extra
//     memory is the lse output [batch*heads*N] floats plus, per worker thread, the scratch the
//     kernel allocates (internal::FlashForwardScratch: Q^T and the output accumulator for
//     group*chunk rows, one K/V block, one score tile), whose size does not depend on N once
//     chunk is fixed.
// (c) Q, K, V and O themselves, in --dtype.
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnlab/thread_pool.h"
#include "commands.h"
#include "engine/attention_flash_common.h"

namespace attnlab::cli {
namespace {

using u128 = unsigned __int128;

struct MemoryOptions {
  int64_t n = 0;
  CLI::Option* n_opt = nullptr;
  int64_t heads = 32;
  int64_t kv_heads = 0;  // 0: same as heads
  int64_t head_dim = 128;
  int64_t batch = 1;
  int64_t layers = 1;
  std::string dtype = "fp32";
  bool json = false;
};

std::string U64(uint64_t x) { return std::to_string(x); }

// The product as uint64, or an error naming the quantity if it does not fit.
uint64_t Fit(u128 x, const char* what) {
  if (x > static_cast<u128>(UINT64_MAX)) {
    throw CommandError(std::string(what) + " exceeds 2^64 bytes; choose smaller sizes");
  }
  return static_cast<uint64_t>(x);
}

// Binary units: "8.00 GiB"; exact bytes below 1 KiB.
std::string Human(uint64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return U64(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[u]);
  return buf;
}


struct MemoryReport {
  // (a)
  uint64_t per_head, per_layer, all_layers, output_attentions;
  // (b)
  int threads;
  internal::FlashPlan plan;
  uint64_t scratch_floats_per_thread, scratch_bytes_per_thread, scratch_bytes_total, lse_bytes,
      flash_extra_bytes;
  // (c)
  uint64_t q_bytes, k_bytes, v_bytes, o_bytes, tensors_bytes;
};

MemoryReport Compute(const MemoryOptions& o, int64_t kv_heads, int bytes) {
  MemoryReport r;
  const u128 n = static_cast<u128>(o.n);
  r.per_head = Fit(n * n * bytes, "the per-head matrix");
  r.per_layer = Fit(static_cast<u128>(o.batch) * o.heads * r.per_head, "the per-layer matrices");
  r.all_layers = Fit(static_cast<u128>(o.layers) * r.per_layer, "all layers' matrices");
  r.output_attentions = r.all_layers;

  AttentionShape s;
  s.batch = o.batch;
  s.heads_q = o.heads;
  s.heads_kv = kv_heads;
  s.len_q = s.len_k = o.n;
  s.head_dim = o.head_dim;
  r.threads = DefaultThreadCount();
  r.plan = internal::MakeFlashPlan(s, r.threads);
  const internal::FlashForwardScratchSizes z = internal::FlashForwardScratch(s, r.plan);
  r.scratch_floats_per_thread = z.Floats();
  r.scratch_bytes_per_thread = z.Bytes();
  r.scratch_bytes_total = Fit(static_cast<u128>(r.threads) * r.scratch_bytes_per_thread, "scratch");
  r.lse_bytes = Fit(static_cast<u128>(o.batch) * o.heads * n * 4, "the lse");
  r.flash_extra_bytes = r.scratch_bytes_total + r.lse_bytes;

  r.q_bytes = Fit(static_cast<u128>(o.batch) * o.heads * n * o.head_dim * bytes, "Q");
  r.o_bytes = r.q_bytes;
  r.k_bytes = Fit(static_cast<u128>(o.batch) * kv_heads * n * o.head_dim * bytes, "K");
  r.v_bytes = r.k_bytes;
  r.tensors_bytes =
      Fit(static_cast<u128>(r.q_bytes) * 2 + static_cast<u128>(r.k_bytes) * 2, "Q, K, V and O");
  return r;
}

void Row(const std::string& label, const std::string& formula, uint64_t bytes) {
  std::printf("  %-34s %-44s %12s  (%s B)\n", label.c_str(), formula.c_str(), Human(bytes).c_str(),
              U64(bytes).c_str());
}

void RunMemory(const MemoryOptions& o) {
  if (!o.n_opt || o.n_opt->count() == 0) throw UsageError("missing --n (sequence length N)");
  for (auto [flag, value] : {std::pair{"--n", o.n},
                             {"--heads", o.heads},
                             {"--head-dim", o.head_dim},
                             {"--batch", o.batch},
                             {"--layers", o.layers}}) {
    if (value < 1)
      throw UsageError(std::string(flag) + " must be >= 1, got " + std::to_string(value));
    if (value > (int64_t{1} << 31)) {
      throw UsageError(std::string(flag) + " = " + std::to_string(value) +
                         " exceeds attnlab's limit 2^31");
    }
  }
  const int64_t kv_heads = o.kv_heads == 0 ? o.heads : o.kv_heads;
  if (kv_heads < 1 || o.heads % kv_heads != 0) {
    throw UsageError("--kv-heads must divide --heads (" + std::to_string(o.heads) + "), got " +
                       std::to_string(kv_heads));
  }
  int bytes;
  if (o.dtype == "fp32") {
    bytes = 4;
  } else if (o.dtype == "bf16" || o.dtype == "fp16") {
    bytes = 2;
  } else {
    throw UsageError("unknown --dtype '" + o.dtype + "'; expected fp32, bf16 or fp16");
  }
  const MemoryReport r = Compute(o, kv_heads, bytes);
  const std::string N = std::to_string(o.n), H = std::to_string(o.heads),
                    B = std::to_string(o.batch), L = std::to_string(o.layers),
                    D = std::to_string(o.head_dim), HKV = std::to_string(kv_heads),
                    BY = std::to_string(bytes);

  if (o.json) {
    nlohmann::ordered_json j;
    j["units"] = "bytes";
    j["n"] = o.n;
    j["batch"] = o.batch;
    j["heads"] = o.heads;
    j["kv_heads"] = kv_heads;
    j["head_dim"] = o.head_dim;
    j["layers"] = o.layers;
    j["dtype"] = o.dtype;
    j["bytes_per_element"] = bytes;
    j["materialised"] = {{"per_head", r.per_head},
                         {"per_layer", r.per_layer},
                         {"all_layers", r.all_layers},
                         {"output_attentions", r.output_attentions}};
    j["flash"] = {{"threads", r.threads},
                  {"group", r.plan.group},
                  {"chunk", r.plan.chunk},
                  {"d_pad", r.plan.d_pad},
                  {"block_k", internal::kBlockK},
                  {"sub_rows", internal::kSubRows},
                  {"scratch_floats_per_thread", r.scratch_floats_per_thread},
                  {"scratch_bytes_per_thread", r.scratch_bytes_per_thread},
                  {"scratch_bytes_total", r.scratch_bytes_total},
                  {"lse_bytes", r.lse_bytes},
                  {"extra_bytes", r.flash_extra_bytes}};
    j["tensors"] = {{"q", r.q_bytes},
                    {"k", r.k_bytes},
                    {"v", r.v_bytes},
                    {"o", r.o_bytes},
                    {"total", r.tensors_bytes}};
    j["materialised_per_layer_over_flash_extra"] =
        static_cast<double>(r.per_layer) / static_cast<double>(r.flash_extra_bytes);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }

  std::printf(
      "attnlab memory: N = %s tokens, batch %s, %s query heads (%s kv heads), head_dim %s, "
      "%s layer%s, %s (%d bytes per element)\n",
      N.c_str(), B.c_str(), H.c_str(), HKV.c_str(), D.c_str(), L.c_str(), o.layers == 1 ? "" : "s",
      o.dtype.c_str(), bytes);
  std::printf(
      "Units are binary: 1 KiB = 1024 B, 1 MiB = 2^20 B, 1 GiB = 2^30 B, 1 TiB = 2^40 B "
      "(1 GiB = 1.074 GB).\n\n");

  std::printf("(a) Materialised N x N attention scores/probabilities (one matrix per head)\n");
  Row("per head", "N*N*bytes = " + N + "*" + N + "*" + BY, r.per_head);
  Row("per layer (all heads)",
      "batch*heads*N*N*bytes = " + B + "*" + H + "*" + N + "*" + N + "*" + BY, r.per_layer);
  Row(o.layers == 1 ? "1 layer (kept for backward)" : "all " + L + " layers (kept for backward)",
      "layers * per layer", r.all_layers);
  Row("output_attentions (every layer)", "layers * per layer, returned to the caller",
      r.output_attentions);

  std::printf(
      "\n(b) Tiled flash kernel (fp32, never holds N x N; "
      "src/engine/attention_flash_forward.cc)\n");
  std::printf("  plan for %d threads: group %" PRId64 " query heads per kv head, chunk %" PRId64
              " rows, d_pad %" PRId64 ", kBlockK %" PRId64 ", kSubRows %" PRId64 "\n",
              r.threads, r.plan.group, r.plan.chunk, r.plan.d_pad, internal::kBlockK,
              internal::kSubRows);
  std::printf(
      "  scratch per thread = Q^T and output rows (group*chunk*(head_dim + d_pad)), running max\n"
      "                       and sum, one V block, one kBlockK x kSubRows tile = %s floats\n",
      U64(r.scratch_floats_per_thread).c_str());
  Row("scratch per thread", "(each buffer 64-byte aligned)", r.scratch_bytes_per_thread);
  Row("scratch, all threads", std::to_string(r.threads) + " * per thread", r.scratch_bytes_total);
  Row("lse", "batch*heads*N*4 = " + B + "*" + H + "*" + N + "*4", r.lse_bytes);
  Row("flash extra memory", "scratch + lse", r.flash_extra_bytes);

  std::printf("\n(c) The tensors themselves (%s)\n", o.dtype.c_str());
  Row("Q and O (each)", "batch*heads*N*head_dim*bytes", r.q_bytes);
  Row("K and V (each)", "batch*kv_heads*N*head_dim*bytes", r.k_bytes);
  Row("Q + K + V + O", "", r.tensors_bytes);

  std::printf(
      "\nOne head's N x N matrix is %s*%s*%d B = %s (%.2f GB decimal); one layer of %s "
      "heads needs %s times that, %s (%.2f GB).\n",
      N.c_str(), N.c_str(), bytes, Human(r.per_head).c_str(), r.per_head / 1e9, H.c_str(),
      (B == "1" ? H : B + "*" + H).c_str(), Human(r.per_layer).c_str(), r.per_layer / 1e9);
  std::printf("A materialised layer needs %.0fx the flash kernel's extra memory.\n",
              static_cast<double>(r.per_layer) / static_cast<double>(r.flash_extra_bytes));
}

}  // namespace

void RegisterMemoryCommand(CLI::App& app) {
  auto opts = std::make_shared<MemoryOptions>();
  MemoryOptions& o = *opts;
  CLI::App* cmd = app.add_subcommand(
      "memory",
      "Bytes needed by a materialised N x N attention matrix versus the tiled flash kernel, in "
      "binary units (KiB, MiB, GiB, TiB).");
  o.n_opt = cmd->add_option("--n", o.n, "sequence length N (len_q = len_k = N; required)");
  cmd->add_option("--heads", o.heads, "query heads (default 32)");
  cmd->add_option("--kv-heads", o.kv_heads, "key/value heads (default: --heads; GQA if fewer)");
  cmd->add_option("--head-dim", o.head_dim, "head dimension (default 128)");
  cmd->add_option("--batch", o.batch, "batch size (default 1)");
  cmd->add_option("--layers", o.layers, "transformer layers (default 1)");
  cmd->add_option("--dtype", o.dtype,
                  "element type of the matrices and tensors: fp32 (default), "
                  "bf16 or fp16");
  cmd->add_flag("--json", o.json, "print the numbers (in bytes) as JSON");
  cmd->callback([opts] { RunMemory(*opts); });
}

}  // namespace attnlab::cli
