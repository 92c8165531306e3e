// `attnlab generate`: sample text from a model, streaming tokens as they come.
//
//   attnlab generate [--model M] [--prompt STR | --text FILE] [--max-tokens 100]
//                    [--temperature 0.8] [--top-k 40] [--top-p 0.95] [--seed 1]
//                    [--policy dense|window|sink] [--sinks 4] [--window W] [--kv-dtype f32]
//                    [--json]
//
// The prompt is prefilled into a KV cache, then one token at a time is decoded against it.
// The model defaults to the embedded one. The dense cache (default) keeps every token, so prompt
// plus generated tokens must fit the model's context: a request that cannot is refused before
// any work (a usage error naming the limit), never cut short. The window and sink policies
// (cache/streaming_cache.h) keep W tokens and generate without a length limit at constant memory.
// Generation stops early only when the model produces its end-of-text token, and says so.
// --json prints one JSON document (prompt and generated token ids and text, the policy) instead
// of the streamed text.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_model.h"
#include "commands.h"
#include "cache/streaming_cache.h"
#include "inference/generate.h"

namespace attnlab::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer, prompt, text, policy = "dense";
  int64_t max_tokens = 100, sinks = 4, window = 0;
  std::string kv_dtype = "f32";
  SamplerConfig sampler{0.8f, 40, 0.95f, 1};
  bool json = false;
  CLI::Option *window_opt = nullptr, *sinks_opt = nullptr;
};

