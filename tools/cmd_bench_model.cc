// `attnlab bench model`: training, prefill and decode throughput of a GPT shape with random
// weights and tokens (what decides how many tokens a model sees in an hour).
//
//   attnlab bench model [--preset small3m|gpt2-small|default ...] [--layers L --d-model C
//                        --heads H --vocab V --context T] [--model PATH ...]
//                       [--batch B] [--seq-len S] [--steps 5]
//                       [--prefill 0] [--decode 64] [--kv-dtype f32|bf16|f16] [--json]
//                       [--threads T]
//
// Presets: "small3m" (the default: seconds, a few hundred MB): 4 layers, d_model 256, 4 heads,
// context 256, byte vocabulary (256), batch 16 (the PyTorch calibration shape in the performance
// issue); "gpt2-small" (ask for it: 124M parameters, about 3 GB and a minute or more on 2 cores):
// 12 x 768, 12 heads, vocab 50257, context 1024, batch 4 x 256; "default": the embedded default
// model's shape. Training tokens/s = batch * seq_len / (forward + backward + AdamW step), median
// of --steps steps after one warm-up step. Prefill: one sequence of --prefill tokens (default:
// min(context - decode, 512)) through a KV cache. Decode: --decode tokens one at a time after
// that prefill. Each rate is also given as model FLOP/s (6N + 6LCT per trained token, 2N + 2LCT
// per inferred one: Kaplan et al. 2020, llm.c's MFU) divided by a 2048^3 sgemm measured in the
// same run. --json prints the bench document (bench_json.h). bench/torch_model_bench.py runs the
// same shapes in PyTorch and prints both side by side. --model PATH benchmarks a model file
// (any format LoadAnyModel opens: a Hugging Face folder, GGUF, a checkpoint) with its own
// weights: batch 1 x min(context, 256) for training unless --batch/--seq-len say otherwise;
// --steps 0 skips training (a real model's training needs ~16 bytes per parameter).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attnlab/matmul_precision.h"
#include "attnlab/thread_pool.h"
#include "bench_attention.h"
#include "bench_json.h"
#include "commands.h"
#include "core/resources.h"
#include "formats/checkpoint.h"
#include "formats/load_model.h"
#include "formats/loaded_model.h"
#include "model/gpt.h"
#include "report/format_number.h"
#include "train/optimizer.h"

