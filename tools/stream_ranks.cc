#include "stream_ranks.h"

#include <string>

namespace attnlab::cli {

std::vector<int> StreamPolicyOwners(const std::vector<CachePolicy>& policies, int ranks) {
  std::vector<int> owners;
  int in_order = 0;
  for (CachePolicy p : policies) {
    owners.push_back(p == CachePolicy::kRecompute ? kSharedPolicy : in_order++ % ranks);
  }
  return owners;
}

Status MergeStreamRanks(dist::Comm& comm, const std::vector<int>& owners, int64_t scored,
                        int64_t chunk, std::vector<StreamEvalResult>& results) {
  if (comm.size() == 1) return Status::Ok();
  if (owners.size() != results.size() || scored < 1 || chunk < 1) {
    return Status::InvalidArgument("stream: merging " + std::to_string(results.size()) +
                                   " results with " + std::to_string(owners.size()) + " owners");
  }
  const int me = comm.rank();
  const int64_t chunks = (scored + chunk - 1) / chunk;
  constexpr int64_t kScalars = 4, kChunkFields = 9;
  const int64_t F = kScalars + kChunkFields * chunks + scored;
  std::vector<double> seconds(results.size(), 0.0);
  for (size_t k = 0; k < results.size(); ++k) {
    StreamEvalResult& r = results[k];
    const bool shared = owners[k] == kSharedPolicy, whole = owners[k] == me;
    const std::string what = "stream: merging the " + r.policy + " policy";
    if ((whole || shared) && (static_cast<int64_t>(r.token_nll.size()) != scored ||
                              static_cast<int64_t>(r.chunks.size()) != chunks)) {
      return Status::Internal(what + ": " + std::to_string(r.token_nll.size()) + " tokens and " +
                              std::to_string(r.chunks.size()) + " chunks, expected " +
                              std::to_string(scored) + " and " + std::to_string(chunks));
    }
    // What this rank contributes: everything it computed of a whole policy; of a shared one,
    // its tokens' losses and its chunk rates, and (rank 0 only) what every rank computed alike.
    const bool facts = whole || (shared && me == 0);
    std::vector<double> v(F, 0.0);
    if (facts) {
      v[0] = static_cast<double>(r.tokens), v[1] = static_cast<double>(r.eviction_from);
      v[2] = static_cast<double>(r.beyond_context_from), v[3] = static_cast<double>(r.max_cache_tokens);
    }
    for (int64_t c = 0; c < chunks && (whole || shared); ++c) {
      const StreamChunk& ch = r.chunks[c];
      double* p = v.data() + kScalars + kChunkFields * c;
      if (facts) {
        p[0] = static_cast<double>(ch.end), p[1] = static_cast<double>(ch.cache_tokens);
        p[2] = static_cast<double>(ch.cache_bytes), p[3] = static_cast<double>(ch.rss_bytes);
        p[4] = ch.chunk_loss;  // recomputed for a shared policy
        p[6] = ch.kept_first, p[7] = ch.kept_window, p[8] = ch.kept_older;
      }
      p[5] = ch.tokens_per_s;  // a shared policy: the ranks' rates add up
    }
    if (whole || shared) {
      std::copy(r.token_nll.begin(), r.token_nll.end(), v.begin() + kScalars + kChunkFields * chunks);
      seconds[k] = r.seconds;
    }
    ATTNLAB_RETURN_IF_ERROR(comm.AllReduceSum(v, what));
    r.tokens = static_cast<int64_t>(v[0]), r.eviction_from = static_cast<int64_t>(v[1]);
    r.beyond_context_from = static_cast<int64_t>(v[2]);
    r.max_cache_tokens = static_cast<int64_t>(v[3]);
    r.chunks.assign(chunks, StreamChunk{});
    for (int64_t c = 0; c < chunks; ++c) {
      const double* p = v.data() + kScalars + kChunkFields * c;
      StreamChunk& ch = r.chunks[c];
      ch.end = static_cast<int64_t>(p[0]), ch.cache_tokens = static_cast<int64_t>(p[1]);
      ch.cache_bytes = static_cast<int64_t>(p[2]), ch.rss_bytes = static_cast<int64_t>(p[3]);
      ch.chunk_loss = p[4], ch.tokens_per_s = p[5];
      ch.kept_first = p[6], ch.kept_window = p[7], ch.kept_older = p[8];
    }
    r.token_nll.assign(v.begin() + kScalars + kChunkFields * chunks, v.end());
    // The running means, and a shared policy's chunk losses, in token order as one process adds.
    RecomputeStreamLosses(r);
  }
  ATTNLAB_RETURN_IF_ERROR(comm.AllReduceMax(seconds, "stream: the policies' times"));
  for (size_t k = 0; k < results.size(); ++k) {
    results[k].seconds = seconds[k];
    results[k].tokens_per_s = seconds[k] > 0 ? results[k].tokens / seconds[k] : 0.0;
  }
  return Status::Ok();
}

}  // namespace attnlab::cli
