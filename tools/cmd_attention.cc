// `attnlab attention`: runs one attention forward (and optionally backward) on .npy files.
//
//   attnlab attention --q Q.npy --k K.npy --v V.npy --o O.npy [--lse L.npy] [--probs P.npy]
//       [--kernel flash|reference] [--causal] [--window-left N] [--window-right N] [--sinks N]
//       [--global N]
//       [--mask-first-key] [--mask M.npy] [--softmax standard|softmax1|sink|sigmoid|softpick]
//       [--sink-logits S.npy] [--sigmoid-bias X] [--scale X]
//       [--dout DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy [--dsink DS.npy]]
//
// Shapes (the semantics are attnlab/attention.h's):
//   q, o, dout, dq    [batch, heads_q, len_q, head_dim]   float32 (float64 converted on read)
//   k, v, dk, dv      [batch, heads_kv, len_k, head_dim]
//   lse               [batch, heads_q, len_q]              written as float32
//   probs             [batch, heads_q, len_q, len_k]       --kernel reference only
//   mask              [len_q, len_k] or [batch|1, heads_q|1, len_q, len_k], uint8 or bool, 1 =
//   visible sink-logits       [heads_q]                            --softmax sink only dsink
//   [heads_q]
//
// Flags named after a tensor (--q ... --o, --lse, --dq ...) take a .npy file path (docs/CLI.md: an
// `--out` flag is always a directory, so this command has none).
// Every input is read and checked, and every result computed, before the first output is
// written; outputs are then written to temporaries and renamed into place, so a failing run
// leaves no output file behind.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnlab/attention.h"
#include "commands.h"
#include "core/npy.h"