namespace attnlab::cli {
namespace {

struct BenchModelOptions {
  std::vector<std::string> presets, models;
  int64_t layers = 0, d_model = 0, heads = 0, vocab = 0, context = 0, batch = 0, seq_len = 0;
  int64_t steps = 5, prefill = 0, decode = 64;
  std::string kv_dtype = "f32";
  std::string weights = "auto";  // --model's linear layers: auto, stored, f32
  bool json = false;
};

struct Shape {
  std::string name;
  ModelConfig config;
  int64_t batch = 16, seq_len = 256;
  int64_t prefill = 0;  // tokens
  std::string model_path;  // --model: run this file's weights instead of random ones
  double stored_bytes = 0;  // --model's weights as stored (16-bit / quantized matrices and the
                            // fp32 rest), when they will run so; 0: fp32 weights
};

// Whether --model's weights run as stored: inference with --weights stored or auto.
bool KeepsStored(const BenchModelOptions& o) {
  return o.weights == "stored" || (o.weights == "auto" && o.steps == 0);
}

Shape Preset(const std::string& name) {
  Shape s;
  s.name = name;
  ModelConfig& c = s.config;
  if (name == "small3m") {
    c.vocab_size = 256, c.context = 256, c.d_model = 256, c.n_layer = 4, c.n_head = 4;
    s.batch = 16, s.seq_len = 256;
  } else if (name == "gpt2-small") {
    c.vocab_size = 50257, c.context = 1024, c.d_model = 768, c.n_layer = 12, c.n_head = 12;
    c.position = PositionEncoding::kLearned;
    s.batch = 4, s.seq_len = 256;
  } else {  // "default" (the option's check allows nothing else)
    const std::string path = FindResource(kDefaultModelPath);
    if (path.empty()) throw CommandError("preset default: the embedded default model is missing");
    auto m = LoadCheckpoint(path);
    Check(m.status(), "preset default");
    c = m.value().config;
    s.batch = 16, s.seq_len = c.context;
  }
  return s;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// What a shape allocates, estimated: weights, gradients and AdamW's two moments (16 bytes per
// parameter; the weights as stored when they run so, else 4 bytes per parameter); the training activations the model keeps per layer (18 floats per token and
// width: residuals, norms, qkv, attention, MLP in and out; gpt.cc), the backward's one-layer
// buffers (15 per token and width) and the logits with their gradient; the KV caches (fp32 and
// the --kv-dtype one). The caller adds the peak sgemm and the process itself.
double EstimateBytes(const Shape& s, bool half_cache, bool training) {
  const ModelConfig& c = s.config;
  const double P = double(ModelParameterCount(c));
  const double tokens = training ? double(s.batch) * s.seq_len : double(s.prefill);
  const double act = (18.0 * c.n_layer + 15.0) * tokens * c.d_model + 2.0 * tokens * c.vocab_size;
  const double kv_tokens = double(std::min<int64_t>(c.context, s.prefill + 4096));
  const double kv = 2.0 * c.n_layer * kv_tokens * c.kv_heads() * c.head_dim() *
                    (4 + (half_cache ? 2 : 0));
  const double weights = s.stored_bytes > 0 ? s.stored_bytes : 4 * P;
  return weights + (training ? 12 * P : 0) + 4 * act + kv;
}

// The process before any shape: the binary and its libraries, and the 2048^3 peak sgemm.
constexpr double kBaseBytes = 32.0 * (1 << 20) + 3.0 * 2048 * 2048 * 4;

// Model FLOPs per token (Kaplan et al. 2020, section 2.1; llm.c's MFU): a forward is 2N + 2LCT
// with N every parameter and T the context a token attends over; training is 3 forwards.
double FlopsPerToken(const ModelConfig& c, double context, bool training) {
  const double fwd = 2.0 * double(ModelParameterCount(c)) + 2.0 * c.n_layer * c.d_model * context;
  return training ? 3 * fwd : fwd;
}

std::string ShapeText(const Shape& s) {
  const ModelConfig& c = s.config;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s L=%ld C=%ld H=%ld V=%ld T=%ld", s.name.c_str(),
                long(c.n_layer), long(c.d_model), long(c.n_head), long(c.vocab_size),
                long(c.context));
  return buf;
}

nlohmann::ordered_json ShapeJson(const Shape& s) {
  const ModelConfig& c = s.config;
  return {{"preset", s.name},         {"params", ModelParameterCount(c)},
          {"layers", c.n_layer},      {"d_model", c.d_model},
          {"heads", c.n_head},        {"vocab", c.vocab_size},
          {"context", c.context},     {"batch", s.batch},
          {"seq_len", s.seq_len}};
}

// The rows of one shape: train, prefill, decode (and decode with the --kv-dtype cache).
std::vector<bench::TableRow> Run(const Shape& s, const BenchModelOptions& o, KvDtype kv_dtype,
                                 const bench::TableRow& peak) {
  std::unique_ptr<Gpt> model;
  if (s.model_path.empty()) {
    auto g = Gpt::Create(s.config);
    Check(g.status(), s.name);
    model = std::move(g).value();
    model->params().Initialize(s.config, 1);
  } else {
    // Stored precision (16-bit stays 16-bit) only for inference: training needs fp32.
    const bool keep16 = KeepsStored(o);
    if (keep16 && o.steps > 0) {
      throw CommandError("--weights stored is inference only: pass --steps 0 (training needs "
                         "float32 weights)");
    }
    auto loaded = LoadAnyModel(s.model_path, LoadOptions{.keep_stored = keep16});
    Check(loaded.status(), "--model " + s.model_path);
    auto g = MakeGpt(std::move(loaded).value());
    Check(g.status(), s.model_path);
    model = std::move(g).value();
  }
  Gpt& gpt = *model;
  std::mt19937 rng(7);
  const int64_t B = s.batch, T = s.seq_len, V = s.config.vocab_size;
  // Tokens for training (B x T) and for the prefill + decode run (P + decode), whichever is more.
  std::vector<int32_t> x(std::max<int64_t>(B * T, s.prefill + o.decode)), y(B * T);
  for (auto& t : x) t = rng() % V;
  for (auto& t : y) t = rng() % V;
  AdamWConfig oc;
  std::vector<double> step_times;
  double loss = 0;
  std::unique_ptr<AdamW> opt;
  if (o.steps > 0) opt = std::make_unique<AdamW>(s.config, oc);
  for (int64_t i = 0; o.steps > 0 && i <= o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    gpt.grads().Zero();
    Check(gpt.Forward(x.data(), y.data(), B, T, &loss));
    Check(gpt.Backward());
    opt->Step(gpt.params(), gpt.grads());
    if (i > 0) step_times.push_back(Seconds(t0, std::chrono::steady_clock::now()));
  }
  const double step = Median(step_times);
  // Inference: prefill one sequence, then decode token by token.
  const int64_t P = s.prefill;
  const ModelConfig& c = s.config;
  // The fp32 cache always runs (the reference); a 16-bit cache runs after it on the same tokens
  // and reports its own decode speed and max |logit - fp32 cache's logit| over the decoded steps.
  struct Timed {
    double prefill_s = 0, decode_s = 0;
    std::vector<float> logits;  // last position of each decode step
  };
  auto infer = [&](KvDtype dtype) {
    auto made = MakeKvCache(c, dtype);
    Check(made.status(), "--kv-dtype");
    std::unique_ptr<KvCache> cache = std::move(made).value();
    Timed t;
    const auto p0 = std::chrono::steady_clock::now();
    Check(gpt.Forward(x.data(), nullptr, 1, P, nullptr, cache.get()));
    const auto p1 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.decode; ++i) {
      const int32_t next = x[(P + i) % x.size()];
      Check(gpt.Forward(&next, nullptr, 1, 1, nullptr, cache.get()));
      if (kv_dtype != KvDtype::kF32) {
        t.logits.insert(t.logits.end(), gpt.logits(), gpt.logits() + V);
      }
    }
    t.prefill_s = Seconds(p0, p1);
    t.decode_s = Seconds(p1, std::chrono::steady_clock::now());
    return t;
  };
  const Timed f32 = infer(KvDtype::kF32);

