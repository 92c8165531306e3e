// Hugging Face tokenizer.json + tokenizer_config.json -> HfSpec -> BuildHfTokenizer
// (tokenizer_hf.h says what is supported). Every check names the file and the entry.
#include "tokenizer/tokenizer_hf.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/files.h"
#include "tokenizer/tokenizer_hf_model.h"

namespace attnlab {
namespace {

using hf_internal::Family;
using hf_internal::HfSpec;
using hf_internal::kMetaspace;
using hf_internal::QuoteForError;
using nlohmann::json;

constexpr int64_t kMaxHfFileBytes = int64_t{256} << 20;

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
    error = "key " + QuoteForError(k) + " appears twice";
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
    error = "malformed JSON near byte " + std::to_string(position) + ": " + ex.what();
    return false;
  }

 private:
  std::vector<std::unordered_set<std::string>> keys_;
};

Result<json> ParseJson(std::string_view text, const std::string& file) {
  JsonChecker checker;
  if (!json::sax_parse(text.begin(), text.end(), &checker) || !checker.error.empty()) {
    return Status::Corrupt(file + ": " + (checker.error.empty() ? "not valid JSON" : checker.error));
  }
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corrupt(file + ": not valid JSON");
  if (!j.is_object()) {
    return Status::Corrupt(file + ": expected a JSON object, found " + std::string(j.type_name()));
  }
  return j;
}

// One file's parse: errors are "<file>: <where>: <problem>".
struct Ctx {
  std::string file;
  Status Corrupt(const std::string& msg) const { return Status::Corrupt(file + ": " + msg); }
  Status Unsupported(const std::string& msg) const {
    return Status::InvalidArgument(file + ": " + msg + " is not supported by attnlab");
  }

