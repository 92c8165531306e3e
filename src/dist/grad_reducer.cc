#include "dist/grad_reducer.h"

#include <chrono>

namespace attnlab::dist {

GradientReducer::GradientReducer(Comm* comm, float* grads, int64_t size,
                                 std::vector<GradientBucket> buckets)
    : comm_(comm), grads_(grads), size_(size), buckets_(std::move(buckets)) {
  for (const GradientBucket& b : buckets_) {
    for (const auto& [off, n] : b.ranges) ATTNLAB_CHECK(off >= 0 && n >= 0 && off + n <= size_);
  }
  marked_.assign(buckets_.size(), false);
  done_ = buckets_.size();
  thread_ = std::thread([this] { Loop(); });
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradientReducer::Begin(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  ATTNLAB_CHECK(done_ == buckets_.size());  // the last step was finished
  what_ = what;
  marked_.assign(buckets_.size(), false);
  done_ = 0;
  comm_seconds_ = 0;
  bytes_ = 0;
  error_ = Status::Ok();
}

void GradientReducer::Ready(size_t i) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ATTNLAB_CHECK(i < buckets_.size());
    if (marked_[i]) return;
    marked_[i] = true;
  }
  cv_.notify_all();
}

Status GradientReducer::Finish(ReduceTiming* timing) {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < buckets_.size(); ++i) Ready(i);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ == buckets_.size(); });
  if (timing) {
    timing->comm_seconds = comm_seconds_;
    timing->exposed_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    timing->bytes = bytes_;
  }
  return error_;
}

void GradientReducer::Loop() {
  for (;;) {
    size_t i;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (done_ < buckets_.size() && marked_[done_]); });
      if (stop_) return;
      i = done_;
    }
    const GradientBucket& b = buckets_[i];
    Status st;
    const int64_t sent0 = comm_->stats().bytes_sent;
    const auto t0 = std::chrono::steady_clock::now();
    // After an error the remaining buckets are not sent (the run is ending), only counted.
    bool failed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed = !error_.ok();
    }
    if (!failed) {
      for (const auto& [off, n] : b.ranges) {
        st = comm_->AllReduceSum(std::span<float>(grads_ + off, static_cast<size_t>(n)),
                                 "all-reduce of the gradients of " + b.name + ", " + what_);
        if (!st.ok()) break;
      }
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      comm_seconds_ += dt;
      bytes_ += comm_->stats().bytes_sent - sent0;
      if (!st.ok() && error_.ok()) error_ = st;
      ++done_;
    }
    cv_.notify_all();
  }
}

}  // namespace attnlab::dist