  // The weights' types as they ran: the matrices' stored types ("bf16", "Q4_K+Q6_K"), else f32.
  const std::string weights = gpt.matrices() ? gpt.matrices()->TypeNames() : "f32";
  const std::string text = ShapeText(s) + (s.model_path.empty() ? "" : " w=" + weights);
  const auto row = [&](const char* kernel, double tokens, double seconds, double flops_per_token,
                       nlohmann::ordered_json extra) {
    bench::TableRow r;
    r.kernel = kernel;
    r.shape = text;
    if (extra.contains("kv_dtype")) r.shape += " kv=" + extra["kv_dtype"].get<std::string>();
    r.shape_json = ShapeJson(s);
    r.shape_json["weights"] = weights;
    for (auto& [k, v] : extra.items()) r.shape_json[k] = v;
    r.time_ms = seconds * 1e3;
    r.rate = tokens / seconds;
    r.unit = "tokens/s";
    r.baseline = "sgemm_peak";
    r.rate_in_baseline_unit = r.rate * flops_per_token * 1e-9;
    r.ratio = r.rate_in_baseline_unit / peak.rate;
    char note[96];
    std::snprintf(note, sizeof note, "%.1f model GFLOP/s", r.rate_in_baseline_unit);
    r.note = note;
    return r;
  };
  std::vector<bench::TableRow> rows;
  if (o.steps > 0) {
    bench::TableRow train = row("train_step", double(B * T), step,
                                FlopsPerToken(c, double(T), true), {{"tokens", B * T}});
    train.checks.push_back({"training loss is finite", std::isfinite(loss), loss, NAN});
    train.note += "; loss " + report::FormatSignificant(loss, 4);
    rows.push_back(train);
  }
  rows.push_back(row("prefill", double(P), f32.prefill_s, FlopsPerToken(c, double(P), false),
                     {{"tokens", P}, {"kv_dtype", "f32"}}));
  if (o.decode > 0) {
    const double ctx = double(P) + 0.5 * double(o.decode);
    rows.push_back(row("decode", double(o.decode), f32.decode_s, FlopsPerToken(c, ctx, false),
                       {{"tokens", o.decode}, {"prefill_tokens", P}, {"kv_dtype", "f32"}}));
    if (kv_dtype != KvDtype::kF32) {
      const Timed half = infer(kv_dtype);
      double logit_err = 0, logit_max = 0;
      for (size_t i = 0; i < half.logits.size() && i < f32.logits.size(); ++i) {
        logit_err = std::max(logit_err, double(std::abs(half.logits[i] - f32.logits[i])));
        logit_max = std::max(logit_max, double(std::abs(f32.logits[i])));
      }
      const std::string d(KvDtypeName(kv_dtype));
      bench::TableRow r = row("decode", double(o.decode), half.decode_s,
                              FlopsPerToken(c, ctx, false),
                              {{"tokens", o.decode}, {"prefill_tokens", P}, {"kv_dtype", d}});
      char buf[128];
      std::snprintf(buf, sizeof buf,
                    "; %s cache: max |logit - f32 cache logit| %.2e (max |logit| %.2f)", d.c_str(),
                    logit_err, logit_max);
      r.note += buf;
      rows.push_back(r);
    }
  }
  return rows;
}

std::vector<Shape> Shapes(const BenchModelOptions& o) {
  std::vector<Shape> shapes;
  const bool custom_fields = o.d_model || o.heads || o.vocab || o.context;
  if (custom_fields && o.layers == 0) {
    throw UsageError("--d-model, --heads, --vocab and --context describe a custom shape: give "
                     "--layers too");
  }
  if (o.layers > 0) {
    Shape s;
    s.name = "custom";
    s.config.n_layer = o.layers;
    if (o.d_model) s.config.d_model = o.d_model;
    if (o.heads) s.config.n_head = o.heads;
    if (o.vocab) s.config.vocab_size = o.vocab;
    if (o.context) s.config.context = o.context;
    const Status st = ValidateModelConfig(s.config);
    if (!st.ok()) throw UsageError("custom shape: " + st.message());
    s.batch = 16;
    s.seq_len = s.config.context;
    shapes.push_back(s);
  }
  for (const std::string& p : o.presets) shapes.push_back(Preset(p));
  for (const std::string& path : o.models) {
    // The configuration only (the weights are loaded by Run, one model at a time; 16-bit ones
    // are only mapped here, not widened).
    auto loaded = LoadAnyModel(path, LoadOptions{.keep_stored = true});
    Check(loaded.status(), "--model " + path);
    Shape s;
    s.name = path;
    s.config = loaded.value().config;
    s.model_path = path;
    if (loaded->matrices && KeepsStored(o)) {
      s.stored_bytes = double(loaded->matrices->bytes()) + 4.0 * double(loaded->params.size());
    }
    s.batch = 1;
    s.seq_len = std::min<int64_t>(s.config.context, 256);
    shapes.push_back(s);
  }
  if (shapes.empty()) shapes = {Preset("small3m")};
  for (Shape& s : shapes) {
    if (o.batch > 0) s.batch = o.batch;
    if (o.seq_len > 0) s.seq_len = o.seq_len;
    if (s.seq_len > s.config.context) {
      throw UsageError("--seq-len " + std::to_string(s.seq_len) + " exceeds the context " +
                       std::to_string(s.config.context) + " of " + s.name);
    }
    s.prefill = o.prefill > 0 ? o.prefill : std::min<int64_t>(s.config.context - o.decode, 512);
    if (s.prefill < 1 || s.prefill + o.decode > s.config.context) {
      throw UsageError("--prefill + --decode must fit the context of " + s.name + " (" +
                       std::to_string(s.config.context) + ")");
    }
  }
  return shapes;
}

void RunAll(const BenchModelOptions& o) {
  const std::vector<Shape> shapes = Shapes(o);
  const KvDtype kv_dtype = *ParseKvDtype(o.kv_dtype);  // checked by the option
  bench::BenchDocument doc("bench model");
  double bytes = 0;
  std::string what;
  nlohmann::ordered_json js = nlohmann::ordered_json::array();
  for (const Shape& s : shapes) {
    const double b = kBaseBytes + EstimateBytes(s, kv_dtype != KvDtype::kF32, o.steps > 0);
    bytes = std::max(bytes, b);  // one shape at a time
    what += (what.empty() ? "" : "; ") + s.name + " (" +
            report::FormatSignificant(ModelParameterCount(s.config) / 1e6, 3) + "M params, " +
            std::to_string(s.config.n_layer) + " x " + std::to_string(s.config.d_model) +
            ", batch " + std::to_string(s.batch) + " x " + std::to_string(s.seq_len) +
            ", prefill " + std::to_string(s.prefill) + ", decode " + std::to_string(o.decode) +
            ", ~" + report::FormatBytes(b) + ")";
    js.push_back(ShapeJson(s));
  }
  doc.SetMemoryEstimate(static_cast<int64_t>(bytes));
  nlohmann::ordered_json& set = doc.settings();
  set["shapes"] = js;
  set["steps"] = o.steps;
  set["decode"] = o.decode;
  set["prefill"] = o.prefill > 0 ? nlohmann::ordered_json(o.prefill) : nlohmann::ordered_json();
  set["kv_dtype"] = o.kv_dtype;
  doc.Define("rate", "tokens/s: training batch * seq_len / (forward + backward + AdamW step), "
                     "median of --steps after a warm-up; prefill tokens / prefill time; decoded "
                     "tokens / decode time");
  doc.Define("rate_in_baseline_unit",
             "model GFLOP/s: tokens/s x FLOPs per token, 6N + 6LCT training, 2N + 2LCT "
             "inference (Kaplan et al. 2020; N every parameter, T the context attended)");
  doc.Define("ratio", "model GFLOP/s over the same-run 2048^3 sgemm's GFLOP/s (an MFU)");
  bench::Say(o.json, "attnlab bench model: " + what + "; " + std::to_string(o.steps) +
                         " timed training steps; memory ~" + report::FormatBytes(bytes) +
                         (o.presets.empty() && o.layers == 0
                              ? " (GPT-2 124M: --preset gpt2-small, ~3 GB, a minute or more)"
                              : ""));
  const bench::TableRow peak =
      SgemmPeakRow(static_cast<int>(std::clamp<int64_t>(o.steps, 1, 3)));
  if (!o.json) {
    std::printf("# CPU: %s | threads: %d | %s | kernels %s | BF16 weights: %s | training = "
                "forward + backward + AdamW\n",
                doc.cpu().c_str(), doc.threads(), doc.date().c_str(), doc.simd_kernels().c_str(),
                WeightMatmulDescription().c_str());
    bench::PrintTableHeader();
    bench::PrintTableRow(peak);
  } else {
    doc.AddBaseline("sgemm_peak", peak);
  }
  for (const Shape& s : shapes) {
    for (const bench::TableRow& r : Run(s, o, kv_dtype, peak)) {
      if (o.json) {
        doc.AddRow(r);
      } else {
        bench::PrintTableRow(r);
      }
    }
  }
  if (o.json) doc.Print();
}

}  // namespace

