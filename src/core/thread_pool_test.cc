// The fork-join pool every kernel runs on: each task runs exactly once with a valid thread id,
// back-to-back calls reuse the workers safely, nested and concurrent callers run inline, and the
// default pool can be replaced. Run under ThreadSanitizer by scripts/sanitize.sh tsan.
#include "attnlab/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace attnlab {
namespace {

TEST(ThreadPool, EveryTaskRunsOnceWithAValidThreadId) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      std::atomic<bool> bad_thread{false};
      pool.ParallelFor(n, [&](int64_t task, int thread) {
        runs[task].fetch_add(1, std::memory_order_relaxed);
        if (thread < 0 || thread >= threads) bad_thread = true;
      });
      for (int64_t t = 0; t < n; ++t) EXPECT_EQ(runs[t].load(), 1) << "task " << t;
      EXPECT_FALSE(bad_thread);
    }
  }
}

TEST(ThreadPool, BackToBackCallsSeeEachOthersResults) {
  // Each call reads what the previous call wrote, in other tasks and possibly other threads: the
  // pool's join must order them (a data race here is what ThreadSanitizer reports).
  ThreadPool pool(4);
  const int64_t n = 257;
  std::vector<int64_t> a(n, 0), b(n, 0);
  for (int round = 0; round < 200; ++round) {
    pool.ParallelFor(n, [&](int64_t t, int) { b[t] = a[(t + 1) % n] + 1; });
    pool.ParallelFor(n, [&](int64_t t, int) { a[t] = b[(t + 3) % n]; });
  }
  for (int64_t t = 0; t < n; ++t) EXPECT_EQ(a[t], 200);
}

TEST(ThreadPool, PerThreadScratchIsNeverShared) {
  ThreadPool pool(4);
  std::vector<int64_t> scratch(4, 0);  // one slot per thread id, unsynchronised
  std::atomic<int64_t> total{0};
  pool.ParallelFor(10000, [&](int64_t t, int thread) {
    scratch[thread] += t;
    total.fetch_add(t, std::memory_order_relaxed);
  });
  int64_t sum = 0;
  for (int64_t s : scratch) sum += s;
  EXPECT_EQ(sum, total.load());
  EXPECT_EQ(sum, 10000 * 9999 / 2);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> runs(8 * 8);
  pool.ParallelFor(8, [&](int64_t outer, int thread) {
    pool.ParallelFor(8, [&](int64_t inner, int inner_thread) {
      EXPECT_EQ(inner_thread, 0);  // inline: the nested call reports thread 0
      runs[outer * 8 + inner].fetch_add(1);
    });
    (void)thread;
  });
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersFromOtherThreadsAreSafe) {
  // Two application threads share one pool: one gets the workers, the other runs inline.
  ThreadPool pool(3);
  std::vector<int64_t> out1(500, 0), out2(500, 0);
  auto work = [&pool](std::vector<int64_t>* out) {
    for (int round = 0; round < 50; ++round) {
      pool.ParallelFor(static_cast<int64_t>(out->size()), [&](int64_t t, int) { (*out)[t] += t; });
    }
  };
  std::thread a(work, &out1), b(work, &out2);
  a.join();
  b.join();
  for (int64_t t = 0; t < 500; ++t) {
    EXPECT_EQ(out1[t], 50 * t);
    EXPECT_EQ(out2[t], 50 * t);
  }
}

TEST(ThreadPool, ConstructAndDestroyRepeatedly) {
  for (int i = 0; i < 20; ++i) {
    ThreadPool pool(1 + i % 4);
    std::atomic<int> n{0};
    if (i % 2 == 0) pool.ParallelFor(5, [&](int64_t, int) { ++n; });
    EXPECT_EQ(n.load(), i % 2 == 0 ? 5 : 0);
  }
}

TEST(ThreadPool, DefaultPoolCanBeResized) {
  const int before = DefaultThreadCount();
  SetDefaultThreadCount(3);
  EXPECT_EQ(DefaultThreadCount(), 3);
  std::atomic<int> n{0};
  DefaultThreadPool().ParallelFor(100, [&](int64_t, int) { ++n; });
  EXPECT_EQ(n.load(), 100);
  SetDefaultThreadCount(before);
  EXPECT_EQ(DefaultThreadCount(), before);
}

}  // namespace
}  // namespace attnlab
