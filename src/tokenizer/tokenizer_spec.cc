#include "tokenizer/tokenizer_spec.h"

#include <filesystem>

#include "core/atomic_file.h"
#include "core/resources.h"
#include "tokenizer/tokenizer_hf.h"

namespace attnlab {

Result<std::unique_ptr<Tokenizer>> LoadBundledGpt2Tokenizer() { return LoadTokenizer("gpt2"); }

namespace {

// {"type": "embedded", "model": "gpt2"|"llama", "pre": ..., "tokens": [...], "scores": [...],
//  "token_types": [...], "merges": [...], "bos": id|null, "eos": id|null, "add_bos": bool}: a
// vocabulary carried inside a model file (GGUF's tokenizer.ggml.*), as the loader wrote it.
Result<std::unique_ptr<Tokenizer>> EmbeddedVocabularyFromJson(const nlohmann::json& spec) {
  EmbeddedVocabulary v;
  auto bad = [](const char* key) {
    return Status::Corrupt(std::string("embedded vocabulary: \"") + key + "\" has the wrong type");
  };
  auto str = [&](const char* key, std::string* out) -> Status {
    auto it = spec.find(key);
    if (it == spec.end() || it->is_null()) return Status::Ok();
    if (!it->is_string()) return bad(key);
    *out = it->get<std::string>();
    return Status::Ok();
  };
  ATTNLAB_RETURN_IF_ERROR(str("model", &v.model));
  ATTNLAB_RETURN_IF_ERROR(str("pre", &v.pre));
  auto array = [&](const char* key, auto* out, auto is_type) -> Status {
    auto it = spec.find(key);
    if (it == spec.end() || it->is_null()) return Status::Ok();
    if (!it->is_array()) return bad(key);
    out->reserve(it->size());
    for (const auto& e : *it) {
      if (!is_type(e)) return bad(key);
      out->push_back(e.template get<typename std::decay_t<decltype(*out)>::value_type>());
    }
    return Status::Ok();
  };
  using J = nlohmann::json;
  ATTNLAB_RETURN_IF_ERROR(array("tokens", &v.tokens, [](const J& e) { return e.is_string(); }));
  ATTNLAB_RETURN_IF_ERROR(array("merges", &v.merges, [](const J& e) { return e.is_string(); }));
  ATTNLAB_RETURN_IF_ERROR(array("scores", &v.scores, [](const J& e) { return e.is_number(); }));
  ATTNLAB_RETURN_IF_ERROR(
      array("token_types", &v.token_types, [](const J& e) { return e.is_number_integer(); }));
  for (const char* key : {"bos", "eos"}) {
    auto it = spec.find(key);
    if (it == spec.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > kMaxBpeVocabSize) {
      return bad(key);
    }
    (std::string(key) == "bos" ? v.bos : v.eos) = static_cast<int32_t>(it->get<int64_t>());
  }
  if (auto it = spec.find("add_bos"); it != spec.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("add_bos");
    v.add_bos = it->get<bool>();
  }
  return MakeTokenizerFromEmbeddedVocabulary(v);
}

}  // namespace

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
  if (type == "hf") {
    if (!spec.contains("path") || !spec["path"].is_string()) {
      return Status::Corrupt("hf tokenizer description lacks its \"path\" string");
    }
    return LoadHfTokenizer(spec["path"].get<std::string>());
  }
  if (type == "embedded") return EmbeddedVocabularyFromJson(spec);
  return Status::Corrupt("unknown tokenizer type '" + type +
                         "' (expected byte, gpt2, bpe, hf or embedded)");
}

namespace {

// The Hugging Face tokenizer a --tokenizer flag names, if it names one: "hf:<path>", a file
// called tokenizer.json, or a directory holding tokenizer.json but no GPT-2 encoder.json.
std::optional<std::string> HfPathOfFlag(const std::string& flag) {
  if (flag.rfind("hf:", 0) == 0) return flag.substr(3);
  std::error_code ec;
  const std::filesystem::path p(flag);
  if (p.filename() == "tokenizer.json" && std::filesystem::is_regular_file(p, ec)) return flag;
  if (std::filesystem::is_directory(p, ec) && std::filesystem::exists(p / "tokenizer.json", ec) &&
      !std::filesystem::exists(p / "encoder.json", ec)) {
    return flag;
  }
  return std::nullopt;
}

}  // namespace

Result<nlohmann::json> TokenizerJsonFromFlag(const std::string& flag) {
  if (flag == "byte" || flag == "gpt2") return nlohmann::json{{"type", flag}};
  if (const std::optional<std::string> hf = HfPathOfFlag(flag)) {
    // An attnlab data directory's tokenizer.json ({"type": ...}) is already a spec.
    std::filesystem::path file(*hf);
    std::error_code dir_ec;
    if (std::filesystem::is_directory(file, dir_ec)) file /= "tokenizer.json";
    Result<std::string> text = ReadFileToString(file.string(), int64_t{256} << 20);
    if (text.ok() && text->size() < (size_t{1} << 20)) {
      nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
      if (j.is_object() && j.contains("type") && !j.contains("model")) {
        ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, TokenizerFromJson(j));
        (void)t;
        return j;
      }
    }
    ATTNLAB_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, LoadHfTokenizer(*hf));  // fail early
    (void)t;
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(*hf, ec);
    return nlohmann::json{{"type", "hf"}, {"path", ec ? *hf : abs.lexically_normal().string()}};
  }
  ATTNLAB_ASSIGN_OR_RETURN(std::string text, ReadFileToString(flag, int64_t{1} << 28));
  ATTNLAB_ASSIGN_OR_RETURN(BpeVocabulary v, ParseBpeVocabulary(text, flag));
  (void)v;
  nlohmann::json vocab = nlohmann::json::parse(text, nullptr, false);
  return nlohmann::json{{"type", "bpe"}, {"vocabulary", vocab}};
}

}  // namespace attnlab
