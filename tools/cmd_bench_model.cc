// `attnlab bench model`: training, prefill and decode throughput of a GPT shape with random
// weights and tokens (what decides how many tokens a model sees in an hour).
//
//   attnlab bench model [--preset default|gpt2-small|NAME ...] [--layers L --d-model C --heads H
//                        --vocab V --context T --batch B --seq-len S] [--steps 5]
//                       [--prefill 0] [--decode 64] [--json]
//
// Presets: "small3m": 4 layers, d_model 256, 4 heads, context 256, byte vocabulary (256), batch 16
// (the PyTorch calibration shape in the performance issue); "gpt2-small": 12 x 768, 12 heads,
// vocab 50257, context 1024, batch 4 x 256; "default": the embedded default model's shape if it
// is present. Training tokens/s = batch * seq_len / (forward + backward + AdamW step), median of
// --steps steps after one warm-up step. Prefill: one sequence of --prefill tokens (default: the
// context) through a KV cache. Decode: --decode tokens one at a time after that prefill.
// bench/torch_model_bench.py runs the same shapes in PyTorch and prints both side by side.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "attnlab/thread_pool.h"
#include "commands.h"
#include "core/resources.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "train/optimizer.h"

namespace attnlab::cli {
namespace {

struct BenchModelOptions {
  std::vector<std::string> presets;
  int64_t layers = 0, d_model = 0, heads = 0, vocab = 0, context = 0, batch = 0, seq_len = 0;
  int64_t steps = 5, prefill = 0, decode = 64;
  std::string kv_dtype = "f32";
  bool json = false;
};

struct Shape {
  std::string name;
  ModelConfig config;
  int64_t batch = 16, seq_len = 256;
};

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
  } else if (name == "default") {
    const std::string path = FindResource(kDefaultModelPath);
    if (path.empty()) throw CommandError("preset default: the embedded default model is missing");
    auto m = LoadCheckpoint(path);
    Check(m.status(), "preset default");
    c = m.value().config;
    s.batch = 16, s.seq_len = c.context;
  } else {
    throw CommandError("unknown preset '" + name + "' (small3m, gpt2-small, default)");
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

nlohmann::ordered_json Run(const Shape& s, const BenchModelOptions& o) {
  auto g = Gpt::Create(s.config);
  Check(g.status(), s.name);
  Gpt& gpt = *g.value();
  gpt.params().Initialize(s.config, 1);
  std::mt19937 rng(7);
  const int64_t B = s.batch, T = s.seq_len, V = s.config.vocab_size;
  std::vector<int32_t> x(B * T), y(B * T);
  for (auto& t : x) t = rng() % V;
  for (auto& t : y) t = rng() % V;
  AdamWConfig oc;
  AdamW opt(s.config, oc);
  std::vector<double> step_times;
  for (int64_t i = 0; i <= o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    double loss = 0;
    gpt.grads().Zero();
    Check(gpt.Forward(x.data(), y.data(), B, T, &loss));
    Check(gpt.Backward());
    opt.Step(gpt.params(), gpt.grads());
    if (i > 0) step_times.push_back(Seconds(t0, std::chrono::steady_clock::now()));
  }
  const double step = Median(step_times);
  // Inference: prefill one sequence, then decode token by token.
  const int64_t P = o.prefill > 0 ? o.prefill : std::min<int64_t>(s.config.context - o.decode, 512);
  if (P < 1 || P + o.decode > s.config.context) {
    throw CommandError("--prefill + --decode must fit the context of " + std::to_string(s.config.context));
  }
  const ModelConfig& c = s.config;
  Result<KvDtype> kv_dtype = ParseKvDtype(o.kv_dtype);
  Check(kv_dtype.status(), "--kv-dtype");
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
      if (dtype != KvDtype::kF32 || *kv_dtype != KvDtype::kF32) {
        t.logits.insert(t.logits.end(), gpt.logits(), gpt.logits() + V);
      }
    }
    t.prefill_s = Seconds(p0, p1);
    t.decode_s = Seconds(p1, std::chrono::steady_clock::now());
    return t;
  };
  const Timed f32 = infer(KvDtype::kF32);
  Timed half;
  double logit_err = 0, logit_max = 0;
  if (*kv_dtype != KvDtype::kF32) {
    half = infer(*kv_dtype);
    for (size_t i = 0; i < f32.logits.size(); ++i) {
      logit_err = std::max(logit_err, double(std::abs(half.logits[i] - f32.logits[i])));
      logit_max = std::max(logit_max, double(std::abs(f32.logits[i])));
    }
  }
  nlohmann::ordered_json j;
  j["shape"] = s.name;
  j["params"] = ModelParameterCount(c);
  j["layers"] = c.n_layer, j["d_model"] = c.d_model, j["heads"] = c.n_head;
  j["vocab"] = c.vocab_size, j["context"] = c.context;
  j["batch"] = B, j["seq_len"] = T;
  j["train_step_s"] = step;
  j["train_tokens_per_s"] = B * T / step;
  j["prefill_tokens"] = P;
  j["prefill_tokens_per_s"] = P / f32.prefill_s;
  j["decode_tokens"] = o.decode;
  j["decode_tokens_per_s"] = o.decode > 0 ? o.decode / f32.decode_s : 0.0;
  if (*kv_dtype != KvDtype::kF32) {
    const std::string d(KvDtypeName(*kv_dtype));
    j["kv_dtype"] = d;
    j["decode_tokens_per_s_" + d] = o.decode > 0 ? o.decode / half.decode_s : 0.0;
    j["max_logit_err_" + d] = logit_err;
    j["max_abs_logit"] = logit_max;
  }
  return j;
}

