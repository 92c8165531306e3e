// BPE training with incremental pair counts (the algorithm box; contract in attnlab/tokenizer.h).
//
//   words   = distinct pre-tokenised pieces, each a list of token ids (initially its bytes) with
//             its frequency f(w)
//   count   = for every adjacent pair (a, b): sum over words of f(w) * occurrences in w
//   where   = for every pair: the words that contained it when it was counted (may be stale)
//   heap    = max-heap of (count, pair), ties to the smaller (a, b); entries may be stale
//   repeat num_merges times:
//     pop (c, p); if c != count[p]: re-push (count[p], p) and pop again   (lazy deletion)
//     stop if count[p] < min_pair_count
//     if bytes(a) + bytes(b) is already a token: never merge p, pop again
//     new id t; for every word w in where[p] that still contains p:
//       count -= pairs of w;  merge p -> t in w, left to right;  count += pairs of w
//       where[q] += w for the new pairs q that involve t
//     push (count[q], q) for every q whose count grew (only pairs that involve t can grow)
//
// The heap is exact where it matters: stale entries only overestimate (counts of old pairs only
// fall), so an entry whose count is current is the true maximum, tie-breaks included. Each merge
// costs time proportional to the pieces that hold its pair, not to the corpus.
#include <chrono>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "attnlab/tokenizer.h"

namespace attnlab {
namespace {

inline uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
inline int32_t PairLeft(uint64_t key) { return static_cast<int32_t>(key >> 32); }
inline int32_t PairRight(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> ids;
  int64_t count;
};

struct HeapEntry {
  int64_t count;
  uint64_t key;  // (left << 32) | right: smaller key = smaller (left, right)
};
struct HeapOrder {  // std::priority_queue pops the "largest": highest count, then smallest key
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.count != b.count ? a.count < b.count : a.key > b.key;
  }
};

// Merges every (left, right) in `ids` into `merged`, left to right, non-overlapping.
void MergeWord(std::vector<int32_t>* ids, int32_t left, int32_t right, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < ids->size(); ++out) {
    if (i + 1 < ids->size() && (*ids)[i] == left && (*ids)[i + 1] == right) {
      (*ids)[out] = merged;
      i += 2;
    } else {
      (*ids)[out] = (*ids)[i];
      i += 1;
    }
  }
  ids->resize(out);
}

Status CheckOptions(const BpeTrainerOptions& o) {
  if (o.num_merges < 0) {
    return Status::InvalidArgument("num_merges is " + std::to_string(o.num_merges) +
                                   "; expected >= 0");
  }
  if (o.min_pair_count < 1) {
    return Status::InvalidArgument("min_pair_count is " + std::to_string(o.min_pair_count) +
                                   "; expected >= 1");
  }
  const int64_t ids = 256 + int64_t{o.num_merges} + static_cast<int64_t>(o.special_tokens.size());
  if (ids > kMaxBpeVocabSize) {
    return Status::InvalidArgument(std::to_string(o.num_merges) + " merges and " +
                                   std::to_string(o.special_tokens.size()) +
                                   " special tokens make " + std::to_string(ids) +
                                   " ids; at most " + std::to_string(kMaxBpeVocabSize));
  }
  std::unordered_set<std::string_view> seen;
  for (const std::string& s : o.special_tokens) {
    if (s.empty() || !IsValidUtf8(s) || !seen.insert(s).second) {
      return Status::InvalidArgument("special token \"" + s +
                                     "\" is empty, not valid UTF-8, or repeated");
    }
  }
  return Status::Ok();
}

}  // namespace

void BpeTrainer::AddText(std::string_view text) {
  Gpt2PreTokenizer pt(text);
  std::string_view piece;
  while (pt.Next(&piece)) {
    ++pieces_;
    auto it = piece_counts_.find(piece);
    if (it != piece_counts_.end()) {
      ++it->second;
    } else {
      piece_counts_.emplace(std::string(piece), 1);
    }
  }
}