  // obj[key] if present and not null, else nullptr.
  static const json* Field(const json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  Status Bool(const json& obj, const char* key, const std::string& where, bool* out) const {
    const json* v = Field(obj, key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Corrupt(where + "." + key + " is " + v->dump() + "; expected true or false");
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status String(const json& obj, const char* key, const std::string& where,
                std::optional<std::string>* out) const {
    const json* v = Field(obj, key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return Corrupt(where + "." + key + " is " + v->dump(-1, ' ', true).substr(0, 60) + "; expected a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status Type(const json& obj, const std::string& where, std::string* type) const {
    if (!obj.is_object()) return Corrupt(where + " is not an object");
    const json* t = Field(obj, "type");
    if (!t || !t->is_string()) return Corrupt(where + " has no \"type\" string");
    *type = t->get<std::string>();
    return Status::Ok();
  }
};

// ---------------------------------------------------------------------------------------------
// model.vocab + added_tokens -> spec.tokens, spec.special (ids exactly 0..n-1).

Result<int64_t> IdOf(const Ctx& ctx, const json& v, const std::string& where) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return ctx.Corrupt(where + " is " + v.dump(-1, ' ', true).substr(0, 60) +
                     "; expected an integer id");
}

Status ParseTokens(const Ctx& ctx, const json& top, const json& model, HfSpec* spec) {
  const json* vocab = Ctx::Field(model, "vocab");
  if (!vocab || !vocab->is_object()) return ctx.Corrupt("model.vocab is missing or not an object");
  const json* added = Ctx::Field(top, "added_tokens");
  if (added && !added->is_array()) return ctx.Corrupt("added_tokens is not an array");
  const size_t n_added = added ? added->size() : 0;
  if (vocab->size() + n_added > static_cast<size_t>(kMaxBpeVocabSize)) {
    return ctx.Corrupt(std::to_string(vocab->size()) + " tokens in model.vocab and " +
                       std::to_string(n_added) + " added tokens exceed " +
                       std::to_string(kMaxBpeVocabSize) + " ids");
  }
  const auto check_range = [&](int64_t id, const std::string& where) {
    if (id >= 0 && id < kMaxBpeVocabSize) return Status::Ok();
    return ctx.Corrupt(where + " has id " + std::to_string(id) + ", outside [0, " +
                       std::to_string(kMaxBpeVocabSize) + ")");
  };
  std::vector<std::pair<int64_t, const std::string*>> vocab_ids;
  int64_t max_id = -1;
  for (const auto& [key, value] : vocab->items()) {
    const std::string where = "model.vocab " + QuoteForError(key);
    ATTNLAB_ASSIGN_OR_RETURN(int64_t id, IdOf(ctx, value, where));
    ATTNLAB_RETURN_IF_ERROR(check_range(id, where));
    vocab_ids.emplace_back(id, &key);
    max_id = std::max(max_id, id);
  }
  struct Added {
    int64_t id;
    std::string content;
  };
  std::vector<Added> adds;
  for (size_t i = 0; i < n_added; ++i) {
    const json& a = (*added)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string()) {
      return ctx.Corrupt(where + " is not an object with an integer \"id\" and a string \"content\"");
    }
    ATTNLAB_ASSIGN_OR_RETURN(int64_t id, IdOf(ctx, a["id"], where + ".id"));
    ATTNLAB_RETURN_IF_ERROR(check_range(id, where + " " + QuoteForError(a["content"].get<std::string>())));
    adds.push_back({id, a["content"].get<std::string>()});
    max_id = std::max(max_id, id);
  }
  if (max_id + 1 > static_cast<int64_t>(vocab_ids.size() + adds.size())) {  // before allocating
    return ctx.Corrupt("the largest id is " + std::to_string(max_id) + " but model.vocab and "
                       "added_tokens hold only " + std::to_string(vocab_ids.size() + adds.size()) +
                       " entries (the ids must be exactly 0..n-1)");
  }
  const size_t n = static_cast<size_t>(max_id + 1);
  spec->tokens.assign(n, std::string());
  spec->special.assign(n, false);
  std::vector<uint8_t> have(n, 0);  // 1: vocab, 2: added
  for (const auto& [id, key] : vocab_ids) {
    if (have[id]) {
      return ctx.Corrupt("model.vocab: id " + std::to_string(id) + " is used by both " +
                         QuoteForError(spec->tokens[id]) + " and " + QuoteForError(*key));
    }
    have[id] = 1;
    spec->tokens[id] = *key;
  }
  std::unordered_set<std::string> contents;
  for (size_t i = 0; i < adds.size(); ++i) {
    const auto& [id, content] = adds[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "] " + QuoteForError(content);
    if (content.empty()) return ctx.Corrupt(where + " is empty");
    if (!contents.insert(content).second) return ctx.Corrupt(where + " appears twice");
    if (have[id] == 2) return ctx.Corrupt(where + ": id " + std::to_string(id) + " is used twice");
    if (have[id] == 1 && spec->tokens[id] != content) {
      return ctx.Corrupt(where + ": id " + std::to_string(id) + " is " +
                         QuoteForError(spec->tokens[id]) + " in model.vocab");
    }
    have[id] = 2;
    spec->tokens[id] = content;
    spec->special[id] = true;
  }
  for (size_t id = 0; id < n; ++id) {
    if (!have[id]) {
      return ctx.Corrupt("id " + std::to_string(id) + " is neither in model.vocab nor in "
                         "added_tokens (the ids must be exactly 0.." + std::to_string(n - 1) + ")");
    }
  }
  return Status::Ok();
}

Status ParseMerges(const Ctx& ctx, const json& model, HfSpec* spec) {
  const json* merges = Ctx::Field(model, "merges");
  if (!merges) return Status::Ok();
  if (!merges->is_array()) return ctx.Corrupt("model.merges is not an array");
  if (merges->size() > static_cast<size_t>(kMaxBpeVocabSize)) {
    return ctx.Corrupt(std::to_string(merges->size()) + " merges exceed " +
                       std::to_string(kMaxBpeVocabSize));
  }
  spec->merges.reserve(merges->size());
  for (size_t k = 0; k < merges->size(); ++k) {
    const json& m = (*merges)[k];
    const std::string where = "model.merges[" + std::to_string(k) + "]";
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        return ctx.Corrupt(where + " " + QuoteForError(s) +
                           ": expected two tokens separated by one space");
      }
      spec->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return ctx.Corrupt(where + " is " + m.dump(-1, ' ', true).substr(0, 60) +
                         "; expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  return Status::Ok();
}

Status ParseModelOptions(const Ctx& ctx, const json& model, HfSpec* spec) {
  const json* dropout = Ctx::Field(model, "dropout");
  if (dropout && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return ctx.Unsupported("model.dropout " + dropout->dump(-1, ' ', true).substr(0, 40) +
                           " (BPE dropout is random; only null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::optional<std::string> v;
    ATTNLAB_RETURN_IF_ERROR(ctx.String(model, key, "model", &v));
    if (v && !v->empty()) return ctx.Unsupported(std::string("model.") + key + " " + QuoteForError(*v));
  }
  ATTNLAB_RETURN_IF_ERROR(ctx.String(model, "unk_token", "model", &spec->unk_token));
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(model, "fuse_unk", "model", &spec->fuse_unk));
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(model, "byte_fallback", "model", &spec->byte_fallback));
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(model, "ignore_merges", "model", &spec->ignore_merges));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// normalizer, pre_tokenizer, decoder, post_processor.

// Flattens nested Sequences (`list_key`: "normalizers", "pretokenizers", ...) into `out`.
Status Flatten(const Ctx& ctx, const json& node, const char* list_key, const std::string& where,
               int depth, std::vector<std::pair<std::string, const json*>>* out) {
  if (node.is_null()) return Status::Ok();
  if (depth > 8) return ctx.Corrupt(where + ": Sequences nested too deeply");
  std::string type;
  ATTNLAB_RETURN_IF_ERROR(ctx.Type(node, where, &type));
  if (type != "Sequence") {
    out->emplace_back(type, &node);
    return Status::Ok();
  }
  const json* list = Ctx::Field(node, list_key);
  if (!list || !list->is_array()) {
    return ctx.Corrupt(where + " Sequence has no \"" + list_key + "\" array");
  }
  for (size_t i = 0; i < list->size(); ++i) {
    ATTNLAB_RETURN_IF_ERROR(Flatten(ctx, (*list)[i], list_key,
                                    where + "." + list_key + "[" + std::to_string(i) + "]",
                                    depth + 1, out));
  }
  return Status::Ok();
}

// The pattern's string: {"String": s} or {"Regex": s}.
std::optional<std::string> PatternOf(const json& node, bool* is_regex) {
  const json* p = Ctx::Field(node, "pattern");
  if (!p || !p->is_object()) return std::nullopt;
  for (const char* kind : {"String", "Regex"}) {
    const json* v = Ctx::Field(*p, kind);
    if (v && v->is_string()) {
      *is_regex = std::string_view(kind) == "Regex";
      return v->get<std::string>();
    }
  }
  return std::nullopt;
}

Status ParseNormalizer(const Ctx& ctx, const json& top, HfSpec* spec) {
  std::vector<std::pair<std::string, const json*>> steps;
  const json* n = Ctx::Field(top, "normalizer");
  if (n) ATTNLAB_RETURN_IF_ERROR(Flatten(ctx, *n, "normalizers", "normalizer", 0, &steps));
  for (const auto& [type, node] : steps) {
    if (type == "NFC") continue;  // accepted, not applied (tokenizer_hf.h)
    std::optional<std::string> content;
    bool is_regex = false;
    if (type == "Prepend") {
      ATTNLAB_RETURN_IF_ERROR(ctx.String(*node, "prepend", "normalizer Prepend", &content));
      if (content != std::string(kMetaspace)) {
        return ctx.Unsupported("normalizer Prepend " + QuoteForError(content.value_or("")) +
                               " (only \"\xE2\x96\x81\")");
      }
      spec->prepend_metaspace = true;
    } else if (type == "Replace") {
      ATTNLAB_RETURN_IF_ERROR(ctx.String(*node, "content", "normalizer Replace", &content));
      const std::optional<std::string> pattern = PatternOf(*node, &is_regex);
      if (is_regex || pattern != " " || content != std::string(kMetaspace)) {
        return ctx.Unsupported("normalizer Replace " + QuoteForError(pattern.value_or("")) +
                               " -> " + QuoteForError(content.value_or("")) +
                               " (only \" \" -> \"\xE2\x96\x81\")");
      }
      spec->replace_spaces = true;
    } else {
      return ctx.Unsupported("normalizer " + QuoteForError(type));
    }
  }
  return Status::Ok();
}

Status ParseMetaspace(const Ctx& ctx, const json& node, HfSpec* spec) {
  std::optional<std::string> replacement, scheme;
  ATTNLAB_RETURN_IF_ERROR(ctx.String(node, "replacement", "pre_tokenizer Metaspace", &replacement));
  if (replacement && *replacement != kMetaspace) {
    return ctx.Unsupported("Metaspace replacement " + QuoteForError(*replacement));
  }
  ATTNLAB_RETURN_IF_ERROR(ctx.String(node, "prepend_scheme", "pre_tokenizer Metaspace", &scheme));
  bool add_prefix_space = true, split = true;
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(node, "add_prefix_space", "pre_tokenizer Metaspace", &add_prefix_space));
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(node, "split", "pre_tokenizer Metaspace", &split));
  if (!scheme) scheme = add_prefix_space ? "always" : "never";
  if (*scheme != "always" && *scheme != "first" && *scheme != "never") {
    return ctx.Corrupt("pre_tokenizer Metaspace prepend_scheme " + QuoteForError(*scheme) +
                       "; expected always, first or never");
  }
  spec->metaspace = true;
  spec->metaspace_prepend = *scheme != "never";  // "first": the text is one section
  spec->metaspace_split = split;
  return Status::Ok();
}

Status ParseSplit(const Ctx& ctx, const json& node, HfSpec* spec) {
  bool is_regex = false, invert = false;
  const std::optional<std::string> pattern = PatternOf(node, &is_regex);
  std::optional<std::string> behavior;
  ATTNLAB_RETURN_IF_ERROR(ctx.String(node, "behavior", "pre_tokenizer Split", &behavior));
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(node, "invert", "pre_tokenizer Split", &invert));
  if (!pattern) return ctx.Corrupt("pre_tokenizer Split has no pattern {\"Regex\": ...}");
  if (behavior.value_or("Isolated") != "Isolated" || invert) {
    return ctx.Unsupported("pre_tokenizer Split with behavior " +
                           QuoteForError(behavior.value_or("")) +
                           (invert ? " and invert" : "") + " (only Isolated)");
  }
  for (const HfRegex r : {HfRegex::kGpt2, HfRegex::kLlama3, HfRegex::kQwen2}) {
    if (is_regex && *pattern == HfRegexPattern(r)) {
      spec->split = r;
      return Status::Ok();
    }
  }
  return ctx.Unsupported("pre_tokenizer Split pattern " + QuoteForError(*pattern) +
                         " (attnlab knows GPT-2's, Llama-3's and Qwen2's regexes)");
}

Status ParsePreTokenizer(const Ctx& ctx, const json& top, HfSpec* spec) {
  std::vector<std::pair<std::string, const json*>> steps;
  const json* p = Ctx::Field(top, "pre_tokenizer");
  if (p) ATTNLAB_RETURN_IF_ERROR(Flatten(ctx, *p, "pretokenizers", "pre_tokenizer", 0, &steps));
  std::string shape;
  for (const auto& [type, node] : steps) shape += (shape.empty() ? "" : ", ") + type;
  spec->family = Family::kCharBpe;
  if (steps.empty()) return Status::Ok();
  if (steps.size() == 1 && steps[0].first == "Metaspace") {
    return ParseMetaspace(ctx, *steps[0].second, spec);
  }
  const bool byte_level = steps.back().first == "ByteLevel" &&
                          (steps.size() == 1 || (steps.size() == 2 && steps[0].first == "Split"));
  if (!byte_level) {
    return ctx.Unsupported("pre_tokenizer [" + shape +
                           "] (attnlab reads ByteLevel, [Split, ByteLevel] and Metaspace)");
  }
  spec->family = Family::kByteLevel;
  if (steps.size() == 2) ATTNLAB_RETURN_IF_ERROR(ParseSplit(ctx, *steps[0].second, spec));
  const json& bl = *steps.back().second;
  spec->use_regex = true;
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(bl, "add_prefix_space", "pre_tokenizer ByteLevel", &spec->add_prefix_space));
  ATTNLAB_RETURN_IF_ERROR(ctx.Bool(bl, "use_regex", "pre_tokenizer ByteLevel", &spec->use_regex));
  return Status::Ok();
}

