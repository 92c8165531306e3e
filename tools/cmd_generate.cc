// `attnlab generate`: sample text from a model, streaming tokens as they come.
//
//   attnlab generate [--model M] [--prompt STR] [--max-tokens 200] [--temperature 0.8]
//                    [--top-k 40] [--top-p 0.95] [--seed 1]
//                    [--policy dense|window|sink] [--sinks 4] [--window W]
//
// The prompt is prefilled into a KV cache, then one token at a time is decoded against it.
// The model defaults to the embedded one. The dense cache (default) keeps every token, so prompt
// plus generated tokens are limited to the model's context; the window and sink policies
// (model/streaming_cache.h) keep W tokens and generate without a length limit at constant memory.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli_model.h"
#include "commands.h"
#include "model/sampler.h"
#include "model/streaming_cache.h"

namespace attnlab::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer, prompt, policy = "dense";
  int64_t max_tokens = 200, sinks = 4, window = 0;
  std::string kv_dtype = "f32";
  SamplerConfig sampler{0.8f, 40, 0.95f, 1};
};

void Run(const GenerateOptions& o) {
  Check(ValidateSampler(o.sampler));
  if (o.max_tokens < 1) throw CommandError("--max-tokens must be >= 1");
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/true);
  Gpt& g = *m.gpt;
  const ModelConfig& c = g.config();
  auto enc = m.tokenizer->Encode(o.prompt);
  Check(enc.status());
  std::vector<int32_t> ids;
  const bool bos = TrainedWithBos(m);
  if (bos || o.prompt.empty()) {
    if (!m.tokenizer->bos_id()) throw CommandError("an empty prompt needs a tokenizer with a BOS token");
    ids.push_back(*m.tokenizer->bos_id());
  }
  ids.insert(ids.end(), enc.value().begin(), enc.value().end());
  auto policy = ParseCachePolicy(o.policy);
  Check(policy.status(), "--policy");
  if (policy.value() == CachePolicy::kRecompute) {
    throw CommandError("--policy recompute is an evaluation baseline (attnlab stream), not a cache");
  }
  const bool bounded = policy.value() != CachePolicy::kDense;
  Result<KvDtype> kv_dtype = ParseKvDtype(o.kv_dtype);
  Check(kv_dtype.status(), "--kv-dtype");
  if (bounded && *kv_dtype != KvDtype::kF32) {
    throw CommandError("--kv-dtype " + o.kv_dtype + " needs --policy dense (the streaming caches "
                       "hold fp32)");
  }
  std::unique_ptr<KvCache> cache;
  int64_t step_max = static_cast<int64_t>(ids.size());  // prompt tokens per prefill step
  if (bounded) {
    StreamingCacheConfig sc;
    sc.policy = policy.value();
    sc.n_sink = o.sinks;
    sc.window = o.window > 0 ? o.window : c.context;
    Check(ValidateStreamingConfig(sc, c));
    cache = std::make_unique<StreamingKvCache>(sc, c);
    step_max = sc.window - (sc.policy == CachePolicy::kSinkWindow ? sc.n_sink : 0);
  } else {
    if (static_cast<int64_t>(ids.size()) >= c.context) {
      throw CommandError("the prompt is " + std::to_string(ids.size()) +
                         " tokens; the model's context is " + std::to_string(c.context) +
                         " (use --policy sink for unlimited length)");
    }
    auto made = MakeKvCache(c, *kv_dtype);  // linear attention: its running state
    Check(made.status(), "--kv-dtype");
    cache = std::move(made).value();
  }
  const int64_t n_new =
      bounded ? o.max_tokens
              : std::min<int64_t>(o.max_tokens, c.context - static_cast<int64_t>(ids.size()));
  Sampler sampler(o.sampler);
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t s = 0; s < ids.size(); s += step_max) {
    const int64_t n = std::min<int64_t>(step_max, ids.size() - s);
    Check(g.Forward(ids.data() + s, nullptr, 1, n, nullptr, cache.get()));
  }
  const auto t1 = std::chrono::steady_clock::now();
  const int64_t V = c.vocab_size;
  const float* last = g.logits() + (g.last_len() - 1) * V;
  int64_t produced = 0;
  for (; produced < n_new; ++produced) {
    const int32_t next = sampler.Sample(std::span<const float>(last, V));
    if (m.tokenizer->eos_id() && next == *m.tokenizer->eos_id()) break;
    auto bytes = m.tokenizer->TokenBytes(next);
    Check(bytes.status());
    std::fwrite(bytes.value().data(), 1, bytes.value().size(), stdout);
    std::fflush(stdout);
    if (produced + 1 == n_new) {
      ++produced;
      break;
    }
    Check(g.Forward(&next, nullptr, 1, 1, nullptr, cache.get()));
    last = g.logits();
  }
  const auto t2 = std::chrono::steady_clock::now();
  const double prefill = std::chrono::duration<double>(t1 - t0).count();
  const double decode = std::chrono::duration<double>(t2 - t1).count();
  std::printf("\n");
  std::fflush(stdout);  // the text ends before the statistics on stderr
  std::fprintf(stderr,
               "[%zu prompt tokens in %.3f s; %ld tokens generated at %.1f tokens/s; cache %s, "
               "%.1f MiB]\n",
               ids.size(), prefill, static_cast<long>(produced), decode > 0 ? produced / decode : 0.0,
               o.policy.c_str(), cache->bytes() / 1048576.0);
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a model (streams tokens)");
  cmd->add_option("--model", o->model, "checkpoint dir, GPT-2 safetensors, or llm.c .bin (default: embedded)");
  cmd->add_option("--tokenizer", o->tokenizer, "override: byte, gpt2, or a vocabulary file");
  cmd->add_option("--prompt", o->prompt, "text to continue (default: start from BOS)");
  cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate (200)");
  cmd->add_option("--temperature", o->sampler.temperature, "0 = greedy (0.8)");
  cmd->add_option("--top-k", o->sampler.top_k, "sample from the k most likely (40; 0 = all)");
  cmd->add_option("--top-p", o->sampler.top_p, "nucleus mass (0.95)");
  cmd->add_option("--seed", o->sampler.seed, "sampling seed (1)");
  cmd->add_option("--policy", o->policy, "KV cache: dense (default), window, sink (no length limit)");
  cmd->add_option("--sinks", o->sinks, "pinned first tokens for --policy sink (4)");
  cmd->add_option("--kv-dtype", o->kv_dtype,
                  "KV cache storage: f32 (default), bf16 or f16 (--policy dense)");
  cmd->add_option("--window", o->window, "tokens the cache holds, sinks included (default: context)");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
