// `attnlab logits`: the logits of a token sequence as a .npy array [T, vocab], for comparing
// attnlab with other implementations.
//
//   attnlab logits [--model M] (--tokens 1,2,3 | --text FILE | --prompt STR) [--max-tokens N]
//                  --out DIR
//
// Writes DIR/logits.npy (float32 [T, vocab]): row t holds the logits after tokens 0..t, one
// forward over the whole sequence (no BOS is added: pass it in --tokens if the model wants it;
// --json prints the token ids and the model's BOS).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_model.h"
#include "commands.h"
#include "core/npy.h"

namespace attnlab::cli {
namespace {

struct LogitsOptions {
  std::string model, tokenizer, tokens, text, prompt, out;
  int64_t max_tokens = 0;
  bool json = false;
};

void Run(const LogitsOptions& o) {
  if (!o.tokens.empty() + !o.text.empty() + !o.prompt.empty() != 1) {
    throw UsageError("give exactly one of --tokens, --text and --prompt");
  }
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/o.tokens.empty());
  Gpt& g = *m.gpt;
  std::vector<int32_t> ids;
  if (!o.tokens.empty()) {
    ids = ParseTokenList(o.tokens);
  } else {
    auto enc = m.tokenizer->Encode(ReadTextInput(o.text, o.prompt));
    Check(enc.status());
    ids = std::move(enc).value();
  }
  if (o.max_tokens > 0 && static_cast<int64_t>(ids.size()) > o.max_tokens) ids.resize(o.max_tokens);
  if (ids.empty()) throw CommandError("the input has no tokens");
  const int64_t T = static_cast<int64_t>(ids.size());
  Check(g.Forward(ids.data(), nullptr, 1, T, nullptr));
  const int64_t V = g.config().vocab_size, off = g.last_len() - T;  // skip a sink token row
  const int64_t shape[2] = {T, V};
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw CommandError("cannot create " + o.out + ": " + ec.message());
  const std::string path = (std::filesystem::path(o.out) / "logits.npy").string();
  Check(WriteNpyFloat(path, g.logits() + off * V, shape), "--out");
  if (o.json) {
    nlohmann::ordered_json j;
    j["out"] = path;
    j["shape"] = {T, V};
    j["tokens"] = ids;
    // The BOS the model was trained with (null if none): what eval and analyze put first.
    j["bos"] = TrainedWithBos(m) ? nlohmann::json(*m.tokenizer->bos_id()) : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("wrote logits [%ld, %ld] to %s\n", static_cast<long>(T), static_cast<long>(V),
                path.c_str());
  }
}

}  // namespace

void RegisterLogitsCommand(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of a token sequence as .npy");
  AddModelOptions(cmd, &o->model, &o->tokenizer);
  cmd->add_option("--tokens", o->tokens, "comma-separated token ids");
  cmd->add_option("--text", o->text, "a text file to tokenise instead");
  cmd->add_option("--prompt", o->prompt, "a text given here to tokenise instead");
  cmd->add_option("--max-tokens", o->max_tokens, "use at most the first N tokens (default: all)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", o->out, "directory for logits.npy [T, vocab] (required)")->required();
  cmd->add_flag("--json", o->json, "print {out, shape, tokens, bos} as JSON");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