Status ParseDecoder(const Ctx& ctx, const json& top, HfSpec* spec) {
  std::vector<std::pair<std::string, const json*>> steps;
  const json* d = Ctx::Field(top, "decoder");
  if (d) ATTNLAB_RETURN_IF_ERROR(Flatten(ctx, *d, "decoders", "decoder", 0, &steps));
  const bool byte_level = spec->family == Family::kByteLevel;
  for (const auto& [type, node] : steps) {
    if (type == "ByteLevel" && byte_level) continue;
    if (byte_level) return ctx.Unsupported("decoder " + QuoteForError(type) + " with ByteLevel");
    if (type == "ByteFallback" || type == "Fuse") continue;
    if (type == "Replace") {
      bool is_regex = false;
      std::optional<std::string> content;
      ATTNLAB_RETURN_IF_ERROR(ctx.String(*node, "content", "decoder Replace", &content));
      const std::optional<std::string> pattern = PatternOf(*node, &is_regex);
      if (is_regex || pattern != std::string(kMetaspace) || content != " ") {
        return ctx.Unsupported("decoder Replace other than \"\xE2\x96\x81\" -> \" \"");
      }
    } else if (type == "Strip") {
      std::optional<std::string> content;
      ATTNLAB_RETURN_IF_ERROR(ctx.String(*node, "content", "decoder Strip", &content));
      const json* start = Ctx::Field(*node, "start");
      const json* stop = Ctx::Field(*node, "stop");
      const bool start_ok = !start || (start->is_number_integer() && start->get<int64_t>() >= 0 &&
                                       start->get<int64_t>() <= 1);
      const bool stop_ok = !stop || (stop->is_number_integer() && stop->get<int64_t>() == 0);
      if (content.value_or(" ") != " " || !start_ok || !stop_ok) {
        return ctx.Unsupported("decoder Strip other than (\" \", start 0 or 1, stop 0)");
      }
      if (start && start->get<int64_t>() == 1) spec->strip_leading_space = true;
    } else if (type == "Metaspace") {
      HfSpec m;
      ATTNLAB_RETURN_IF_ERROR(ParseMetaspace(ctx, *node, &m));
      if (m.metaspace_prepend) spec->strip_leading_space = true;
    } else {
      return ctx.Unsupported("decoder " + QuoteForError(type));
    }
  }
  return Status::Ok();
}

