// Byte-level BPE encoding: a validated BpeModel, the merge loop, and a cache of encoded pieces.
//
// The merge loop is encoder.py's bpe() without its quadratic rescans. encoder.py, per piece:
//   word = the piece's bytes, one symbol each
//   loop: bigram = the adjacent pair with the lowest rank; stop if none has a rank
//         merge every occurrence of bigram in word, scanning left to right, non-overlapping
// Here the symbols form a linked list and every adjacent pair that has a rank sits in a min-heap
// ordered by (rank, position). One round pops all entries of the lowest rank (in position
// order), merges those still valid left to right, then pushes the pairs the merges created.
// A round is exactly one iteration of encoder.py's loop: since a rank names one pair, the
// entries of the lowest rank are the occurrences of `bigram`, and an entry made stale by an
// earlier merge of the same round (the overlapping "a a a" case) is skipped as encoder.py's scan
// skips it. O(n log n) per piece instead of O(n^2): a 100 kB run of digits is one piece.
#include <array>
#include <cstdio>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnlab/tokenizer.h"

namespace attnlab {
namespace {

inline uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Pieces up to this many bytes are cached; the cache is emptied when it reaches kCacheEntries.
constexpr size_t kCacheMaxPieceBytes = 128;
constexpr size_t kCacheEntries = 1 << 17;

class BpeTokenizer final : public Tokenizer {
 public:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  BpeTokenizer(BpeModel model, std::array<int32_t, 256> byte_ids,
               std::unordered_map<uint64_t, Merge> merges, std::vector<SpecialToken> specials)
      : model_(std::move(model)),
        byte_ids_(byte_ids),
        merges_(std::move(merges)),
        specials_(std::move(specials)) {}

  Result<std::vector<int32_t>> Encode(std::string_view bytes) const override {
    std::vector<int32_t> out;
    out.reserve(bytes.size() / 3 + 1);
    Gpt2PreTokenizer pt(bytes);
    std::string_view piece;
    while (pt.Next(&piece)) EncodePiece(piece, &out);
    return out;
  }

  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (const int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) return BadId(id);
      out += model_.tokens[static_cast<size_t>(id)];
    }
    return out;
  }

