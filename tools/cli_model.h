// Loading a model and its tokenizer for a CLI command: any format LoadAnyModel knows, the
// embedded default when --model is not given, and the tokenizer from --tokenizer, the
// checkpoint's metadata, or GPT-2's files for GPT-2 weights. Errors throw CommandError.
#ifndef ATTNLAB_TOOLS_CLI_MODEL_H_
#define ATTNLAB_TOOLS_CLI_MODEL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnlab/tokenizer.h"
#include "formats/load_model.h"
#include "model/gpt.h"

namespace attnlab::cli {

struct CliModel {
  std::unique_ptr<Gpt> gpt;
  std::unique_ptr<Tokenizer> tokenizer;  // null when none could be determined and none needed
  std::string path, format;
  nlohmann::json meta;
};

// model_flag "" -> the embedded default (data/default-model). tokenizer_flag "" -> from the
// model. need_tokenizer: throw if none can be found. The tokenizer's vocabulary must equal the
// model's.
CliModel LoadCliModel(const std::string& model_flag, const std::string& tokenizer_flag,
                      bool need_tokenizer);

// Whether the model was trained with a BOS token at the start of every sequence: the trainer
// records it in the checkpoint's metadata; a released model's tokenizer says so (adds_bos()).
bool TrainedWithBos(const CliModel& m);

// Text for --text FILE / --prompt STR (exactly one, else UsageError), as bytes. A file with NUL
// bytes or more than 10% invalid UTF-8 is refused (CommandError); fewer invalid bytes warn.
std::string ReadTextInput(const std::string& text_file, const std::string& prompt);

struct TextCheck {
  int64_t nul_bytes = 0, invalid_utf8 = 0;  // bytes not part of a well-formed UTF-8 sequence
};
TextCheck CheckText(std::string_view bytes);

// The streaming cache's sizes as given on the command line (generate, stream): a --window or
// --sinks that was given must be >= min_sinks (1; 0 for h2o and tova, which may pin none), else
// UsageError.
void CheckWindowAndSinks(bool window_given, int64_t window, bool sinks_given, int64_t sinks,
                         int64_t min_sinks = 1);

// Comma-separated token ids ("1,2,3").
std::vector<int32_t> ParseTokenList(const std::string& s);

}  // namespace attnlab::cli

#endif  // ATTNLAB_TOOLS_CLI_MODEL_H_