// The special token TemplateProcessing's "single" puts before $A, if any.
Result<std::optional<std::string>> TemplateBos(const Ctx& ctx, const json& top) {
  std::vector<std::pair<std::string, const json*>> steps;
  const json* p = Ctx::Field(top, "post_processor");
  if (p) ATTNLAB_RETURN_IF_ERROR(Flatten(ctx, *p, "processors", "post_processor", 0, &steps));
  for (const auto& [type, node] : steps) {
    if (type != "TemplateProcessing") continue;
    const json* single = Ctx::Field(*node, "single");
    if (!single || !single->is_array()) {
      return ctx.Corrupt("post_processor TemplateProcessing has no \"single\" array");
    }
    for (const json& item : *single) {
      if (const json* s = Ctx::Field(item, "SpecialToken")) {
        const json* id = Ctx::Field(*s, "id");
        if (!id || !id->is_string()) {
          return ctx.Corrupt("post_processor TemplateProcessing: a SpecialToken without an id");
        }
        return std::optional<std::string>(id->get<std::string>());
      }
      if (Ctx::Field(item, "Sequence")) break;  // $A came first
    }
  }
  return std::optional<std::string>();
}

// ---------------------------------------------------------------------------------------------
// tokenizer_config.json.

std::optional<int32_t> FindToken(const HfSpec& spec, const std::string& text) {
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      if (spec.special[id] == (pass == 0) && spec.tokens[id] == text) return static_cast<int32_t>(id);
    }
  }
  return std::nullopt;
}

