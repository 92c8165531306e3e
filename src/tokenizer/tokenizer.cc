// The Tokenizer interface's shared pieces: the byte tokenizer, GPT-2's byte <-> code point table,
// and LoadTokenizer's dispatch on a spec string. (BPE encoding: tokenizer_bpe.cc; files:
// tokenizer_files.cc; training: tokenizer_train.cc; pre-tokenisation: tokenizer_pretokenize.cc.)
#include "attnlab/tokenizer.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/files.h"
#include "core/resources.h"
#include "tokenizer/tokenizer_hf.h"
#include "tokenizer/tokenizer_spec.h"

namespace attnlab {

std::optional<int32_t> Tokenizer::SpecialTokenId(std::string_view text) const {
  for (const SpecialToken& s : special_tokens()) {
    if (s.text == text) return s.id;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// byte: ids 0..255 are the bytes, 256 (optional) is "<|endoftext|>".

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(bool with_endoftext) {
    if (with_endoftext) specials_.push_back({std::string(kEndOfText), 256});
  }

  Result<std::vector<int32_t>> Encode(std::string_view bytes) const override {
    std::vector<int32_t> ids(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) ids[i] = static_cast<uint8_t>(bytes[i]);
    return ids;
  }

  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (const int32_t id : ids) {
      if (id >= 0 && id < 256) {
        out.push_back(static_cast<char>(id));
      } else if (!specials_.empty() && id == 256) {
        out += kEndOfText;
      } else {
        return BadId(id);
      }
    }
    return out;
  }

  Result<std::string> TokenBytes(int32_t id) const override {
    if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
    if (!specials_.empty() && id == 256) return std::string(kEndOfText);
    return BadId(id);
  }

  int32_t vocab_size() const override { return specials_.empty() ? 256 : 257; }
  std::string name() const override { return "byte"; }
  std::optional<int32_t> bos_id() const override { return EndOfText(); }
  std::optional<int32_t> eos_id() const override { return EndOfText(); }
  std::span<const SpecialToken> special_tokens() const override { return specials_; }

 private:
  std::optional<int32_t> EndOfText() const {
    return specials_.empty() ? std::nullopt : std::optional<int32_t>(256);
  }
  Status BadId(int32_t id) const {
    return Status::OutOfRange("token id " + std::to_string(id) + " is outside [0, " +
                              std::to_string(vocab_size()) + ") of the byte tokenizer");
  }

  std::vector<SpecialToken> specials_;
};

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer(bool with_endoftext) {
  return std::make_unique<ByteTokenizer>(with_endoftext);
}

// ---------------------------------------------------------------------------------------------
// GPT-2's bytes_to_unicode().

namespace {

constexpr char32_t kGpt2MaxCodePoint = 256 + 67;  // 68 bytes are moved to U+0100..U+0143

constexpr bool Gpt2PrintableByte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Gpt2ByteTable {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, kGpt2MaxCodePoint + 1> to_byte{};  // -1: not in the image
};

constexpr Gpt2ByteTable MakeGpt2ByteTable() {
  Gpt2ByteTable t;
  for (auto& b : t.to_byte) b = -1;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = Gpt2PrintableByte(b) ? static_cast<char32_t>(b) : next++;
    t.to_unicode[b] = cp;
    t.to_byte[cp] = static_cast<int16_t>(b);
  }
  return t;
}
constexpr Gpt2ByteTable kGpt2Bytes = MakeGpt2ByteTable();
static_assert(kGpt2Bytes.to_unicode[' '] == 0x120 && kGpt2Bytes.to_unicode['\n'] == 0x10A &&
              kGpt2Bytes.to_unicode[0xAD] == kGpt2MaxCodePoint);

}  // namespace

char32_t Gpt2ByteToUnicode(uint8_t byte) { return kGpt2Bytes.to_unicode[byte]; }