void RunAll(const BenchModelOptions& o) {
  std::vector<Shape> shapes;
  if (o.layers > 0) {
    Shape s;
    s.name = "custom";
    s.config.n_layer = o.layers;
    if (o.d_model) s.config.d_model = o.d_model;
    if (o.heads) s.config.n_head = o.heads;
    if (o.vocab) s.config.vocab_size = o.vocab;
    if (o.context) s.config.context = o.context;
    Check(ValidateModelConfig(s.config), "custom shape");
    s.batch = o.batch > 0 ? o.batch : 16;
    s.seq_len = o.seq_len > 0 ? o.seq_len : s.config.context;
    shapes.push_back(s);
  }
  for (const std::string& p : o.presets) shapes.push_back(Preset(p));
  if (shapes.empty()) shapes = {Preset("small3m"), Preset("gpt2-small")};
  for (Shape& s : shapes) {
    if (o.batch > 0) s.batch = o.batch;
    if (o.seq_len > 0) s.seq_len = o.seq_len;
    if (s.seq_len > s.config.context) throw CommandError("--seq-len exceeds the context");
  }
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  if (!o.json) {
    std::printf("# attnlab bench model | threads: %d | training = forward + backward + AdamW\n",
                DefaultThreadCount());
    std::printf("%-12s %9s %14s %14s %16s %15s\n", "shape", "params", "batch x seq",
                "train tok/s", "prefill tok/s", "decode tok/s");
  }
  for (const Shape& s : shapes) {
    nlohmann::ordered_json j = Run(s, o);
    if (!o.json) {
      char bs[32];
      std::snprintf(bs, sizeof bs, "%ld x %ld", static_cast<long>(s.batch), static_cast<long>(s.seq_len));
      std::printf("%-12s %8.1fM %14s %14.0f %16.0f %15.1f", s.name.c_str(),
                  j["params"].get<double>() / 1e6, bs, j["train_tokens_per_s"].get<double>(),
                  j["prefill_tokens_per_s"].get<double>(), j["decode_tokens_per_s"].get<double>());
      if (j.contains("kv_dtype")) {
        const std::string d = j["kv_dtype"];
        std::printf("   %s cache: decode %.1f tok/s, max |logit diff| %.2e (max |logit| %.2f)",
                    d.c_str(), j["decode_tokens_per_s_" + d].get<double>(),
                    j["max_logit_err_" + d].get<double>(), j["max_abs_logit"].get<double>());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    all.push_back(j);
  }
  if (o.json) std::printf("%s\n", all.dump(2).c_str());
}

}  // namespace

void RegisterBenchModelCommand(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto o = std::make_shared<BenchModelOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "model", "training, prefill and decode tokens/s of a GPT shape (random weights)");
  cmd->add_option("--preset", o->presets, "small3m, gpt2-small, default (several allowed)");
  cmd->add_option("--layers", o->layers, "custom shape: layers");
  cmd->add_option("--d-model", o->d_model, "custom shape: width");
  cmd->add_option("--heads", o->heads, "custom shape: heads");
  cmd->add_option("--vocab", o->vocab, "custom shape: vocabulary");
  cmd->add_option("--context", o->context, "custom shape: context");
  cmd->add_option("--batch", o->batch, "sequences per training step");
  cmd->add_option("--seq-len", o->seq_len, "tokens per training sequence");
  cmd->add_option("--steps", o->steps, "timed training steps (5)")->check(CLI::Range(1, 100000));
  cmd->add_option("--prefill", o->prefill, "prefill tokens (default: min(context - decode, 512))");
  cmd->add_option("--decode", o->decode, "decoded tokens (64)")->check(CLI::Range(0, 1000000));
  cmd->add_option("--kv-dtype", o->kv_dtype,
                  "also decode with a bf16 or f16 KV cache: its speed and logit error (f32)");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->callback([o] { RunAll(*o); });
}

}  // namespace attnlab::cli