// bos_token / eos_token: absent (unchanged), null (none), a string or {"content": string}.
Status ConfigToken(const Ctx& ctx, const json& config, const char* key, const HfSpec& spec,
                   std::optional<int32_t>* out, bool* given) {
  auto it = config.find(key);
  if (it == config.end()) return Status::Ok();
  *given = true;
  const json* v = &*it;
  if (v->is_null()) {
    *out = std::nullopt;
    return Status::Ok();
  }
  if (v->is_object()) v = Ctx::Field(*v, "content");
  if (!v || !v->is_string()) {
    return ctx.Corrupt(std::string(key) + " is neither a string nor {\"content\": string}");
  }
  *out = FindToken(spec, v->get<std::string>());
  if (!*out) {
    return ctx.Corrupt(std::string(key) + " " + QuoteForError(v->get<std::string>()) +
                       " is not a token of tokenizer.json");
  }
  return Status::Ok();
}

Status ApplyBosEos(const std::string& config_name, std::string_view config_text,
                   const std::optional<std::string>& template_bos, HfSpec* spec) {
  if (template_bos) {
    spec->bos = FindToken(*spec, *template_bos);
    if (!spec->bos) {
      return Status::Corrupt(spec->source + ": post_processor TemplateProcessing names " +
                             QuoteForError(*template_bos) + ", which is not a token");
    }
    spec->adds_bos = true;
  }
  bool bos_given = false, eos_given = false;
  if (!config_text.empty()) {
    const Ctx ctx{config_name};
    ATTNLAB_ASSIGN_OR_RETURN(json config, ParseJson(config_text, config_name));
    ATTNLAB_RETURN_IF_ERROR(ConfigToken(ctx, config, "bos_token", *spec, &spec->bos, &bos_given));
    ATTNLAB_RETURN_IF_ERROR(ConfigToken(ctx, config, "eos_token", *spec, &spec->eos, &eos_given));
    ATTNLAB_RETURN_IF_ERROR(ctx.Bool(config, "add_bos_token", "tokenizer_config", &spec->adds_bos));
  }
  if (!bos_given && !eos_given && !template_bos) {
    for (size_t id = 0; id < spec->tokens.size(); ++id) {
      if (spec->special[id] && spec->tokens[id] == kEndOfText) {
        spec->bos = spec->eos = static_cast<int32_t>(id);
      }
    }
  }
  return Status::Ok();
}