  Result<std::string> TokenBytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return BadId(id);
    return model_.tokens[static_cast<size_t>(id)];
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(model_.tokens.size()); }
  std::string name() const override { return model_.name; }
  std::optional<int32_t> bos_id() const override { return model_.bos_id; }
  std::optional<int32_t> eos_id() const override { return model_.eos_id; }
  std::span<const SpecialToken> special_tokens() const override { return specials_; }

 private:
  Status BadId(int32_t id) const {
    return Status::OutOfRange("token id " + std::to_string(id) + " is outside [0, " +
                              std::to_string(vocab_size()) + ") of tokenizer " + model_.name);
  }

  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
    if (piece.size() == 1) {
      out->push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
      return;
    }
    const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(std::string(piece));
      if (it != cache_.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
    MergeAll(&ids);
    out->insert(out->end(), ids.begin(), ids.end());
    if (cacheable) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cache_.size() >= kCacheEntries) cache_.clear();
      cache_.emplace(std::string(piece), std::move(ids));
    }
  }

  // Applies the merges to one piece's symbols (file comment).
  void MergeAll(std::vector<int32_t>* ids) const {
    const int32_t n = static_cast<int32_t>(ids->size());
    if (n < 2) return;
    struct Symbol {
      int32_t id;          // -1 once merged into its left neighbour
      int32_t prev, next;  // -1 at the ends
    };
    std::vector<Symbol> sym(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) sym[i] = {(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1};

    struct Candidate {
      int32_t rank, pos;    // pos: the left symbol
      int32_t left, right;  // the ids when pushed; a mismatch later means stale
      int32_t result;
    };
    const auto later = [](const Candidate& a, const Candidate& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
    const auto push = [&](int32_t pos) {
      const int32_t next = sym[pos].next;
      if (next < 0) return;
      auto it = merges_.find(PairKey(sym[pos].id, sym[next].id));
      if (it == merges_.end()) return;
      heap.push({it->second.rank, pos, sym[pos].id, sym[next].id, it->second.result});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);

    std::vector<Candidate> round;
    std::vector<int32_t> merged;
    while (!heap.empty()) {
      const int32_t rank = heap.top().rank;
      round.clear();
      while (!heap.empty() && heap.top().rank == rank) {  // in position order
        round.push_back(heap.top());
        heap.pop();
      }
      merged.clear();
      for (const Candidate& c : round) {
        Symbol& a = sym[c.pos];
        // A live symbol's right neighbour changes only when the symbol itself merges, so
        // matching ids mean this pair is still there.
        if (a.id != c.left || a.next < 0 || sym[a.next].id != c.right) continue;
        Symbol& b = sym[a.next];
        a.id = c.result;
        a.next = b.next;
        if (b.next >= 0) sym[b.next].prev = c.pos;
        b.id = -1;
        merged.push_back(c.pos);
      }
      for (const int32_t pos : merged) {
        if (sym[pos].prev >= 0) push(sym[pos].prev);
        push(pos);
      }
    }
    ids->clear();
    for (int32_t i = 0; i >= 0; i = sym[i].next) ids->push_back(sym[i].id);
  }

  const BpeModel model_;
  const std::array<int32_t, 256> byte_ids_;
  const std::unordered_map<uint64_t, Merge> merges_;
  const std::vector<SpecialToken> specials_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(BpeModel model) {
  const std::string& who = model.name;
  const size_t n = model.tokens.size();
  if (n == 0 || n > static_cast<size_t>(kMaxBpeVocabSize)) {
    return Status::Corrupt(who + ": " + std::to_string(n) + " tokens; expected 1 to " +
                           std::to_string(kMaxBpeVocabSize));
  }
  const auto valid_id = [&](int64_t id) { return id >= 0 && id < static_cast<int64_t>(n); };

  std::vector<bool> is_special(n, false);
  std::vector<SpecialToken> specials;
  for (const int32_t id : model.special_ids) {
    if (!valid_id(id)) {
      return Status::Corrupt(who + ": special token id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(n) + ")");
    }
    if (is_special[id]) {
      return Status::Corrupt(who + ": special token id " + std::to_string(id) + " listed twice");
    }
    is_special[id] = true;
    specials.push_back({model.tokens[id], id});
  }
  for (const std::optional<int32_t>& id : {model.bos_id, model.eos_id}) {
    if (id && !valid_id(*id)) {
      return Status::Corrupt(who + ": bos/eos id " + std::to_string(*id) + " is outside [0, " +
                             std::to_string(n) + ")");
    }
  }

  // Ordinary tokens: distinct, non-empty byte strings that include every single byte.
  std::unordered_map<std::string_view, int32_t> by_bytes;
  by_bytes.reserve(n);
  std::array<int32_t, 256> byte_ids;
  byte_ids.fill(-1);
  for (size_t id = 0; id < n; ++id) {
    if (is_special[id]) continue;
    const std::string& t = model.tokens[id];
    if (t.empty()) return Status::Corrupt(who + ": token " + std::to_string(id) + " is empty");
    auto [it, inserted] = by_bytes.emplace(t, static_cast<int32_t>(id));
    if (!inserted) {
      return Status::Corrupt(who + ": tokens " + std::to_string(it->second) + " and " +
                             std::to_string(id) + " are the same bytes \"" + Gpt2RenderBytes(t) +
                             "\"");
    }
    if (t.size() == 1) byte_ids[static_cast<uint8_t>(t[0])] = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    if (byte_ids[b] < 0) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", b);
      return Status::Corrupt(who + ": no token for the single byte " + hex +
                             " (a byte-level BPE needs all 256)");
    }
  }

  std::unordered_map<uint64_t, BpeTokenizer::Merge> merges;
  merges.reserve(model.merges.size());
  for (size_t rank = 0; rank < model.merges.size(); ++rank) {
    const auto [left, right] = model.merges[rank];
    const std::string where = who + ": merge " + std::to_string(rank) + " (" +
                              std::to_string(left) + ", " + std::to_string(right) + ")";
    if (!valid_id(left) || !valid_id(right) || is_special[left] || is_special[right]) {
      return Status::Corrupt(where + " names an id that is not an ordinary token");
    }
    auto it = by_bytes.find(model.tokens[left] + model.tokens[right]);
    if (it == by_bytes.end()) {
      return Status::Corrupt(where + ": its result \"" +
                             Gpt2RenderBytes(model.tokens[left] + model.tokens[right]) +
                             "\" is not a token");
    }
    if (!merges
             .emplace(PairKey(left, right),
                      BpeTokenizer::Merge{static_cast<int32_t>(rank), it->second})
             .second) {
      return Status::Corrupt(where + " repeats an earlier merge");
    }
  }
  return std::unique_ptr<Tokenizer>(
      new BpeTokenizer(std::move(model), byte_ids, std::move(merges), std::move(specials)));
}

}  // namespace attnlab
