// A GGUF file's embedded vocabulary (tokenizer_hf.h: EmbeddedVocabulary) -> HfSpec.
//   model "gpt2": byte-level BPE by merge rank, the pre-tokenizer chosen by tokenizer.ggml.pre.
//   model "llama": llama.cpp's SPM tokenizer (merges by score, byte fallback), whose rule is
//   described in tokenizer_hf_model.cc.
#include <string>

#include "tokenizer/tokenizer_hf.h"
#include "tokenizer/tokenizer_hf_model.h"

namespace attnlab {

using hf_internal::Family;
using hf_internal::HfSpec;
using hf_internal::QuoteForError;

namespace {

// Fills spec.family-specific fields from `pre` and the merges (model "gpt2").
Status ConfigureGpt2(const EmbeddedVocabulary& v, HfSpec* spec) {
  spec->family = Family::kByteLevel;
  if (v.pre == "gpt-2" || v.pre == "default" || v.pre.empty()) {
    spec->split = HfRegex::kGpt2;
    spec->name = "gguf-bpe-gpt2";
  } else if (v.pre == "llama-bpe" || v.pre == "llama3") {
    spec->split = HfRegex::kLlama3;
    spec->ignore_merges = true;  // as llama.cpp does for this pre-tokenizer
    spec->name = "gguf-bpe-llama3";
  } else if (v.pre == "qwen2") {
    spec->split = HfRegex::kQwen2;
    spec->name = "gguf-bpe-qwen2";
  } else {
    return Status::InvalidArgument(
        spec->source + ": tokenizer.ggml.pre " + QuoteForError(v.pre) +
        " is not supported by attnlab (gpt-2, default, llama-bpe, llama3, qwen2)");
  }
  if (v.merges.size() > static_cast<size_t>(kMaxBpeVocabSize)) {
    return Status::Corrupt(spec->source + ": " + std::to_string(v.merges.size()) +
                           " merges exceed " + std::to_string(kMaxBpeVocabSize));
  }
  spec->merges.reserve(v.merges.size());
  for (size_t k = 0; k < v.merges.size(); ++k) {
    const std::string& s = v.merges[k];
    const size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
        s.find(' ', space + 1) != std::string::npos) {
      return Status::Corrupt(spec->source + ": tokenizer.ggml.merges[" + std::to_string(k) +
                             "] " + QuoteForError(s) +
                             ": expected two tokens separated by one space");
    }
    spec->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> MakeTokenizerFromEmbeddedVocabulary(
    const EmbeddedVocabulary& v) {
  HfSpec spec;
  spec.source = "GGUF vocabulary";
  const size_t n = v.tokens.size();
  if (n == 0 || n > static_cast<size_t>(kMaxBpeVocabSize)) {
    return Status::Corrupt(spec.source + ": " + std::to_string(n) +
                           " tokens in tokenizer.ggml.tokens; expected 1 to " +
                           std::to_string(kMaxBpeVocabSize));
  }
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return Status::Corrupt(spec.source + ": " + std::to_string(v.token_types.size()) +
                           " token types for " + std::to_string(n) + " tokens");
  }
  spec.tokens = v.tokens;
  spec.special.assign(n, false);
  for (size_t id = 0; id < v.token_types.size(); ++id) {
    const int32_t t = v.token_types[id];
    if (t < 0 || t > kGgufTokenByte) {
      return Status::Corrupt(spec.source + ": token " + std::to_string(id) + " " +
                             QuoteForError(v.tokens[id]) + " has type " + std::to_string(t) +
                             "; expected 0..6");
    }
    spec.special[id] = t == kGgufTokenUnknown || t == kGgufTokenControl ||
                       t == kGgufTokenUserDefined || t == kGgufTokenUnused;
  }
  if (v.model == "gpt2") {
    ATTNLAB_RETURN_IF_ERROR(ConfigureGpt2(v, &spec));
  } else if (v.model == "llama") {
    spec.family = Family::kSpmScores;
    spec.name = "gguf-spm";
    spec.scores = v.scores;
    spec.strip_leading_space = true;
  } else {
    return Status::InvalidArgument(spec.source + ": tokenizer.ggml.model " +
                                   QuoteForError(v.model) +
                                   " is not supported by attnlab (gpt2, llama)");
  }
  spec.bos = v.bos;
  spec.eos = v.eos;
  spec.adds_bos = v.add_bos;
  return hf_internal::BuildHfTokenizer(std::move(spec));
}

}  // namespace attnlab