std::optional<uint8_t> Gpt2UnicodeToByte(char32_t cp) {
  if (cp > kGpt2MaxCodePoint || kGpt2Bytes.to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(kGpt2Bytes.to_byte[cp]);
}

std::string Gpt2RenderBytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const char32_t cp = kGpt2Bytes.to_unicode[static_cast<uint8_t>(c)];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {  // all mapped code points are below U+0800: two UTF-8 bytes
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

Result<std::string> Gpt2UnrenderBytes(std::string_view rendered) {
  std::string out;
  out.reserve(rendered.size());
  for (size_t pos = 0; pos < rendered.size();) {
    const Utf8Char c = DecodeUtf8Char(rendered.substr(pos));
    if (!c.valid) {
      return Status::Corrupt("byte " + std::to_string(pos) + " of a token is not valid UTF-8");
    }
    const std::optional<uint8_t> b = Gpt2UnicodeToByte(c.cp);
    if (!b) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "U+%04X", static_cast<unsigned>(c.cp));
      std::string msg = "token \"";
      msg.append(rendered.substr(0, 60));
      msg += "\" holds ";
      msg += hex;
      msg +=
          ", which is not in GPT-2's bytes_to_unicode table (expected a byte-level token such "
          "as \"Ġthe\")";
      return Status::Corrupt(std::move(msg));
    }
    out.push_back(static_cast<char>(*b));
    pos += static_cast<size_t>(c.length);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// LoadTokenizer.

namespace {

// <dir>/tokenizer.json: Hugging Face's, or an attnlab data directory's {"type": ...} spec.
Result<std::unique_ptr<Tokenizer>> LoadTokenizerJsonDirectory(const std::filesystem::path& dir) {
  const std::string file = (dir / "tokenizer.json").string();
  Result<std::string> text = ReadFileToString(file, int64_t{256} << 20);
  if (!text.ok()) return text.status().WithContext("loading tokenizer " + file);
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("type") && !j.contains("model")) {
    Result<std::unique_ptr<Tokenizer>> t = TokenizerFromJson(j);
    if (!t.ok()) return t.status().WithContext(file);
    return t;
  }
  return LoadHfTokenizer(file);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& spec) {
  if (spec == "byte") return MakeByteTokenizer();
  if (spec.rfind("hf:", 0) == 0) return LoadHfTokenizer(spec.substr(3));
  if (std::filesystem::path(spec).filename() == "tokenizer.json" &&
      std::filesystem::is_regular_file(spec)) {
    return LoadTokenizerJsonDirectory(std::filesystem::path(spec).parent_path());
  }
  std::string dir;
  std::error_code ec;
  if (spec == "gpt2") {
    dir = FindResource(kGpt2TokenizerPath);
    if (dir.empty()) {
      return Status::NotFound(std::string("GPT-2's tokenizer files (") + kGpt2TokenizerPath +
                              ") not found; run scripts/setup.sh or pass --tokenizer gpt2:<dir>");
    }
  } else if (spec.rfind("gpt2:", 0) == 0) {
    dir = spec.substr(5);
  } else if (std::filesystem::is_directory(spec, ec)) {
    const std::filesystem::path d(spec);
    // A directory: GPT-2's two files, else a tokenizer.json (Hugging Face's), else an attnlab
    // vocabulary named vocab.json (what `attnlab tokenize --train --out DIR` writes).
    if (!std::filesystem::exists(d / "encoder.json", ec)) {
      if (std::filesystem::exists(d / "tokenizer.json", ec)) return LoadTokenizerJsonDirectory(d);
      if (std::filesystem::exists(d / "vocab.json", ec)) {
        return LoadBpeTokenizer((d / "vocab.json").string());
      }
      return Status::NotFound("tokenizer directory " + spec +
                              " holds neither GPT-2's encoder.json and vocab.bpe, nor a "
                              "tokenizer.json, nor an attnlab vocab.json");
    }
    dir = spec;
  }
  if (!dir.empty()) {
    const std::filesystem::path d(dir);
    return LoadGpt2Tokenizer((d / "encoder.json").string(), (d / "vocab.bpe").string());
  }
  if (spec.empty()) {
    return Status::InvalidArgument(
        "empty tokenizer spec; expected \"byte\", \"gpt2\", \"gpt2:<dir with encoder.json and "
        "vocab.bpe>\", \"hf:<tokenizer.json or its directory>\", a directory, or an attnlab "
        "vocabulary file");
  }
  Result<std::unique_ptr<Tokenizer>> t = LoadBpeTokenizer(spec);
  if (t.status().code() == StatusCode::kNotFound) {
    return t.status().WithContext("tokenizer \"" + spec +
                                  "\" is not \"byte\", \"gpt2\", \"gpt2:<dir>\", "
                                  "\"hf:<path>\", a directory or an existing vocabulary file");
  }
  return t;
}

}  // namespace attnlab
