// The Hugging Face / GGUF tokenizer itself (tokenizer_hf.h): validation of an HfSpec, the three
// encoders, decoding.
//
// Rank merges (kByteLevel, kCharBpe) are Hugging Face's BPE::merge_word: the symbols of a piece
// form a linked list, every adjacent pair that has a merge sits in a min-heap ordered by (rank,
// position of its left symbol), and the smallest is merged one at a time, the pairs it creates
// pushed at once; a popped pair whose symbols changed is stale and skipped. (This merges the same
// pairs as encoder.py's rounds in tokenizer_bpe.cc: a merge result is longer than both halves, so
// it never recreates the pair being merged.)
//
// Score merges (kSpmScores) are llama.cpp's SPM tokenizer: the symbols are characters, a pair is
// a candidate when its concatenation is an ordinary token, and the candidate whose token has the
// highest score (ties: the leftmost) is merged first; symbols left without a token become byte
// tokens.
#include "tokenizer/tokenizer_hf_model.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attnlab::hf_internal {

std::string ByteFallbackToken(uint8_t byte) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<unsigned>(byte));
  return buf;
}

std::string QuoteForError(std::string_view s) {
  std::string out = "\"";
  const size_t n = std::min<size_t>(s.size(), 60);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > n) out += "...";
  return out + "\"";
}

namespace {

inline uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Merge {
  int32_t rank;
  int32_t result;
};
using MergeMap = std::unordered_map<uint64_t, Merge>;
using TokenMap = std::unordered_map<std::string, int32_t>;

constexpr size_t kCacheMaxPieceBytes = 128;
constexpr size_t kCacheEntries = 1 << 17;

// Hugging Face's merge_word loop over `ids` (file comment).
void MergeByRank(const MergeMap& merges, std::vector<int32_t>* ids) {
  const int32_t n = static_cast<int32_t>(ids->size());
  if (n < 2 || merges.empty()) return;
  struct Symbol {
    int32_t id, prev, next;  // id -1: merged into its left neighbour
  };
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[i] = {(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1};
  struct Candidate {
    int32_t rank, pos, left, right, result;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  const auto push = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    auto it = merges.find(PairKey(sym[pos].id, sym[next].id));
    if (it == merges.end()) return;
    heap.push({it->second.rank, pos, sym[pos].id, sym[next].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& a = sym[c.pos];
    if (a.id != c.left || a.next < 0 || sym[a.next].id != c.right) continue;  // stale
    Symbol& b = sym[a.next];
    a.id = c.result;
    a.next = b.next;
    if (b.next >= 0) sym[b.next].prev = c.pos;
    b.id = -1;
    if (a.prev >= 0) push(a.prev);
    push(c.pos);
  }
  ids->clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) ids->push_back(sym[i].id);
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(HfSpec spec, std::vector<std::string> bytes, TokenMap ordinary, MergeMap merges,
              std::array<int32_t, 256> byte_ids, std::optional<int32_t> unk_id)
      : spec_(std::move(spec)),
        bytes_(std::move(bytes)),
        ordinary_(std::move(ordinary)),
        merges_(std::move(merges)),
        byte_ids_(byte_ids),
        unk_id_(unk_id) {
    for (size_t id = 0; id < spec_.tokens.size(); ++id) {
      if (spec_.special[id]) specials_.push_back({spec_.tokens[id], static_cast<int32_t>(id)});
    }
  }

  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 1);
    switch (spec_.family) {
      case Family::kByteLevel:
        EncodeByteLevel(text, &out);
        break;
      case Family::kCharBpe:
        ATTNLAB_RETURN_IF_ERROR(EncodeCharBpe(text, &out));
        break;
      case Family::kSpmScores:
        EncodeSpm(text, &out);
        break;
    }
    return out;
  }

  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (const int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) return BadId(id);
      out += bytes_[static_cast<size_t>(id)];
    }
    if (spec_.strip_leading_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
    return out;
  }

