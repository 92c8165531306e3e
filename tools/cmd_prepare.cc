// `attnlab prepare`: a corpus -> a data directory the trainer reads.
//
//   attnlab prepare [--corpus brown | --text FILE] [--tokenizer byte|gpt2|bpe:N|VOCAB.json]
//                   --out DIR [--val-every 20]
//
// Writes DIR/train.tok, DIR/val.tok (token_data.h), DIR/tokenizer.json (tokenizer_spec.h; with
// bpe:N a vocabulary of N merges is first learnt from the training documents), and
// DIR/corpus.json (document and token counts, the unigram baseline loss).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/atomic_file.h"
#include "core/resources.h"
#include "tokenizer/tokenizer_spec.h"
#include "train/corpus.h"

namespace attnlab::cli {
namespace {

struct PrepareOptions {
  std::string corpus = "brown", text, tokenizer = "byte", out;
  int64_t val_every = 20;
  bool json = false;
};

void Run(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> docs;
  std::string source;
  if (!o.text.empty()) {
    auto r = LoadTextCorpus(o.text);
    Check(r.status());
    docs = std::move(r).value();
    source = o.text;
  } else if (o.corpus == "brown") {
    const std::string dir = FindResource(kBrownCorpusPath);
    if (dir.empty()) {
      throw CommandError(std::string("the Brown corpus (") + kBrownCorpusPath +
                         ") is not installed; run scripts/setup.sh");
    }
    auto r = LoadBrownCorpus(dir);
    Check(r.status());
    docs = std::move(r).value();
    source = "brown (" + dir + ")";
  } else {
    throw UsageError("--corpus: unknown corpus '" + o.corpus + "' (use brown, or --text FILE)");
  }
  nlohmann::json spec;
  if (o.tokenizer.rfind("bpe:", 0) == 0) {
    int32_t merges = 0;
    try {
      merges = std::stoi(o.tokenizer.substr(4));
    } catch (const std::exception&) {
      merges = -1;
    }
    if (merges < 1) throw UsageError("--tokenizer bpe:N needs a positive number of merges");
    BpeTrainer trainer;
    for (size_t i = 0; i < docs.size(); ++i) {
      if (static_cast<int64_t>(i % o.val_every) != o.val_every - 1) trainer.AddText(docs[i]);
    }
    BpeTrainerOptions topts;
    topts.num_merges = merges;
    auto v = trainer.Train(topts);
    Check(v.status(), "training the BPE vocabulary");
    auto text = SerializeBpeVocabulary(v.value());
    Check(text.status());
    spec = {{"type", "bpe"}, {"vocabulary", nlohmann::json::parse(text.value())}};
    std::fprintf(stderr, "learnt %zu BPE merges (vocabulary %d)\n", v.value().merges.size(),
                 v.value().vocab_size());
  } else {
    auto s = TokenizerJsonFromFlag(o.tokenizer);
    Check(s.status(), "--tokenizer");
    spec = s.value();
  }
  auto tok = TokenizerFromJson(spec);
  Check(tok.status());
  auto stats = WriteCorpusTokens(docs, *tok.value(), o.val_every, o.out);
  Check(stats.status());
  const CorpusStats& st = stats.value();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json info{{"source", source},
                      {"tokenizer", tok.value()->name()},
                      {"vocab_size", tok.value()->vocab_size()},
                      {"documents", st.documents},
                      {"train_documents", st.train_documents},
                      {"val_documents", st.val_documents},
                      {"bytes", st.bytes},
                      {"train_tokens", st.train_tokens},
                      {"val_tokens", st.val_tokens},
                      {"unigram_val_loss", st.unigram_val_loss}};
  Check(WriteFileAtomically(o.out + "/tokenizer.json", spec.dump()));
  Check(WriteFileAtomically(o.out + "/corpus.json", info.dump(2) + "\n"));
  if (o.json) {
    nlohmann::json j = info;
    j["out"] = o.out;
    j["seconds"] = secs;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "prepared %s: %ld documents, %.1f MB, tokenizer %s (%d ids)\n"
      "  train %ld tokens, validation %ld tokens; unigram baseline %.3f nats/token\n"
      "  wrote %s/{train.tok,val.tok,val.txt,tokenizer.json,corpus.json} in %.1f s\n",
      source.c_str(), static_cast<long>(st.documents), st.bytes / 1e6,
      tok.value()->name().c_str(), tok.value()->vocab_size(), static_cast<long>(st.train_tokens),
      static_cast<long>(st.val_tokens), st.unigram_val_loss, o.out.c_str(), secs);
}

}  // namespace

void RegisterPrepareCommand(CLI::App& app) {
  auto o = std::make_shared<PrepareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "prepare", "Tokenise a corpus (the Brown corpus or a text file) into a data directory");
  cmd->add_option("--corpus", o->corpus, "built-in corpus: brown (default)");
  cmd->add_option("--text", o->text, "a text file instead (documents split at blank lines)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "byte (default), gpt2, bpe:N (learn N merges), or an attnlab vocabulary file");
  cmd->add_option("--out", o->out, "output directory")->required();
  cmd->add_option("--val-every", o->val_every, "every n-th document goes to validation (20)")
      ->check(CLI::Range(2, 1000000));
  cmd->add_flag("--json", o->json, "print the corpus statistics as JSON");
  cmd->callback([o] { Run(*o); });
}

}  // namespace attnlab::cli
