#include "attnlab/thread_pool.h"

#include <cstdlib>
#include <memory>

namespace attnlab {

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.store(kStopGeneration, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunTasks(int thread) {
  const int64_t n = num_tasks_;
  const auto* fn = fn_;
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n) break;
    (*fn)(task, thread);
  }
}

namespace {
// Spin this many polls (a pause each, ~20-50 us in all) before blocking on a condition variable:
// kernels issue many short parallel regions, and a thread that sleeps between them pays a
// wake-up latency each time (and, on a busy machine, waits for the scheduler to give it a core).
constexpr int kSpinPolls = 4000;
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new generation: spin first, then block.
    bool fresh = false;
    for (int i = 0; i < kSpinPolls; ++i) {
      if (generation_.load(std::memory_order_acquire) != seen) {
        fresh = true;
        break;
      }
      CpuRelax();
    }
    if (!fresh) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    if (seen == kStopGeneration) return;
    RunTasks(thread);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // pairs with the waiter's predicate check
      done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t task, int thread)>& fn) {
  if (num_tasks <= 0) return;
  // Inline when single-threaded, when there is one task, or when nested inside a task.
  bool expected = false;
  if (num_threads_ == 1 || num_tasks == 1 ||
      !in_parallel_.compare_exchange_strong(expected, true)) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    active_.store(num_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunTasks(0);
  // Wait for the workers: spin first, then block.
  bool done = false;
  for (int i = 0; i < kSpinPolls; ++i) {
    if (active_.load(std::memory_order_acquire) == 0) {
      done = true;
      break;
    }
    CpuRelax();
  }
  if (!done) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return active_.load(std::memory_order_acquire) == 0; });
  }
  in_parallel_.store(false);
}

namespace {
std::unique_ptr<ThreadPool>& DefaultPoolSlot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
int EnvThreadCount() {
  if (const char* env = std::getenv("ATTNLAB_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}
}  // namespace

ThreadPool& DefaultThreadPool() {
  auto& slot = DefaultPoolSlot();
  if (!slot) slot = std::make_unique<ThreadPool>(EnvThreadCount());
  return *slot;
}

void SetDefaultThreadCount(int n) { DefaultPoolSlot() = std::make_unique<ThreadPool>(n); }

int DefaultThreadCount() { return DefaultThreadPool().num_threads(); }

}  // namespace attnlab