std::string NameOf(const HfSpec& spec) {
  if (spec.family == Family::kByteLevel) {
    std::string name = "hf-bpe-bytelevel";
    if (spec.split == HfRegex::kLlama3) return name + "-llama3";
    if (spec.split == HfRegex::kQwen2) return name + "-qwen2";
    if (spec.split == HfRegex::kGpt2 || spec.use_regex) return name + "-gpt2";
    return name + "-noregex";
  }
  if (spec.metaspace || spec.prepend_metaspace || spec.replace_spaces) {
    return "hf-bpe-sentencepiece";
  }
  return "hf-bpe-chars";
}

Result<HfSpec> ParseSpec(const Ctx& ctx, const json& top) {
  HfSpec spec;
  spec.source = ctx.file;
  const json* model = Ctx::Field(top, "model");
  if (!model || !model->is_object()) {
    return ctx.Corrupt("no \"model\" object (is this a Hugging Face tokenizer.json?)");
  }
  std::optional<std::string> type;
  ATTNLAB_RETURN_IF_ERROR(ctx.String(*model, "type", "model", &type));
  if (type.value_or("BPE") != "BPE") {
    return ctx.Unsupported("model type " + QuoteForError(*type) + " (only BPE)");
  }
  if (!type && !Ctx::Field(*model, "merges")) {
    return ctx.Unsupported("a model without \"type\" or \"merges\" (only BPE)");
  }
  ATTNLAB_RETURN_IF_ERROR(ParseTokens(ctx, top, *model, &spec));
  ATTNLAB_RETURN_IF_ERROR(ParseMerges(ctx, *model, &spec));
  ATTNLAB_RETURN_IF_ERROR(ParseModelOptions(ctx, *model, &spec));
  ATTNLAB_RETURN_IF_ERROR(ParsePreTokenizer(ctx, top, &spec));
  ATTNLAB_RETURN_IF_ERROR(ParseNormalizer(ctx, top, &spec));
  if (spec.family == Family::kByteLevel &&
      (spec.prepend_metaspace || spec.replace_spaces || spec.byte_fallback)) {
    return ctx.Unsupported("a ByteLevel pre_tokenizer with a \xE2\x96\x81 normalizer or byte_fallback");
  }
  ATTNLAB_RETURN_IF_ERROR(ParseDecoder(ctx, top, &spec));
  spec.name = NameOf(spec);
  return spec;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> ParseHfTokenizer(std::string_view tokenizer_json,
                                                    std::string_view config_json,
                                                    const std::string& name) {
  const Ctx ctx{name};
  ATTNLAB_ASSIGN_OR_RETURN(json top, ParseJson(tokenizer_json, name));
  ATTNLAB_ASSIGN_OR_RETURN(HfSpec spec, ParseSpec(ctx, top));
  ATTNLAB_ASSIGN_OR_RETURN(std::optional<std::string> template_bos, TemplateBos(ctx, top));
  const std::string config_name =
      (std::filesystem::path(name).parent_path() / "tokenizer_config.json").string();
  ATTNLAB_RETURN_IF_ERROR(ApplyBosEos(config_name, config_json, template_bos, &spec));
  return hf_internal::BuildHfTokenizer(std::move(spec));
}

Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path) {
  std::error_code ec;
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file, ec)) file /= "tokenizer.json";
  Result<std::string> text = ReadFileToString(file.string(), kMaxHfFileBytes);
  if (!text.ok()) return text.status().WithContext("loading Hugging Face tokenizer " + path);
  const std::filesystem::path config_path = file.parent_path() / "tokenizer_config.json";
  std::string config;
  if (std::filesystem::exists(config_path, ec)) {
    Result<std::string> c = ReadFileToString(config_path.string(), kMaxHfFileBytes);
    if (!c.ok()) return c.status().WithContext("loading " + config_path.string());
    config = std::move(c).value();
    if (config.empty()) config = " ";  // an empty file is malformed JSON, not "no file"
  }
  return ParseHfTokenizer(*text, config, file.string());
}

}  // namespace attnlab
