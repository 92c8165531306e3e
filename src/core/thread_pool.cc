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
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunTasks(int thread) {
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) break;
    (*fn_)(task, thread);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunTasks(thread);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_.notify_one();
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
    active_ = num_threads_ - 1;
    ++generation_;
  }
  wake_.notify_all();
  RunTasks(0);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
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
