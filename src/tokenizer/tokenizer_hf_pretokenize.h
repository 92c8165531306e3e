// The pre-tokenizer regexes of Hugging Face byte-level BPE files (tokenizer_hf.h), by hand:
// GPT-2's (Gpt2PreTokenizer), Llama-3's and Qwen2's (rules in tokenizer_hf_pretokenize.cc).
#ifndef ATTNLAB_TOKENIZER_TOKENIZER_HF_PRETOKENIZE_H_
#define ATTNLAB_TOKENIZER_TOKENIZER_HF_PRETOKENIZE_H_

#include <string_view>
#include <vector>

#include "attnlab/tokenizer.h"

namespace attnlab {

enum class HfRegex { kGpt2, kLlama3, kQwen2 };

// The pieces of `text`, in order, non-empty, concatenating to `text`.
std::vector<std::string_view> HfPreTokenize(HfRegex regex, std::string_view text);

// The regex each stands for, exactly as tokenizer.json spells it (after JSON unescaping).
std::string_view HfRegexPattern(HfRegex regex);

}  // namespace attnlab

#endif  // ATTNLAB_TOKENIZER_TOKENIZER_HF_PRETOKENIZE_H_