Result<BpeVocabulary> BpeTrainer::Train(const BpeTrainerOptions& options,
                                        BpeTrainerStats* stats) const {
  ATTNLAB_RETURN_IF_ERROR(CheckOptions(options));
  const auto start = std::chrono::steady_clock::now();
  BpeTrainerStats st;
  st.pieces = pieces_;
  st.distinct_pieces = static_cast<int64_t>(piece_counts_.size());

  // Words with at least one pair; their initial pair counts and where-lists.
  std::vector<Word> words;
  std::unordered_map<uint64_t, int64_t> count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (const auto& [piece, n] : piece_counts_) {
    if (piece.size() < 2) continue;
    Word w{std::vector<int32_t>(piece.size()), n};
    for (size_t i = 0; i < piece.size(); ++i) w.ids[i] = static_cast<uint8_t>(piece[i]);
    const int32_t wi = static_cast<int32_t>(words.size());
    for (size_t i = 0; i + 1 < w.ids.size(); ++i) {
      const uint64_t key = PairKey(w.ids[i], w.ids[i + 1]);
      count[key] += n;
      std::vector<int32_t>& list = where[key];
      if (list.empty() || list.back() != wi) list.push_back(wi);
    }
    words.push_back(std::move(w));
  }
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapOrder> heap;
  for (const auto& [key, c] : count) heap.push({c, key});

  BpeVocabulary vocab;
  vocab.special_tokens = options.special_tokens;
  std::vector<std::string> tokens;  // id -> bytes
  std::unordered_set<std::string> token_set;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    token_set.insert(tokens.back());
  }
  std::unordered_set<uint64_t> banned;             // pairs whose result already is a token
  std::vector<int32_t> visited(words.size(), -1);  // the last merge that updated each word
  std::unordered_map<uint64_t, int64_t> delta;

  while (static_cast<int32_t>(vocab.merges.size()) < options.num_merges && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    auto cit = count.find(top.key);
    const int64_t current = cit == count.end() ? 0 : cit->second;
    if (current != top.count) {  // stale
      if (current > 0) heap.push({current, top.key});
      continue;
    }
    if (current < options.min_pair_count) break;
    const int32_t left = PairLeft(top.key), right = PairRight(top.key);
    if (banned.count(top.key)) continue;
    std::string merged = tokens[left] + tokens[right];
    if (token_set.count(merged)) {
      banned.insert(top.key);
      ++st.skipped_pairs;
      continue;
    }
    const int32_t t = static_cast<int32_t>(tokens.size());
    const int32_t merge_index = static_cast<int32_t>(vocab.merges.size());
    vocab.merges.emplace_back(left, right);
    token_set.insert(merged);
    tokens.push_back(std::move(merged));

    delta.clear();
    std::vector<int32_t> occurrences = std::move(where[top.key]);
    where.erase(top.key);
    for (const int32_t wi : occurrences) {
      if (visited[wi] == merge_index) continue;
      visited[wi] = merge_index;
      Word& w = words[wi];
      bool present = false;
      for (size_t i = 0; i + 1 < w.ids.size() && !present; ++i) {
        present = w.ids[i] == left && w.ids[i + 1] == right;
      }
      if (!present) continue;  // stale: an earlier merge changed this word
      for (size_t i = 0; i + 1 < w.ids.size(); ++i) {
        delta[PairKey(w.ids[i], w.ids[i + 1])] -= w.count;
      }
      MergeWord(&w.ids, left, right, t);
      for (size_t i = 0; i + 1 < w.ids.size(); ++i) {
        const uint64_t key = PairKey(w.ids[i], w.ids[i + 1]);
        delta[key] += w.count;
        if (w.ids[i] == t || w.ids[i + 1] == t) {
          std::vector<int32_t>& list = where[key];
          if (list.empty() || list.back() != wi) list.push_back(wi);
        }
      }
    }
    for (const auto& [key, d] : delta) {
      if (d == 0) continue;
      int64_t& c = count[key];
      c += d;
      ATTNLAB_CHECK(c >= 0);
      if (c == 0) {  // gone from every word
        count.erase(key);
        where.erase(key);
      } else if (d > 0 && !banned.count(key)) {
        heap.push({c, key});
      }
    }
  }

  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stats) *stats = st;
  return vocab;
}

}  // namespace attnlab