namespace attnlab::cli {
namespace {

struct AttentionOptions {
  std::string q, k, v, out, lse, probs;
  bool json = false;
  std::string kernel = "flash";
  std::string softmax = "standard";
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  CLI::Option* window_left_opt = nullptr;
  CLI::Option* window_right_opt = nullptr;
  int64_t sinks = 0;
  int64_t global = 0;
  bool mask_first_key = false;
  std::string mask, sink_logits;
  double sigmoid_bias = 0;
  CLI::Option* sigmoid_bias_opt = nullptr;
  double scale = 0;
  CLI::Option* scale_opt = nullptr;
  std::string dout, dq, dk, dv, dsink;
};

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// A float tensor read from a .npy file, with its shape.
struct FloatArray {
  std::vector<float> data;
  std::vector<int64_t> shape;
};

// Reads `path` (given as `flag`) as float32/float64 and checks its rank.
FloatArray LoadFloat(const std::string& flag, const std::string& path, size_t rank,
                     const std::string& dims) {
  auto a = ReadNpy(path);
  Check(a.status(), flag);
  if (a->shape.size() != rank) {
    throw CommandError(flag + " " + path + ": expected a " + std::to_string(rank) + "-D array " +
                       dims + ", found shape " + a->ShapeString() + " (" +
                       std::to_string(a->shape.size()) + "-D)");
  }
  auto f = a->ToFloat(path);
  Check(f.status(), flag);
  return FloatArray{std::move(*f), a->shape};
}

SoftmaxKind ParseSoftmax(const std::string& name) {
  if (name == "standard") return SoftmaxKind::kStandard;
  if (name == "softmax1") return SoftmaxKind::kSoftmax1;
  if (name == "sink") return SoftmaxKind::kSinkLogit;
  if (name == "sigmoid") return SoftmaxKind::kSigmoid;
  if (name == "softpick") return SoftmaxKind::kSoftpick;
  throw UsageError("unknown --softmax '" + name +
                     "'; expected standard, softmax1, sink, sigmoid or softpick");
}

// Output flags in the order they are written, with their paths (empty = not requested).
std::vector<std::pair<std::string, std::string>> OutputFlags(const AttentionOptions& o) {
  return {{"--o", o.out}, {"--lse", o.lse}, {"--probs", o.probs}, {"--dq", o.dq},
          {"--dk", o.dk},   {"--dv", o.dv},   {"--dsink", o.dsink}};
}

// Checks everything that needs no file contents: names, combinations, output paths.
void CheckFlags(const AttentionOptions& o) {
  for (auto [flag, path, what] : {std::tuple{"--q", &o.q, "Q [batch, heads_q, len_q, head_dim]"},
                                  {"--k", &o.k, "K [batch, heads_kv, len_k, head_dim]"},
                                  {"--v", &o.v, "V [batch, heads_kv, len_k, head_dim]"},
                                  {"--o", &o.out, "the output O"}}) {
    if (path->empty()) throw UsageError(std::string("missing ") + flag + " (" + what + " .npy)");
  }
  if (o.kernel != "flash" && o.kernel != "reference") {
    throw UsageError("unknown --kernel '" + o.kernel + "'; expected flash or reference");
  }
  const SoftmaxKind softmax = ParseSoftmax(o.softmax);
  if (!o.probs.empty() && o.kernel != "reference") {
    throw UsageError(
        "--probs needs --kernel reference: the flash kernel never materialises the "
        "len_q x len_k probability matrix (that is the point of it)");
  }
  for (auto [opt, value, flag] : {std::tuple{o.window_left_opt, o.window_left, "--window-left"},
                                  {o.window_right_opt, o.window_right, "--window-right"}}) {
    if (opt && opt->count() > 0 && value < 0) {
      throw UsageError(std::string(flag) + " must be >= 0 (omit it for an unbounded side), got " +
                         std::to_string(value));
    }
  }
  if (o.sinks < 0) throw UsageError("--sinks must be >= 0, got " + std::to_string(o.sinks));
  if (o.global < 0) throw UsageError("--global must be >= 0, got " + std::to_string(o.global));
  if (softmax == SoftmaxKind::kSinkLogit && o.sink_logits.empty()) {
    throw UsageError("--softmax sink needs --sink-logits S.npy (float32 [heads_q])");
  }
  if (softmax != SoftmaxKind::kSinkLogit && !o.sink_logits.empty()) {
    throw UsageError("--sink-logits is only used with --softmax sink (got --softmax " +
                       o.softmax + ")");
  }
  if (softmax != SoftmaxKind::kSigmoid && o.sigmoid_bias_opt && o.sigmoid_bias_opt->count() > 0) {
    throw UsageError("--sigmoid-bias is only used with --softmax sigmoid (got --softmax " +
                       o.softmax + ")");
  }
  const bool backward =
      !o.dout.empty() || !o.dq.empty() || !o.dk.empty() || !o.dv.empty() || !o.dsink.empty();
  if (backward) {
    for (auto [flag, path] :
         {std::pair{"--dout", &o.dout}, {"--dq", &o.dq}, {"--dk", &o.dk}, {"--dv", &o.dv}}) {
      if (path->empty()) {
        throw UsageError(std::string("the backward pass needs --dout, --dq, --dk and --dv; ") +
                           flag + " is missing");
      }
    }
    if (!o.dsink.empty() && softmax != SoftmaxKind::kSinkLogit) {
      throw UsageError("--dsink is the gradient of the sink logits: it needs --softmax sink");
    }
  }
  // Distinct outputs in existing directories, checked now rather than after the computation.
  std::vector<std::pair<std::string, std::filesystem::path>> seen;
  for (const auto& [flag, path] : OutputFlags(o)) {
    if (path.empty()) continue;
    std::error_code ec;
    const std::filesystem::path canon = std::filesystem::weakly_canonical(path, ec);
    const std::filesystem::path key = ec ? std::filesystem::path(path) : canon;
    for (const auto& [other_flag, other] : seen) {
      if (other == key) {
        throw UsageError(flag + " and " + other_flag + " name the same file " + path);
      }
    }
    seen.emplace_back(flag, key);
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
      throw UsageError(flag + " " + path + " exists and is not a regular file");
    }
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    if (!std::filesystem::is_directory(dir, ec)) {
      throw UsageError(flag + " " + path + ": the directory " + dir.string() + " does not exist");
    }
  }
}

const char* kQDims = "[batch, heads_q, len_q, head_dim]";
const char* kKDims = "[batch, heads_kv, len_k, head_dim]";

void RunAttention(const AttentionOptions& o) {
  CheckFlags(o);
  const bool backward = !o.dout.empty();
  const bool flash = o.kernel == "flash";

  // ---- Inputs -----------------------------------------------------------------------------
  const FloatArray q = LoadFloat("--q", o.q, 4, kQDims);
  const FloatArray k = LoadFloat("--k", o.k, 4, kKDims);
  const FloatArray v = LoadFloat("--v", o.v, 4, kKDims);
  if (k.shape != v.shape) {
    throw CommandError("k has shape " + ShapeStr(k.shape) + " but v has shape " +
                       ShapeStr(v.shape) + "; both must be " + kKDims);
  }
  if (q.shape[0] != k.shape[0]) {
    throw CommandError("q has batch " + std::to_string(q.shape[0]) + " (shape " +
                       ShapeStr(q.shape) + ") but k and v have batch " +
                       std::to_string(k.shape[0]) + " (shape " + ShapeStr(k.shape) + ")");
  }
  if (q.shape[3] != k.shape[3]) {
    throw CommandError("q has head_dim " + std::to_string(q.shape[3]) + " (shape " +
                       ShapeStr(q.shape) + ") but k and v have head_dim " +
                       std::to_string(k.shape[3]) + " (shape " + ShapeStr(k.shape) + ")");
  }
  AttentionShape shape;
  shape.batch = q.shape[0];
  shape.heads_q = q.shape[1];
  shape.len_q = q.shape[2];
  shape.head_dim = q.shape[3];
  shape.heads_kv = k.shape[1];
  shape.len_k = k.shape[2];

  AttentionParams params;
  params.softmax = ParseSoftmax(o.softmax);
  if (o.scale_opt && o.scale_opt->count() > 0) params.scale = static_cast<float>(o.scale);
  params.sigmoid_bias = static_cast<float>(o.sigmoid_bias);
  AttentionMask& mask = params.mask;
  mask.causal = o.causal;
  mask.window_left = o.window_left_opt->count() > 0 ? o.window_left : -1;
  mask.window_right = o.window_right_opt->count() > 0 ? o.window_right : -1;
  mask.n_sink = o.sinks;
  mask.n_global = o.global;
  mask.mask_first_key = o.mask_first_key;

  std::vector<uint8_t> mask_bytes;
  if (!o.mask.empty()) {
    auto m = ReadNpy(o.mask);
    Check(m.status(), "--mask");
    const std::vector<int64_t>& ms = m->shape;
    const std::vector<int64_t> want2 = {shape.len_q, shape.len_k};
    const bool ok2 = ms == want2;
    const bool ok4 = ms.size() == 4 && (ms[0] == shape.batch || ms[0] == 1) &&
                     (ms[1] == shape.heads_q || ms[1] == 1) && ms[2] == shape.len_q &&
                     ms[3] == shape.len_k;
    if (!ok2 && !ok4) {
      throw CommandError("--mask " + o.mask + ": expected shape [len_q, len_k] = " +
                         ShapeStr(want2) + " or [batch, heads_q, len_q, len_k] = " +
                         ShapeStr({shape.batch, shape.heads_q, shape.len_q, shape.len_k}) +
                         " (a 1 in the first two broadcasts), found " + m->ShapeString());
    }
    auto bytes = m->ToUint8(o.mask);
    Check(bytes.status(), "--mask");
    mask_bytes = std::move(*bytes);
    ExplicitMask e;
    e.data = mask_bytes.data();
    e.size = static_cast<int64_t>(mask_bytes.size());
    e.stride_row = shape.len_k;
    if (ok4) {
      e.stride_head = ms[1] == 1 ? 0 : shape.len_q * shape.len_k;
      e.stride_batch = ms[0] == 1 ? 0 : ms[1] * shape.len_q * shape.len_k;
    }
    mask.explicit_mask = e;
  }

  std::vector<float> sink_logits;
  if (!o.sink_logits.empty()) {
    FloatArray s = LoadFloat("--sink-logits", o.sink_logits, 1, "[heads_q]");
    if (s.shape[0] != shape.heads_q) {
      throw CommandError("--sink-logits " + o.sink_logits +
                         ": expected one logit per query head, "
                         "shape [" +
                         std::to_string(shape.heads_q) + "], found " + ShapeStr(s.shape));
    }
    sink_logits = std::move(s.data);
    params.sink_logits = sink_logits;
  }

  std::optional<FloatArray> dout;
  if (backward) {
    dout = LoadFloat("--dout", o.dout, 4, kQDims);
    if (dout->shape != q.shape) {
      throw CommandError("--dout " + o.dout + ": expected the shape of q " + ShapeStr(q.shape) +
                         ", found " + ShapeStr(dout->shape));
    }
  }

  // ---- Compute ----------------------------------------------------------------------------
  const auto view = [](const FloatArray& a) {
    return ContiguousView(a.data.data(), a.shape[0], a.shape[1], a.shape[2], a.shape[3]);
  };
  const AttentionTensor qv = view(q), kv = view(k), vv = view(v);
  std::vector<float> out(q.data.size());
  const AttentionTensorMut outv =
      ContiguousView(out.data(), shape.batch, shape.heads_q, shape.len_q, shape.head_dim);
  Check(ValidateAttention(shape, params, qv, kv, vv, outv));

  const int64_t rows = shape.batch * shape.heads_q * shape.len_q;
  std::vector<float> lse;
  if (!o.lse.empty() || (backward && flash)) lse.resize(rows);
  std::vector<float> probs;
  if (!o.probs.empty()) probs.resize(rows * shape.len_k);

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (flash) {
    Check(AttentionForwardFlash(shape, params, qv, kv, vv, outv, lse));
  } else {
    Check(AttentionForwardReference(shape, params, qv, kv, vv, outv, lse, probs));
  }
  const double fwd_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  std::vector<float> dq, dk, dv, dsink;
  double bwd_ms = 0;
  if (backward) {
    dq.resize(q.data.size());
    dk.resize(k.data.size());
    dv.resize(v.data.size());
    if (params.softmax == SoftmaxKind::kSinkLogit) dsink.resize(shape.heads_q);
    const auto mut = [&](std::vector<float>& buf, const std::vector<int64_t>& s) {
      return ContiguousView(buf.data(), s[0], s[1], s[2], s[3]);
    };
    const AttentionTensor doutv = view(*dout);
    const auto t1 = Clock::now();
    if (flash) {
      const AttentionTensor outc =
          ContiguousView(static_cast<const float*>(out.data()), shape.batch, shape.heads_q,
                         shape.len_q, shape.head_dim);
      Check(AttentionBackwardFlash(shape, params, qv, kv, vv, outc, lse, doutv, mut(dq, q.shape),
                                   mut(dk, k.shape), mut(dv, v.shape), dsink));
    } else {
      Check(AttentionBackwardReference(shape, params, qv, kv, vv, doutv, mut(dq, q.shape),
                                       mut(dk, k.shape), mut(dv, v.shape), dsink));
    }
    bwd_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  }

  // ---- Outputs: all staged, then renamed into place ----------------------------------------
  NpyOutputSet outputs;
  const auto stage = [&](const std::string& flag, const std::string& path,
                         const std::vector<float>& data, std::vector<int64_t> s) {
    if (path.empty()) return;
    Check(outputs.Stage(path, MakeNpyFloat(data.data(), s)), flag);
  };
  stage("--o", o.out, out, q.shape);
  stage("--lse", o.lse, lse, {shape.batch, shape.heads_q, shape.len_q});
  stage("--probs", o.probs, probs, {shape.batch, shape.heads_q, shape.len_q, shape.len_k});
  if (backward) {
    stage("--dq", o.dq, dq, q.shape);
    stage("--dk", o.dk, dk, k.shape);
    stage("--dv", o.dv, dv, v.shape);
    stage("--dsink", o.dsink, dsink, {shape.heads_q});
  }
  Check(outputs.Commit(), "writing outputs");

  if (o.json) {
    nlohmann::ordered_json j;
    j["kernel"] = o.kernel;
    j["softmax"] = o.softmax;
    j["q_shape"] = q.shape;
    j["kv_shape"] = k.shape;
    j["forward_ms"] = fwd_ms;
    j["backward_ms"] = backward ? nlohmann::json(bwd_ms) : nlohmann::json(nullptr);
    j["outputs"] = nlohmann::json::object();
    for (const auto& [flag, path] : OutputFlags(o)) {
      if (!path.empty()) j["outputs"][flag.substr(2)] = path;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("attention: %s kernel, %s softmax, q %s, k/v %s: forward %.3f ms", o.kernel.c_str(),
              o.softmax.c_str(), ShapeStr(q.shape).c_str(), ShapeStr(k.shape).c_str(), fwd_ms);
  if (backward) std::printf(", backward %.3f ms", bwd_ms);
  std::printf("; wrote %s", o.out.c_str());
  for (const auto& [flag, path] : OutputFlags(o)) {
    if (!path.empty() && flag != "--o") std::printf(", %s", path.c_str());
  }
  std::printf("\n");
}

}  // namespace

void RegisterAttentionCommand(CLI::App& app) {
  auto opts = std::make_shared<AttentionOptions>();
  AttentionOptions& o = *opts;
  CLI::App* cmd = app.add_subcommand(
      "attention",
      "Run attention on .npy tensors (forward, and backward with --dout). Shapes: q "
      "[batch, heads_q, len_q, head_dim], k and v [batch, heads_kv, len_k, head_dim]; float32 "
      "(float64 is converted). Semantics: include/attnlab/attention.h.");
  cmd->add_option("--q", o.q, "Q .npy [batch, heads_q, len_q, head_dim] (required)");
  cmd->add_option("--k", o.k, "K .npy [batch, heads_kv, len_k, head_dim] (required)");
  cmd->add_option("--v", o.v, "V .npy, shaped like K (required)");
  cmd->add_option("--o", o.out, "output O .npy, shaped like Q (required)");
  cmd->add_option("--lse", o.lse, "output log-sum-exp .npy [batch, heads_q, len_q]");
  cmd->add_option("--probs", o.probs,
                  "output probabilities .npy [batch, heads_q, len_q, len_k] (--kernel reference)");
  cmd->add_option("--kernel", o.kernel, "flash (tiled, default) or reference (materialised)");
  cmd->add_flag("--causal", o.causal, "causal mask, bottom-right aligned when len_q != len_k");
  o.window_left_opt = cmd->add_option("--window-left", o.window_left,
                                      "keys visible to the left of the query's position "
                                      "(inclusive; default unbounded)");
  o.window_right_opt = cmd->add_option("--window-right", o.window_right,
                                       "keys visible to the right (inclusive; default unbounded)");
  cmd->add_option("--sinks", o.sinks, "number of leading keys that bypass the window (n_sink)");
  cmd->add_option("--global", o.global,
                  "number of leading positions that are global (n_global, Longformer): their "
                  "keys bypass the window and their queries see every causal key");
  cmd->add_flag("--mask-first-key", o.mask_first_key, "hide key 0 from every query");
  cmd->add_option("--mask", o.mask,
                  "explicit mask .npy, uint8/bool, 1 = visible: [len_q, len_k] or "
                  "[batch, heads_q, len_q, len_k] (size-1 batch/head broadcast)");
  cmd->add_option("--softmax", o.softmax, "standard (default), softmax1, sink, sigmoid or softpick");
  cmd->add_option("--sink-logits", o.sink_logits, "sink logits .npy [heads_q] (--softmax sink)");
  o.sigmoid_bias_opt = cmd->add_option("--sigmoid-bias", o.sigmoid_bias,
                                       "bias added to the logits (--softmax sigmoid)");
  o.scale_opt = cmd->add_option("--scale", o.scale, "logit scale (default 1/sqrt(head_dim))");
  cmd->add_option("--dout", o.dout, "upstream gradient dO .npy, shaped like Q (runs the backward)");
  cmd->add_option("--dq", o.dq, "output dQ .npy (required with --dout)");
  cmd->add_option("--dk", o.dk, "output dK .npy (required with --dout)");
  cmd->add_option("--dv", o.dv, "output dV .npy (required with --dout)");
  cmd->add_option("--dsink", o.dsink, "output d sink_logits .npy [heads_q] (--softmax sink)");
  cmd->add_flag("--json", o.json, "print the timings and the files written as JSON");
  cmd->callback([opts] {
    try {
      RunAttention(*opts);
    } catch (const std::bad_alloc&) {
      throw CommandError("out of memory: the inputs or outputs are too large for this machine");
    } catch (const std::length_error&) {
      throw CommandError("out of memory: the inputs or outputs are too large for this machine");
    }
  });
}

}  // namespace attnlab::cli
