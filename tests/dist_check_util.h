// The start, failure count, checks and end shared by the programs that test dist/ under mpirun
// (dist_*_check.cc): a failed check prints its rank and what failed, and the program exits 1
// when any did.
#ifndef ATTNLAB_TESTS_DIST_CHECK_UTIL_H_
#define ATTNLAB_TESTS_DIST_CHECK_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "attnlab/status.h"
#include "dist/comm.h"

namespace attnlab::dist_check {

inline int g_failures = 0;

inline void Expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAIL %s\n", dist::World().rank(), what.c_str());
    ++g_failures;
  }
}

inline void ExpectOk(const Status& st, const std::string& what) {
  Expect(st.ok(), what + ": " + st.ToString());
}

// The start of a check program: MPI under a launcher (dist::InitWorld); false, with the reason
// printed, when that fails (main then returns 1).
inline bool Start(int* argc, char*** argv) {
  const Status st = dist::InitWorld(argc, argv);
  if (!st.ok()) std::fprintf(stderr, "InitWorld: %s\n", st.ToString().c_str());
  return st.ok();
}

// The end of a check program: every rank's failures summed, rank 0 prints "<what>: <ok or
// FAILED>", MPI finalised; the exit status (the same on every rank).
inline int Finish(const std::string& what, const std::string& ok) {
  int64_t failures = g_failures;
  (void)dist::World().AllReduceSum(std::span<int64_t>(&failures, 1), "failures");
  if (dist::World().root()) {
    std::printf("%s: %s\n", what.c_str(), failures == 0 ? ok.c_str() : "FAILED");
  }
  dist::FinalizeWorld();
  return failures == 0 ? 0 : 1;
}

}  // namespace attnlab::dist_check

#endif  // ATTNLAB_TESTS_DIST_CHECK_UTIL_H_