  Result<std::string> TokenBytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return BadId(id);
    return bytes_[static_cast<size_t>(id)];
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_.size()); }
  std::string name() const override { return spec_.name; }
  std::optional<int32_t> bos_id() const override { return spec_.bos; }
  std::optional<int32_t> eos_id() const override { return spec_.eos; }
  bool adds_bos() const override { return spec_.adds_bos && spec_.bos.has_value(); }
  std::span<const SpecialToken> special_tokens() const override { return specials_; }

 private:
  Status BadId(int32_t id) const {
    return Status::OutOfRange("token id " + std::to_string(id) + " is outside [0, " +
                              std::to_string(vocab_size()) + ") of tokenizer " + spec_.name);
  }

  bool CacheLookup(std::string_view piece, std::vector<int32_t>* out) const {
    if (piece.size() > kCacheMaxPieceBytes) return false;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(std::string(piece));
    if (it == cache_.end()) return false;
    out->insert(out->end(), it->second.begin(), it->second.end());
    return true;
  }
  void CacheStore(std::string_view piece, const std::vector<int32_t>& ids) const {
    if (piece.size() > kCacheMaxPieceBytes) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), ids);
  }

  // ---- byte-level

  void EncodeByteLevel(std::string_view text, std::vector<int32_t>* out) const {
    std::vector<std::string_view> first;
    if (spec_.split) {
      first = HfPreTokenize(*spec_.split, text);
    } else if (!text.empty()) {
      first.push_back(text);
    }
    std::string prefixed;
    for (std::string_view piece : first) {
      if (spec_.add_prefix_space && piece[0] != ' ') {
        prefixed = " ";
        prefixed += piece;
        piece = prefixed;
      }
      if (!spec_.use_regex) {
        EncodeBytePiece(piece, out);
        continue;
      }
      Gpt2PreTokenizer pt(piece);
      std::string_view sub;
      while (pt.Next(&sub)) EncodeBytePiece(sub, out);
    }
  }

  void EncodeBytePiece(std::string_view piece, std::vector<int32_t>* out) const {
    if (piece.size() == 1) {
      out->push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
      return;
    }
    if (CacheLookup(piece, out)) return;
    std::vector<int32_t> ids;
    if (spec_.ignore_merges) {
      auto it = ordinary_.find(Gpt2RenderBytes(piece));
      if (it != ordinary_.end()) ids.push_back(it->second);
    }
    if (ids.empty()) {
      ids.resize(piece.size());
      for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
      MergeByRank(merges_, &ids);
    }
    out->insert(out->end(), ids.begin(), ids.end());
    CacheStore(piece, ids);
  }

  // ---- SentencePiece-style BPE

  // The text after the normalizer and Metaspace's replacement and prefix.
  std::string MetaspaceText(std::string_view text) const {
    std::string s;
    if (text.empty()) return s;
    if (spec_.prepend_metaspace) s = kMetaspace;
    for (const char c : text) {
      if (c == ' ' && (spec_.replace_spaces || spec_.metaspace)) {
        s += kMetaspace;
      } else {
        s += c;
      }
    }
    if (spec_.metaspace && spec_.metaspace_prepend && s.rfind(kMetaspace, 0) != 0) {
      s.insert(0, kMetaspace);
    }
    return s;
  }

  Status EncodeCharBpe(std::string_view text, std::vector<int32_t>* out) const {
    const std::string s = MetaspaceText(text);
    if (!spec_.metaspace || !spec_.metaspace_split) return EncodeCharPiece(s, out);
    // Split before every ▁ (Hugging Face's MergedWithNext).
    size_t start = 0;
    while (start < s.size()) {
      size_t next = s.find(kMetaspace, start + 1);
      if (next == std::string::npos) next = s.size();
      ATTNLAB_RETURN_IF_ERROR(EncodeCharPiece(std::string_view(s).substr(start, next - start), out));
      start = next;
    }
    return Status::Ok();
  }

  Status EncodeCharPiece(std::string_view piece, std::vector<int32_t>* out) const {
    if (piece.empty()) return Status::Ok();
    if (CacheLookup(piece, out)) return Status::Ok();
    std::vector<int32_t> ids;
    if (spec_.ignore_merges) {
      auto it = ordinary_.find(std::string(piece));
      if (it != ordinary_.end()) ids.push_back(it->second);
    }
    if (ids.empty()) {
      bool pending_unk = false;  // the last symbol is an unk that fuse_unk may extend
      for (size_t pos = 0; pos < piece.size();) {
        const Utf8Char c = DecodeUtf8Char(piece.substr(pos));
        const std::string_view ch = piece.substr(pos, static_cast<size_t>(c.length));
        pos += static_cast<size_t>(c.length);
        auto it = c.valid ? ordinary_.find(std::string(ch)) : ordinary_.end();
        if (it != ordinary_.end()) {
          ids.push_back(it->second);
          pending_unk = false;
        } else if (spec_.byte_fallback) {
          for (const char b : ch) ids.push_back(byte_ids_[static_cast<uint8_t>(b)]);
          pending_unk = false;
        } else if (unk_id_) {
          if (!(pending_unk && spec_.fuse_unk)) ids.push_back(*unk_id_);
          pending_unk = true;
        } else {
          return Status::InvalidArgument(spec_.name + ": the character " + QuoteForError(ch) +
                                         " has no token, and the tokenizer has neither "
                                         "byte_fallback nor an unk_token");
        }
      }
      MergeByRank(merges_, &ids);
    }
    out->insert(out->end(), ids.begin(), ids.end());
    CacheStore(piece, ids);
    return Status::Ok();
  }

  // ---- llama.cpp's SPM

  void EncodeSpm(std::string_view text, std::vector<int32_t>* out) const {
    if (text.empty()) return;
    std::string s = std::string(kMetaspace);
    for (const char c : text) {
      if (c == ' ') {
        s += kMetaspace;
      } else {
        s += c;
      }
    }
    struct Symbol {
      int32_t start, length, prev, next;  // length 0: merged away
    };
    std::vector<Symbol> sym;
    for (size_t pos = 0; pos < s.size();) {
      const int32_t len = DecodeUtf8Char(std::string_view(s).substr(pos)).length;
      const int32_t i = static_cast<int32_t>(sym.size());
      sym.push_back({static_cast<int32_t>(pos), len, i - 1, -1});
      if (i > 0) sym[i - 1].next = i;
      pos += static_cast<size_t>(len);
    }
    struct Bigram {
      float score;
      int32_t left, right, length;
    };
    const auto worse = [](const Bigram& a, const Bigram& b) {
      return a.score != b.score ? a.score < b.score : a.left > b.left;
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> heap(worse);
    const auto text_of = [&](int32_t start, int32_t length) {
      return std::string(std::string_view(s).substr(static_cast<size_t>(start),
                                                    static_cast<size_t>(length)));
    };
    const auto try_add = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const int32_t length = sym[left].length + sym[right].length;
      auto it = ordinary_.find(text_of(sym[left].start, length));
      if (it == ordinary_.end()) return;
      heap.push({spec_.scores[static_cast<size_t>(it->second)], left, right, length});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
    while (!heap.empty()) {
      const Bigram b = heap.top();
      heap.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.length == 0 || r.length == 0 || l.next != b.right || l.length + r.length != b.length) {
        continue;  // stale
      }
      l.length = b.length;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      r.length = 0;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int32_t i = 0; i >= 0 && !sym.empty(); i = sym[i].next) {
      const std::string t = text_of(sym[i].start, sym[i].length);
      auto it = ordinary_.find(t);
      if (it != ordinary_.end()) {
        out->push_back(it->second);
      } else {
        for (const char c : t) out->push_back(byte_ids_[static_cast<uint8_t>(c)]);
      }
    }
  }

  const HfSpec spec_;
  const std::vector<std::string> bytes_;  // id -> the bytes Decode gives
  const TokenMap ordinary_;               // text as in the file -> id, specials excluded
  const MergeMap merges_;
  const std::array<int32_t, 256> byte_ids_;  // byte -> its token (bytes or byte fallback)
  const std::optional<int32_t> unk_id_;
  std::vector<SpecialToken> specials_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// The byte Decode gives for "<0xNN>" (upper- or lower-case hex), or -1.
int ParseByteFallbackToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (const char c : t.substr(3, 2)) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

// id -> the bytes of an ordinary token (Corrupt for a byte-level token that is not rendered).
Result<std::string> OrdinaryTokenBytes(const HfSpec& spec, size_t id) {
  const std::string& t = spec.tokens[id];
  if (spec.family == Family::kByteLevel) {
    Result<std::string> b = Gpt2UnrenderBytes(t);
    if (!b.ok()) {
      return Status::Corrupt(spec.source + ": token " + std::to_string(id) + " " +
                             QuoteForError(t) + " is not a byte-level token: " +
                             b.status().message());
    }
    return b;
  }
  const int byte = ParseByteFallbackToken(t);
  if (byte >= 0) return std::string(1, static_cast<char>(byte));
  std::string out;
  for (size_t pos = 0; pos < t.size();) {
    if (t.compare(pos, kMetaspace.size(), kMetaspace) == 0) {
      out += ' ';
      pos += kMetaspace.size();
    } else {
      out += t[pos++];
    }
  }
  return out;
}

// Validates the ordinary tokens: their bytes, the text -> id map, the byte tokens.
Status BuildTokenTables(const HfSpec& spec, std::vector<std::string>* bytes, TokenMap* ordinary,
                        std::array<int32_t, 256>* byte_ids) {
  const size_t n = spec.tokens.size();
  bytes->resize(n);
  ordinary->reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& t = spec.tokens[id];
    if (t.empty()) {
      return Status::Corrupt(spec.source + ": token " + std::to_string(id) + " is empty");
    }
    if (spec.special[id]) {
      (*bytes)[id] = t;
      continue;
    }
    ATTNLAB_ASSIGN_OR_RETURN((*bytes)[id], OrdinaryTokenBytes(spec, id));
    auto [it, inserted] = ordinary->emplace(t, static_cast<int32_t>(id));
    if (!inserted) {
      return Status::Corrupt(spec.source + ": tokens " + std::to_string(it->second) + " and " +
                             std::to_string(id) + " are both " + QuoteForError(t));
    }
  }
  byte_ids->fill(-1);
  const bool needs_bytes = spec.family != Family::kCharBpe || spec.byte_fallback;
  for (int b = 0; b < 256 && needs_bytes; ++b) {
    const std::string want = spec.family == Family::kByteLevel
                                 ? Gpt2RenderBytes(std::string(1, static_cast<char>(b)))
                                 : ByteFallbackToken(static_cast<uint8_t>(b));
    auto it = ordinary->find(want);
    if (it == ordinary->end()) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      return Status::Corrupt(spec.source + ": no token for the byte " + hex + " (" +
                             QuoteForError(want) + ")" +
                             (spec.family == Family::kByteLevel
                                  ? "; a byte-level BPE needs all 256"
                                  : "; byte fallback needs all 256 tokens <0x00>..<0xFF>"));
    }
    (*byte_ids)[b] = it->second;
  }
  return Status::Ok();
}

