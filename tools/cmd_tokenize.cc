// `attnlab tokenize`: encode, decode, and train tokenizers (attnlab/tokenizer.h).
//
//   encode   attnlab tokenize (--tokenizer SPEC | --encoder encoder.json --vocab vocab.bpe)
//                             (--prompt STR | --text FILE | --batch F) [--json | --show]
//              SPEC: "byte", "gpt2", "gpt2:<dir>", "hf:<path>", a directory (GPT-2's files, a
//              Hugging Face tokenizer.json, or an attnlab vocab.json), a tokenizer.json file,
//              or an attnlab vocabulary file (LoadTokenizer; Hugging Face files:
//              src/tokenizer/tokenizer_hf.h). Encoding never adds bos (--json reports "bos" and
//              "adds_bos", whether the model's tokenizer would prepend it). --text - reads stdin. Prints the ids separated by
//              spaces; --json prints {"tokenizer": ..., "bytes": n, "ids": [...]}; --show one
//              "id<TAB>token" line per token (token bytes rendered as GPT-2 does: ' ' -> 'Ġ').
//              --batch F: F holds a JSON array of strings; prints a JSON array of id arrays.
//   decode   attnlab tokenize (--tokenizer ... | --encoder ... --vocab ...) --ids "15496 995"
//              writes the bytes to stdout, exactly (no newline added).
//   train    attnlab tokenize --train CORPUS [CORPUS...] --merges N --out DIR
//                             [--min-count C] [--special TOKEN ...] [--json]
//              learns up to N merges (BpeTrainer) and writes attnlab's vocabulary file
//              DIR/vocab.json (--tokenizer DIR then loads it); prints
//              the merges learnt, the vocabulary size and the time taken.
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/tokenizer.h"
#include "cli_model.h"
#include "commands.h"
#include "core/atomic_file.h"

