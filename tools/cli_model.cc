#include "cli_model.h"

#include <cstdio>

#include "commands.h"
#include "core/atomic_file.h"
#include "core/resources.h"
#include "tokenizer/tokenizer_spec.h"

namespace attnlab::cli {

CliModel LoadCliModel(const std::string& model_flag, const std::string& tokenizer_flag,
                      bool need_tokenizer) {
  std::string path = model_flag;
  if (path.empty()) {
    path = FindResource(kDefaultModelPath);
    if (path.empty()) {
      throw CommandError(std::string("no --model given and the embedded default (") +
                         kDefaultModelPath + ") was not found");
    }
  }
  // Every command that loads through here only runs the model: 16-bit weights stay 16-bit.
  auto loaded = LoadAnyModel(path, LoadOptions{.keep_stored = true});
  Check(loaded.status(), "--model " + path);
  CliModel m;
  m.path = loaded.value().path;
  m.format = loaded.value().format;
  m.meta = loaded.value().meta;
  for (const std::string& note : loaded.value().notes) {
    std::fprintf(stderr, "note: %s\n", note.c_str());
  }
  auto gpt = MakeGpt(std::move(loaded).value());
  Check(gpt.status());
  m.gpt = std::move(gpt).value();
  Result<std::unique_ptr<Tokenizer>> tok = Status::NotFound("no tokenizer");
  if (!tokenizer_flag.empty()) {
    tok = LoadTokenizer(tokenizer_flag);  // the one parser of --tokenizer (attnlab/tokenizer.h)
    Check(tok.status(), "--tokenizer");
  } else if (m.meta.is_object() && m.meta.contains("tokenizer")) {
    tok = TokenizerFromJson(m.meta["tokenizer"]);
    Check(tok.status(), "the model's tokenizer");
  } else if (m.format == "hf-gpt2" || m.format == "llm.c") {
    tok = LoadBundledGpt2Tokenizer();
    if (need_tokenizer) Check(tok.status());
  }
  if (tok.ok()) {
    m.tokenizer = std::move(tok).value();
    const int64_t v = m.gpt->config().vocab_size;
    // Released models pad their embedding past the tokenizer's ids (Qwen2.5: 151936 rows for
    // 151665 ids), and so does a checkpoint fine-tuned from one (train --from, meta "from"):
    // there the tokenizer only has to fit inside the model's vocabulary; elsewhere a different
    // size means a different tokenizer.
    const bool padded = m.format.rfind("hf-", 0) == 0 || m.format == "gguf" ||
                        (m.meta.is_object() && m.meta.contains("from"));
    if (padded ? m.tokenizer->vocab_size() > v : m.tokenizer->vocab_size() != v) {
      throw CommandError("the tokenizer (" + m.tokenizer->name() + ", " +
                         std::to_string(m.tokenizer->vocab_size()) +
                         " ids) does not match the model's vocabulary of " + std::to_string(v));
    }
  } else if (need_tokenizer) {
    throw CommandError("the model carries no tokenizer; pass --tokenizer byte|gpt2|VOCAB.json");
  }
  return m;
}

bool TrainedWithBos(const CliModel& m) {
  if (!m.tokenizer || !m.tokenizer->bos_id()) return false;
  // A released model whose tokenizer prepends BOS to every prompt (Llama, Mistral: their
  // tokenizer_config.json's add_bos_token or post-processor) was trained that way.
  if (m.tokenizer->adds_bos()) return true;
  if (!m.meta.is_object()) return false;
  auto it = m.meta.find("trainer");
  if (it == m.meta.end() || !it->is_object()) return false;
  auto b = it->find("bos");
  return b != it->end() && b->is_number_integer() && b->get<int64_t>() >= 0;
}

TextCheck CheckText(std::string_view bytes) {
  TextCheck c;
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (b == 0) ++c.nul_bytes;
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= bytes.size();
    for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(bytes[i + k]) >> 6) == 0x2;
    if (!ok) {
      ++c.invalid_utf8;
      len = 1;
    }
    i += len;
  }
  return c;
}

std::string ReadTextInput(const std::string& text_file, const std::string& prompt) {
  if (!text_file.empty() && !prompt.empty()) throw UsageError("give --text or --prompt, not both");
  if (text_file.empty() && prompt.empty()) throw UsageError("give --text FILE or --prompt STR");
  if (!prompt.empty()) return prompt;
  auto r = ReadFileToString(text_file, int64_t{4} << 30);
  Check(r.status(), "--text");
  if (r.value().empty()) throw CommandError("--text " + text_file + " is empty");
  // A binary file tokenises fine with a byte-level tokenizer and gets a meaningless score, so it
  // is refused; a text with a few bytes of another encoding gets a warning.
  const TextCheck c = CheckText(r.value());
  const double n = static_cast<double>(r.value().size());
  if (c.nul_bytes > 0 || c.invalid_utf8 > 0.1 * n) {
    throw CommandError("--text " + text_file + " does not look like text: " +
                       std::to_string(c.nul_bytes) + " NUL bytes and " +
                       std::to_string(c.invalid_utf8) + " invalid UTF-8 bytes in " +
                       std::to_string(r.value().size()) + " (give a UTF-8 text file)");
  }
  if (c.invalid_utf8 > 0) {
    std::fprintf(stderr, "warning: --text %s has %ld bytes that are not valid UTF-8 (of %ld)\n",
                 text_file.c_str(), static_cast<long>(c.invalid_utf8),
                 static_cast<long>(r.value().size()));
  }
  return std::move(r).value();
}

void CheckWindowAndSinks(bool window_given, int64_t window, bool sinks_given, int64_t sinks,
                         int64_t min_sinks) {
  if (window_given && window < 1) {
    throw UsageError("--window must be >= 1, got " + std::to_string(window) +
                     " (omit --window for the model's context)");
  }
  if (sinks_given && sinks < min_sinks) {
    throw UsageError("--sinks must be >= " + std::to_string(min_sinks) + ", got " +
                     std::to_string(sinks) +
                     (min_sinks > 0 ? " (--policy window keeps no sinks)" : ""));
  }
}

std::vector<int32_t> ParseTokenList(const std::string& s) {
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX) {
      throw CommandError("--tokens: expected non-negative integers separated by commas, got '" +
                         item + "'");
    }
    out.push_back(static_cast<int32_t>(v));
    pos = end + 1;
  }
  return out;
}

}  // namespace attnlab::cli
