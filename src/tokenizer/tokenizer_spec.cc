#include "tokenizer/tokenizer_spec.h"

#include "core/atomic_file.h"
#include "core/resources.h"

namespace attnlab {

Result<std::unique_ptr<Tokenizer>> LoadBundledGpt2Tokenizer() { return LoadTokenizer("gpt2"); }

Result<std::unique_ptr<Tokenizer>> TokenizerFromJson(const nlohmann::json& spec) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return Status::Corrupt("tokenizer description must be an object with a \"type\"");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "byte") return MakeByteTokenizer();
  if (type == "gpt2") return LoadBundledGpt2Tokenizer();
  if (type == "bpe") {
    if (!spec.contains("vocabulary") || !spec["vocabulary"].is_object()) {
      return Status::Corrupt("bpe tokenizer description lacks its \"vocabulary\" object");
    }
    ATTNLAB_ASSIGN_OR_RETURN(BpeVocabulary v,
                             ParseBpeVocabulary(spec["vocabulary"].dump(), "embedded vocabulary"));
    return MakeBpeTokenizer(v.ToModel());
  }
  return Status::Corrupt("unknown tokenizer type '" + type + "' (expected byte, gpt2 or bpe)");
}

Result<nlohmann::json> TokenizerJsonFromFlag(const std::string& flag) {
  if (flag == "byte" || flag == "gpt2") return nlohmann::json{{"type", flag}};
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(flag, int64_t{1} << 28));
  ATTNLAB_ASSIGN_OR_RETURN(BpeVocabulary v, ParseBpeVocabulary(text, flag));
  (void)v;
  nlohmann::json vocab = nlohmann::json::parse(text, nullptr, false);
  return nlohmann::json{{"type", "bpe"}, {"vocabulary", vocab}};
}

}  // namespace attnlab