void RegisterBenchModelCommand(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "model", "training, prefill and decode tokens/s of a GPT shape (random weights)");
  cmd->fallthrough();
  cmd->add_option("--preset", o->presets,
                  "small3m (the default), gpt2-small (124M, ~3 GB), default (the embedded "
                  "model's shape); several allowed")
      ->check(CLI::IsMember({"small3m", "gpt2-small", "default"}));
  const auto size = CLI::Range(int64_t{1}, int64_t{1} << 20);
  cmd->add_option("--model", o->models,
                  "a model file or folder to run with its own weights (HF folder, GGUF, "
                  "checkpoint); several allowed");
  cmd->add_option("--layers", o->layers, "custom shape: layers")->check(size);
  cmd->add_option("--d-model", o->d_model, "custom shape: width")->check(size);
  cmd->add_option("--heads", o->heads, "custom shape: heads")->check(size);
  cmd->add_option("--vocab", o->vocab, "custom shape: vocabulary")->check(size);
  cmd->add_option("--context", o->context, "custom shape: context")->check(size);
  cmd->add_option("--batch", o->batch, "sequences per training step")->check(size);
  cmd->add_option("--seq-len", o->seq_len, "tokens per training sequence")->check(size);
  cmd->add_option("--weights", o->weights,
                  "--model's linear layers: auto (as stored when --steps 0, else f32), stored "
                  "(BF16/F16 stay 16-bit, GGUF's Q8_0/Q4_0/Q4_K/Q6_K stay quantized: inference "
                  "only), f32")
      ->check(CLI::IsMember({"auto", "stored", "f32"}));
  cmd->add_option("--steps", o->steps, "timed training steps (5; 0: no training)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--prefill", o->prefill, "prefill tokens (default: min(context - decode, 512))")
      ->check(size);
  cmd->add_option("--decode", o->decode, "decoded tokens (64)")->check(CLI::Range(0, 1000000));
  cmd->add_option("--kv-dtype", o->kv_dtype,
                  "also decode with a bf16 or f16 KV cache: its speed and logit error (f32)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  cmd->add_flag("--json", o->json, "print the bench JSON document (bench/README.md) instead");
  cmd->callback([o] { RunAll(*o); });
}

}  // namespace attnlab::cli
