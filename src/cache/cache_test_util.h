// Helpers shared by the cache tests.
#ifndef ATTNLAB_CACHE_CACHE_TEST_UTIL_H_
#define ATTNLAB_CACHE_CACHE_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace attnlab::testing {

// max |a - b| over n values, relative to max(1, max |b|): logits compared across caches.
inline double MaxRelDiff(const float* a, const float* b, int64_t n) {
  double scale = 1, err = 0;
  for (int64_t i = 0; i < n; ++i) {
    scale = std::max(scale, double(std::abs(b[i])));
    err = std::max(err, double(std::abs(a[i] - b[i])));
  }
  return err / scale;
}

}  // namespace attnlab::testing

#endif  // ATTNLAB_CACHE_CACHE_TEST_UTIL_H_