void Run(const GenerateOptions& o) {
  // Usage errors (exit 2), before any work: values out of range, then options that do not
  // apply to the chosen policy.
  if (o.max_tokens < 1) {
    throw UsageError("--max-tokens must be >= 1, got " + std::to_string(o.max_tokens));
  }
  if (Status st = ValidateSampler(o.sampler); !st.ok()) throw UsageError(st.message());
  CheckWindowAndSinks(o.window_opt->count() > 0, o.window, o.sinks_opt->count() > 0, o.sinks,
                      o.policy == "h2o" || o.policy == "tova" || o.policy == "snapkv" ? 0 : 1);
  auto policy = ParseCachePolicy(o.policy);
  if (!policy.ok()) throw UsageError("--policy: " + policy.status().message());
  if (policy.value() == CachePolicy::kRecompute) {
    throw UsageError("--policy recompute is an evaluation baseline (attnlab stream), not a "
                     "cache; use dense, window, sink, h2o, tova or snapkv");
  }
  const bool bounded = policy.value() != CachePolicy::kDense;
  // Options that do not apply to the chosen policy are refused, not ignored.
  if (!bounded && o.window_opt->count() > 0) {
    throw UsageError("--window applies to --policy window and sink; the dense cache (the "
                     "default) keeps every token (add --policy sink or --policy window)");
  }
  const bool scored = IsScoredPolicy(policy.value());
  if (policy.value() != CachePolicy::kSinkWindow && !scored && o.sinks_opt->count() > 0) {
    throw UsageError("--sinks applies to the sink, h2o, tova and snapkv policies (the " + o.policy +
                     " policy pins no tokens)");
  }
  Result<KvDtype> kv_dtype = ParseKvDtype(o.kv_dtype);
  if (!kv_dtype.ok()) throw UsageError("--kv-dtype: " + kv_dtype.status().message());
  if (bounded && *kv_dtype != KvDtype::kF32) {
    throw UsageError("--kv-dtype " + o.kv_dtype + " needs --policy dense (the streaming caches "
                     "hold fp32)");
  }
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/true);
  Gpt& g = *m.gpt;
  const ModelConfig& c = g.config();
  const std::string prompt = o.text.empty() ? o.prompt : ReadTextInput(o.text, "");
  auto enc = m.tokenizer->Encode(prompt);
  Check(enc.status());
  std::vector<int32_t> ids;
  const bool bos = TrainedWithBos(m);
  if (bos || prompt.empty()) {
    if (!m.tokenizer->bos_id()) throw CommandError("an empty prompt needs a tokenizer with a BOS token");
    ids.push_back(*m.tokenizer->bos_id());
  }
  ids.insert(ids.end(), enc.value().begin(), enc.value().end());
  const int64_t P = static_cast<int64_t>(ids.size());
  GenerationConfig gc;
  gc.max_new_tokens = o.max_tokens;
  gc.sampler = o.sampler;
  gc.policy = policy.value();
  // The attention-scored policies pin nothing unless asked (their papers' setting).
  gc.n_sink = scored && o.sinks_opt->count() == 0 ? 0 : o.sinks;
  gc.window = bounded && o.window_opt->count() > 0 ? o.window : 0;
  gc.kv_dtype = *kv_dtype;
  gc.eos = m.tokenizer->eos_id();
  if (bounded) {
    const Status st = ValidateStreamingConfig(GenerationCacheConfig(gc, c), c);
    if (!st.ok()) throw UsageError(st.message());
  } else {
    // The dense cache holds the prompt and every generated token: all of them must fit the
    // context. Refused up front (rather than stopping early with success) so that a script
    // never mistakes a truncated text for the one it asked for.
    const std::string prompt_desc =
        "the prompt is " + std::to_string(P) + " token" + (P == 1 ? "" : "s") +
        (bos ? " (with the BOS token)" : "");
    if (P >= c.context) {
      throw UsageError(prompt_desc + "; the model's context is " + std::to_string(c.context) +
                       ", so the dense cache has no room to generate: use --policy sink (or "
                       "window) for unlimited length at constant memory");
    }
    if (P + o.max_tokens > c.context) {
      throw UsageError("--max-tokens " + std::to_string(o.max_tokens) + " does not fit the dense "
                       "cache: " + prompt_desc + " and the model's context is " +
                       std::to_string(c.context) + ", so at most " + std::to_string(c.context - P) +
                       " tokens can be generated; use --max-tokens " + std::to_string(c.context - P) +
                       " or less, or --policy sink (or window) to generate without a length "
                       "limit at constant memory");
    }
  }
  const int64_t n_new = o.max_tokens;
  if (!o.json) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  }
  std::string generated_text;
  Result<Generation> gen = Generate(g, ids, gc, [&](int32_t next) -> Status {
    auto bytes = m.tokenizer->TokenBytes(next);
    ATTNLAB_RETURN_IF_ERROR(bytes.status());
    generated_text += bytes.value();
    if (!o.json) {
      std::fwrite(bytes.value().data(), 1, bytes.value().size(), stdout);
      std::fflush(stdout);
    }
    return Status::Ok();
  });
  Check(gen.status());
  const std::vector<int32_t>& generated = gen->tokens;
  const bool stopped_at_eos = gen->stopped_at_eos;
  const double prefill = gen->prefill_seconds;
  const double decode = gen->decode_seconds;
  const int64_t produced = static_cast<int64_t>(generated.size());
  const double tps = decode > 0 ? produced / decode : 0.0;
  if (o.json) {
    nlohmann::json j{
        {"model", m.path},
        {"policy", o.policy},
        {"window", bounded ? nlohmann::json(GenerationCacheConfig(gc, c).window) : nlohmann::json()},
        {"sinks", gc.policy == CachePolicy::kSinkWindow || IsScoredPolicy(gc.policy)
                      ? nlohmann::json(gc.n_sink)
                                                                    : nlohmann::json()},
        {"kv_dtype", o.kv_dtype},
        {"context", c.context},
        {"sampler",
         {{"temperature", std::round(o.sampler.temperature * 1e6) / 1e6},  // not 0.800000011...
          {"top_k", o.sampler.top_k},
          {"top_p", std::round(o.sampler.top_p * 1e6) / 1e6},
          {"seed", o.sampler.seed}}},
        {"prompt", prompt},
        {"prompt_file", o.text.empty() ? nlohmann::json() : nlohmann::json(o.text)},
        {"prompt_tokens", ids},
        {"bos", bos || prompt.empty()},
        {"max_tokens", n_new},
        {"generated_tokens", generated},
        {"generated_text", generated_text},
        {"tokens_generated", produced},
        {"stop_reason", stopped_at_eos ? "end-of-text" : "max-tokens"},
        {"prefill_seconds", prefill},
        {"decode_tokens_per_s", tps},
        {"cache_tokens", gen->cache_tokens},
        {"cache_bytes", gen->cache_bytes}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);  // the text ends before the statistics on stderr
  if (stopped_at_eos) {
    std::fprintf(stderr, "[stopped early: the model produced its end-of-text token after %ld of "
                         "%ld tokens]\n",
                 static_cast<long>(produced), static_cast<long>(n_new));
  }
  std::fprintf(stderr,
               "[%ld prompt tokens in %.3f s; %ld tokens generated at %.1f tokens/s; cache %s, "
               "%ld tokens, %.1f MiB]\n",
               static_cast<long>(P), prefill, static_cast<long>(produced), tps, o.policy.c_str(),
               static_cast<long>(gen->cache_tokens), gen->cache_bytes / 1048576.0);
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a model (streams tokens)");
  AddModelOptions(cmd, &o->model, &o->tokenizer);
  CLI::Option* prompt =
      cmd->add_option("--prompt", o->prompt, "literal text to continue (default: start from BOS)");
  cmd->add_option("--text", o->text, "a text file to continue (instead of --prompt)")
      ->excludes(prompt);
  cmd->add_option("--max-tokens", o->max_tokens,
                  "tokens to generate, >= 1 (100; fewer only if the model ends the text). With "
                  "the dense cache prompt + N must fit the model's context");
  cmd->add_option("--temperature", o->sampler.temperature, "0 = greedy (0.8)");
  cmd->add_option("--top-k", o->sampler.top_k, "sample from the k most likely (40; 0 = all)");
  cmd->add_option("--top-p", o->sampler.top_p, "nucleus mass in (0, 1] (0.95)");
  cmd->add_option("--seed", o->sampler.seed, "sampling seed (1)");
  cmd->add_option("--policy", o->policy,
                  "KV cache: dense (default; prompt + tokens <= context), window, sink, h2o, "
                  "tova, snapkv (no length limit; docs/KV_POLICIES.md)");
  o->sinks_opt = cmd->add_option("--sinks", o->sinks,
                                 "pinned first tokens: --policy sink (4), h2o, tova and snapkv (0)");
  cmd->add_option("--kv-dtype", o->kv_dtype,
                  "KV cache storage: f32 (default), bf16 or f16 (--policy dense)");
  o->window_opt = cmd->add_option("--window", o->window,
                                  "tokens the window/sink cache holds, sinks included, >= 1 "
                                  "(default: the model's context; not with --policy dense)");
  cmd->add_flag("--json", o->json,
                "print one JSON document (prompt and generated token ids and text, policy) "
                "instead of the streamed text");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
