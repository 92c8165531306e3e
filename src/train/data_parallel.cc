#include "train/data_parallel.h"

#include <algorithm>
#include <string>

namespace attnlab {

BatchShare ShareOfBatch(const int32_t* targets, int64_t B, int64_t T, int rank, int P) {
  ATTNLAB_CHECK(P >= 1 && rank >= 0 && rank < P && B >= P);
  BatchShare s;
  s.begin = rank * B / P;
  s.end = (rank + 1) * B / P;
  int64_t all = 0, mine = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    const bool valid = targets[i] >= 0;
    all += valid;
    mine += valid && i >= s.begin * T && i < s.end * T;
  }
  s.weight = all > 0 ? static_cast<double>(mine) / static_cast<double>(all) : 0.0;
  return s;
}

std::vector<dist::GradientBucket> BackwardBuckets(const ParameterStore& grads, int64_t n_layer) {
  // Each layer's parameters are contiguous in ParameterLayout; anything else (embeddings before
  // the layers, final norm and head after them) goes to the last bucket.
  std::vector<int64_t> lo(n_layer, grads.size()), hi(n_layer, 0), sum(n_layer, 0);
  std::vector<std::pair<int64_t, int64_t>> rest;
  for (const ParamInfo& p : grads.infos()) {
    int64_t layer = -1;
    if (p.name.rfind("h.", 0) == 0) {
      const size_t dot = p.name.find('.', 2);
      if (dot != std::string::npos) layer = std::stoll(p.name.substr(2, dot - 2));
    }
    if (layer >= 0 && layer < n_layer) {
      lo[layer] = std::min(lo[layer], p.offset);
      hi[layer] = std::max(hi[layer], p.offset + p.size);
      sum[layer] += p.size;
    } else {
      rest.push_back({p.offset, p.size});
    }
  }
  std::vector<dist::GradientBucket> out;
  for (int64_t l = n_layer - 1; l >= 0; --l) {
    dist::GradientBucket b;
    b.name = "layer " + std::to_string(l);
    if (sum[l] > 0) {
      ATTNLAB_CHECK(hi[l] - lo[l] == sum[l]);  // contiguous (ParameterLayout's order)
      b.ranges.push_back({lo[l], sum[l]});
    }
    out.push_back(std::move(b));
  }
  // Merge adjacent ranges of the rest.
  std::sort(rest.begin(), rest.end());
  dist::GradientBucket last;
  last.name = "the embeddings and head";
  for (const auto& r : rest) {
    if (!last.ranges.empty() && last.ranges.back().first + last.ranges.back().second == r.first) {
      last.ranges.back().second += r.second;
    } else if (r.second > 0) {
      last.ranges.push_back(r);
    }
  }
  out.push_back(std::move(last));
  return out;
}

}  // namespace attnlab
