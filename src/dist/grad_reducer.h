// Data-parallel gradient reduction overlapped with the backward (issue 36; the bucketing of
// PyTorch DDP, Li et al. 2020, arXiv:2006.15704): the gradient buffer is cut into buckets in
// the order the backward finishes them (the last layer first); when a bucket is final the main
// thread calls Ready() and a communication thread sums it over the ranks (Comm::AllReduceSum:
// rank order, the same bits everywhere) while the backward computes the next layer. Finish()
// waits for the rest and says how much of the communication the backward hid.
//
// Buckets are summed strictly in index order, whatever order Ready() marks them in, so every rank
// issues the same collectives in the same order even when one rank's backward returned early
// (Finish() marks any bucket not yet marked).
#ifndef ATTNLAB_DIST_GRAD_REDUCER_H_
#define ATTNLAB_DIST_GRAD_REDUCER_H_

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attnlab/status.h"
#include "dist/comm.h"

namespace attnlab::dist {

// Ranges [offset, offset + size) of the gradient buffer summed together.
struct GradientBucket {
  std::string name;  // "layer 3", "embeddings and head"
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t floats() const {
    int64_t n = 0;
    for (const auto& r : ranges) n += r.second;
    return n;
  }
};

struct ReduceTiming {
  double comm_seconds = 0;     // the communication thread inside AllReduceSum, all buckets
  double exposed_seconds = 0;  // the main thread blocked in Finish()
  int64_t bytes = 0;           // sent by this rank
  // Share of the communication the backward hid: 1 - exposed / comm (1 when comm is 0).
  double hidden() const {
    return comm_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / comm_seconds) : 1.0;
  }
};

class GradientReducer {
 public:
  // grads: the buffer the buckets index (must outlive the reducer). REQUIRES: the buckets'
  // ranges are disjoint and inside the buffer.
  GradientReducer(Comm* comm, float* grads, int64_t size, std::vector<GradientBucket> buckets);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  const std::vector<GradientBucket>& buckets() const { return buckets_; }

  // Starts a step: no bucket is marked. `what` names the step in errors.
  void Begin(const std::string& what);
  // Bucket i is final for this step: summing starts on the communication thread.
  void Ready(size_t i);
  // Marks the rest, waits until every bucket is summed; the first error of any bucket.
  Status Finish(ReduceTiming* timing);

 private:
  void Loop();

  Comm* comm_;
  float* grads_;
  int64_t size_;
  std::vector<GradientBucket> buckets_;
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> marked_;
  size_t done_ = 0;  // buckets summed this step; the next one to sum is buckets_[done_]
  double comm_seconds_ = 0;
  int64_t bytes_ = 0;
  Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace attnlab::dist

#endif  // ATTNLAB_DIST_GRAD_REDUCER_H_
