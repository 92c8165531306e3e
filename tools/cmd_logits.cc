// `attnlab logits`: the logits of a token sequence as a .npy array [T, vocab], for comparing
// attnlab with other implementations.
//
//   attnlab logits [--model M] (--tokens 1,2,3 | --text FILE) --out L.npy
#include <cstdio>
#include <string>

#include "cli_model.h"
#include "commands.h"
#include "core/npy.h"

namespace attnlab::cli {
namespace {

struct LogitsOptions {
  std::string model, tokenizer, tokens, text, out;
};

void Run(const LogitsOptions& o) {
  if (o.tokens.empty() == o.text.empty()) throw CommandError("give exactly one of --tokens and --text");
  CliModel m = LoadCliModel(o.model, o.tokenizer, /*need_tokenizer=*/!o.text.empty());
  Gpt& g = *m.gpt;
  std::vector<int32_t> ids;
  if (!o.tokens.empty()) {
    ids = ParseTokenList(o.tokens);
  } else {
    auto enc = m.tokenizer->Encode(ReadTextInput(o.text, ""));
    Check(enc.status());
    ids = std::move(enc).value();
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  Check(g.Forward(ids.data(), nullptr, 1, T, nullptr));
  const int64_t V = g.config().vocab_size, off = g.last_len() - T;  // skip a sink token row
  const int64_t shape[2] = {T, V};
  Check(WriteNpyFloat(o.out, g.logits() + off * V, shape), "--out");
  std::printf("wrote logits [%ld, %ld] to %s\n", static_cast<long>(T), static_cast<long>(V),
              o.out.c_str());
}

}  // namespace

void RegisterLogitsCommand(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of a token sequence as .npy");
  cmd->add_option("--model", o->model, "checkpoint dir, GPT-2 safetensors, or llm.c .bin (default: embedded)");
  cmd->add_option("--tokenizer", o->tokenizer, "override: byte, gpt2, or a vocabulary file");
  cmd->add_option("--tokens", o->tokens, "comma-separated token ids");
  cmd->add_option("--text", o->text, "a text file to tokenise instead");
  cmd->add_option("--out", o->out, "output .npy file [T, vocab]")->required();
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
