// attnlab/thread_pool.h: a small fork-join pool for the kernels.
//
// Why not OpenMP: kernels must stay ThreadSanitizer-clean and bit-reproducible for a fixed
// thread count, and the pool is the only threading in the engine, so it is easy to reason about.
#ifndef ATTNLAB_THREAD_POOL_H_
#define ATTNLAB_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attnlab {

class ThreadPool {
 public:
  // num_threads >= 1 workers in total, including the calling thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task, thread) for every task in [0, num_tasks) and returns when all are done.
  // `thread` is in [0, num_threads()) and identifies the worker (for per-thread scratch).
  // Tasks are claimed dynamically, so fn must make each task's result independent of which
  // thread runs it. A call from inside a task runs inline on the calling thread.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t task, int thread)>& fn);

 private:
  void WorkerLoop(int thread);
  void RunTasks(int thread);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> active_{0};
  // Incremented (under mu_, after fn_ and num_tasks_ are set) to start a region; workers spin on
  // it briefly before blocking on wake_. kStopGeneration tells them to exit.
  static constexpr uint64_t kStopGeneration = ~uint64_t{0};
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  std::atomic<bool> in_parallel_{false};
};

// The process-wide pool the kernels use when none is passed. Its size is ATTNLAB_NUM_THREADS if
// set, else std::thread::hardware_concurrency().
ThreadPool& DefaultThreadPool();
// Replaces the default pool with one of n threads (n >= 1). Not thread-safe against running
// kernels: call it at start-up.
void SetDefaultThreadCount(int n);
int DefaultThreadCount();

}  // namespace attnlab

#endif  // ATTNLAB_THREAD_POOL_H_
