// The failure count and checks shared by the programs that test dist/ under mpirun
// (dist_comm_check.cc, dist_ring_check.cc): a failed check prints its rank and what failed, and
// the program exits 1 when any did.
#ifndef ATTNLAB_TESTS_DIST_CHECK_UTIL_H_
#define ATTNLAB_TESTS_DIST_CHECK_UTIL_H_

#include <cstdio>
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

}  // namespace attnlab::dist_check

#endif  // ATTNLAB_TESTS_DIST_CHECK_UTIL_H_