Result<MergeMap> BuildMerges(const HfSpec& spec, const TokenMap& ordinary) {
  MergeMap merges;
  merges.reserve(spec.merges.size());
  const auto describe = [&](const std::string& t) {
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      if (spec.special[id] && spec.tokens[id] == t) return std::string(" is a special token");
    }
    return std::string(" is not a token of the vocabulary");
  };
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [l, r] = spec.merges[rank];
    const std::string where = spec.source + ": merge " + std::to_string(rank) + " " +
                              QuoteForError(l + " " + r) + ": ";
    auto li = ordinary.find(l), ri = ordinary.find(r), mi = ordinary.find(l + r);
    if (li == ordinary.end()) return Status::Corrupt(where + QuoteForError(l) + describe(l));
    if (ri == ordinary.end()) return Status::Corrupt(where + QuoteForError(r) + describe(r));
    if (mi == ordinary.end()) {
      return Status::Corrupt(where + "the merged token " + QuoteForError(l + r) + describe(l + r));
    }
    if (!merges.emplace(PairKey(li->second, ri->second), Merge{static_cast<int32_t>(rank),
                                                                mi->second})
             .second) {
      return Status::Corrupt(where + "repeats an earlier merge");
    }
  }
  return merges;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> BuildHfTokenizer(HfSpec spec) {
  const size_t n = spec.tokens.size();
  if (n == 0 || n > static_cast<size_t>(kMaxBpeVocabSize)) {
    return Status::Corrupt(spec.source + ": " + std::to_string(n) + " tokens; expected 1 to " +
                           std::to_string(kMaxBpeVocabSize));
  }
  if (spec.special.size() != n) return Status::Internal(spec.source + ": special flags");
  if (spec.family == Family::kSpmScores) {
    if (spec.scores.size() != n) {
      return Status::Corrupt(spec.source + ": " + std::to_string(spec.scores.size()) +
                             " scores for " + std::to_string(n) + " tokens");
    }
    for (size_t id = 0; id < n; ++id) {
      if (!std::isfinite(spec.scores[id])) {
        return Status::Corrupt(spec.source + ": the score of token " + std::to_string(id) +
                               " is not finite");
      }
    }
  }
  std::vector<std::string> bytes;
  TokenMap ordinary;
  std::array<int32_t, 256> byte_ids;
  ATTNLAB_RETURN_IF_ERROR(BuildTokenTables(spec, &bytes, &ordinary, &byte_ids));
  ATTNLAB_ASSIGN_OR_RETURN(MergeMap merges, BuildMerges(spec, ordinary));
  std::optional<int32_t> unk_id;
  if (spec.unk_token) {
    auto it = ordinary.find(*spec.unk_token);
    if (it != ordinary.end()) unk_id = it->second;
    for (size_t id = 0; id < n && !unk_id; ++id) {
      if (spec.special[id] && spec.tokens[id] == *spec.unk_token) unk_id = static_cast<int32_t>(id);
    }
    if (!unk_id) {
      return Status::Corrupt(spec.source + ": unk_token " + QuoteForError(*spec.unk_token) +
                             " is not a token of the vocabulary");
    }
  }
  for (const auto& [what, id] : {std::pair{"bos", spec.bos}, std::pair{"eos", spec.eos}}) {
    if (id && (*id < 0 || *id >= static_cast<int64_t>(n))) {
      return Status::Corrupt(spec.source + ": " + what + " id " + std::to_string(*id) +
                             " is outside [0, " + std::to_string(n) + ")");
    }
  }
  return std::unique_ptr<Tokenizer>(new HfTokenizer(std::move(spec), std::move(bytes),
                                                    std::move(ordinary), std::move(merges),
                                                    byte_ids, unk_id));
}

}  // namespace attnlab::hf_internal