namespace attnlab::cli {
namespace {

constexpr int64_t kMaxInputBytes = int64_t{16} << 30;

struct TokenizeOptions {
  std::string tokenizer, encoder, vocab, model;
  std::string prompt, text, batch, ids;
  CLI::Option* prompt_opt = nullptr;
  bool json = false, show = false;
  std::vector<std::string> train;
  int32_t merges = BpeTrainerOptions{}.num_merges;
  int64_t min_count = BpeTrainerOptions{}.min_pair_count;
  std::vector<std::string> specials;
  CLI::Option* specials_opt = nullptr;
  std::string out;
};

std::string ReadInput(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  Result<std::string> r = ReadFileToString(path, kMaxInputBytes);
  Check(r.status());
  return std::move(r).value();
}

std::unique_ptr<Tokenizer> OpenTokenizer(const TokenizeOptions& o) {
  const bool files = !o.encoder.empty() || !o.vocab.empty();
  if (!o.model.empty()) {
    if (files || !o.tokenizer.empty()) throw UsageError("give --model or a tokenizer, not both");
    return std::move(LoadCliModel(o.model == "default" ? "" : o.model, "", true).tokenizer);
  }
  if (files && !o.tokenizer.empty()) {
    throw UsageError("give either --tokenizer or --encoder with --vocab, not both");
  }
  if (files && (o.encoder.empty() || o.vocab.empty())) {
    throw UsageError("--encoder and --vocab go together (GPT-2's encoder.json and vocab.bpe)");
  }
  if (!files && o.tokenizer.empty()) {
    throw UsageError(
        "no tokenizer: give --tokenizer SPEC (byte, gpt2, gpt2:<dir>, hf:<path>, a directory, a "
        "Hugging Face tokenizer.json, an attnlab vocabulary file) or --encoder encoder.json "
        "--vocab vocab.bpe");
  }
  Result<std::unique_ptr<Tokenizer>> t =
      files ? LoadGpt2Tokenizer(o.encoder, o.vocab) : LoadTokenizer(o.tokenizer);
  Check(t.status());
  return std::move(t).value();
}

std::vector<int32_t> EncodeOrThrow(const Tokenizer& tok, std::string_view text) {
  Result<std::vector<int32_t>> ids = tok.Encode(text);
  Check(ids.status());
  return std::move(ids).value();
}

void RunTrain(const TokenizeOptions& o) {
  if (o.out.empty()) throw UsageError("--train needs --out DIR (the vocabulary goes to DIR/vocab.json)");
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw CommandError("cannot create " + o.out + ": " + ec.message());
  const std::string vocab_path = (std::filesystem::path(o.out) / "vocab.json").string();
  BpeTrainerOptions opts;
  opts.num_merges = o.merges;
  opts.min_pair_count = o.min_count;
  if (o.specials_opt->count() > 0) opts.special_tokens = o.specials;
  const auto t0 = std::chrono::steady_clock::now();
  BpeTrainer trainer;
  int64_t bytes = 0;
  for (const std::string& path : o.train) {
    const std::string text = ReadInput(path);
    bytes += static_cast<int64_t>(text.size());
    trainer.AddText(text);
  }
  const double count_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BpeTrainerStats stats;
  Result<BpeVocabulary> vocab = trainer.Train(opts, &stats);
  Check(vocab.status());
  Check(SaveBpeVocabulary(*vocab, vocab_path));
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (o.json) {
    nlohmann::ordered_json j;
    j["out"] = vocab_path;
    j["corpus_bytes"] = bytes;
    j["pieces"] = stats.pieces;
    j["distinct_pieces"] = stats.distinct_pieces;
    j["merges"] = vocab->merges.size();
    j["vocab_size"] = vocab->vocab_size();
    j["skipped_pairs"] = stats.skipped_pairs;
    j["pretokenize_seconds"] = count_s;
    j["train_seconds"] = stats.seconds;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("corpus: %.2f MiB, %lld pieces (%lld distinct)\n", mib,
                static_cast<long long>(stats.pieces),
                static_cast<long long>(stats.distinct_pieces));
    std::printf("learnt %zu merges%s: %d ids (256 bytes + merges + %zu special)\n",
                vocab->merges.size(),
                static_cast<int32_t>(vocab->merges.size()) < o.merges
                    ? " (stopped early: no pair occurs --min-count times)"
                    : "",
                vocab->vocab_size(), vocab->special_tokens.size());
    std::printf("time: pre-tokenise + count %.2f s, merges %.2f s, total %.2f s\n", count_s,
                stats.seconds, count_s + stats.seconds);
    std::printf("wrote %s\n", vocab_path.c_str());
  }
}

void RunDecode(const TokenizeOptions& o) {
  std::unique_ptr<Tokenizer> tok = OpenTokenizer(o);
  std::vector<int32_t> ids;
  std::string list = o.ids;
  for (char& c : list) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream in(list);
  std::string word;
  while (in >> word) {
    try {
      size_t used = 0;
      const long long v = std::stoll(word, &used);
      if (used != word.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument("");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw CommandError("--ids: \"" + word + "\" is not a token id");
    }
  }
  Result<std::string> text = tok->Decode(ids);
  Check(text.status());
  std::fwrite(text->data(), 1, text->size(), stdout);
}

void PrintIds(const std::vector<int32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
}

void RunEncode(const TokenizeOptions& o) {
  const int inputs = (o.prompt_opt->count() > 0) + !o.text.empty() + !o.batch.empty();
  if (inputs != 1) {
    throw UsageError(
        "give exactly one of --prompt STR, --text FILE, --batch FILE (or --ids to decode, "
        "--train to train)");
  }
  std::unique_ptr<Tokenizer> tok = OpenTokenizer(o);
  if (!o.batch.empty()) {
    const nlohmann::json in = nlohmann::json::parse(ReadInput(o.batch), nullptr, false);
    if (!in.is_array()) throw CommandError(o.batch + ": expected a JSON array of strings");
    nlohmann::json out = nlohmann::json::array();
    for (const nlohmann::json& s : in) {
      if (!s.is_string()) throw CommandError(o.batch + ": expected a JSON array of strings");
      out.push_back(EncodeOrThrow(*tok, s.get_ref<const std::string&>()));
    }
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  const std::string text = o.prompt_opt->count() > 0 ? o.prompt : ReadInput(o.text);
  const std::vector<int32_t> ids = EncodeOrThrow(*tok, text);
  if (o.json) {
    nlohmann::ordered_json j;
    j["tokenizer"] = tok->name();
    j["bos"] = tok->bos_id() ? nlohmann::json(*tok->bos_id()) : nlohmann::json(nullptr);
    j["adds_bos"] = tok->adds_bos();
    j["bytes"] = text.size();
    j["ids"] = ids;
    std::printf("%s\n", j.dump().c_str());
  } else if (o.show) {
    for (const int32_t id : ids) {
      Result<std::string> bytes = tok->TokenBytes(id);
      Check(bytes.status());
      std::printf("%d\t%s\n", id, Gpt2RenderBytes(*bytes).c_str());
    }
  } else {
    PrintIds(ids);
  }
}

}  // namespace

void RegisterTokenizeCommand(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  TokenizeOptions& o = *opts;
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode text to token ids (GPT-2 BPE, byte, an attnlab BPE vocabulary, or a Hugging Face "
      "tokenizer.json), decode ids, or train a byte-level BPE vocabulary on a corpus.");
  cmd->add_option("--tokenizer", o.tokenizer,
                  "byte | gpt2 | gpt2:<dir> | hf:<path> | <dir> | <tokenizer.json> | "
                  "<attnlab vocab.json>");
  cmd->add_option("--model", o.model,
                  "use this model's tokenizer (\"default\": the embedded model's)");
  cmd->add_option("--encoder", o.encoder, "GPT-2 encoder.json (with --vocab)");
  cmd->add_option("--vocab", o.vocab, "GPT-2 vocab.bpe (with --encoder)");
  o.prompt_opt = cmd->add_option("--prompt", o.prompt, "the text to encode, given here");
  cmd->add_option("--text", o.text, "encode this file's bytes (- for stdin)");
  cmd->add_option("--batch", o.batch,
                  "a file holding a JSON array of strings: prints a JSON array of id arrays");
  cmd->add_option("--ids", o.ids, "decode these ids (\"15496 995\" or \"[15496, 995]\")");
  cmd->add_flag("--json", o.json, "print JSON");
  cmd->add_flag("--show", o.show, "print one 'id<TAB>token' line per token");
  cmd->add_option("--train", o.train, "train a BPE vocabulary on these corpus files")
      ->expected(1, -1);
  cmd->add_option("--merges", o.merges, "merges to learn (default 3839: 4096 ids in all)")
      ->check(CLI::Range(0, kMaxBpeVocabSize));
  cmd->add_option("--min-count", o.min_count, "stop when the best pair occurs fewer times (2)")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
  o.specials_opt =
      cmd->add_option("--special", o.specials, "special tokens (default: <|endoftext|>)");
  cmd->add_option("--out", o.out, "directory where --train writes vocab.json");
  cmd->callback([opts] {
    const TokenizeOptions& o = *opts;
    if (!o.train.empty()) {
      RunTrain(o);
    } else if (!o.ids.empty()) {
      RunDecode(o);
    } else {
      RunEncode(o);
    }
  });
}

}  // namespace attnlab::cli
