// dist::Comm under mpirun (issue 36; src/dist/comm.h): every collective and the point-to-point
// transfers on awkward sizes, checked on every rank. Run as
//   mpirun -np 3 --oversubscribe --mca btl self,vader build/tests/dist_comm_check
// (ctest: mpi.comm_check). Exit 0 when every rank's checks hold; a failing rank prints what and
// exits 1, which ends the job. As one process (no launcher) the same checks hold for P = 1.
//
// What is checked:
//   * AllReduceSum (float, double, int64) equals the sum in rank order 0..P-1 computed here,
//     bit for bit, on every rank, for sizes 0, 1, P-1, P, P+1, 1000 and 100003 (slices of
//     uneven length, some ranks owning nothing);
//   * AllReduceMax, Broadcast from the last rank, AllGather of strings of different lengths
//     (the empty one included), Barrier;
//   * Isend/Irecv around the ring (1 MiB + 3 bytes and 0 bytes), and bad arguments (a rank
//     that does not exist, a negative size) are errors, not crashes.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/comm.h"
#include "dist_check_util.h"

namespace {

using attnlab::Status;
namespace dist = attnlab::dist;

using attnlab::dist_check::Expect;
using attnlab::dist_check::g_failures;
using attnlab::dist_check::ExpectOk;

// Rank r's value at index i: not exactly representable sums, so the order matters.
double Value(int r, int64_t i) { return std::sin(0.37 * static_cast<double>(i) + r) * (1.0 + r * 1e-3); }

template <typename T>
T Element(int r, int64_t i) {
  return static_cast<T>(Value(r, i) * (std::is_integral_v<T> ? 1e6 : 1.0));
}

template <typename T>
void CheckSum(dist::Comm& c, int64_t n) {
  std::vector<T> x(n), want(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = Element<T>(c.rank(), i);
    T acc = Element<T>(0, i);
    for (int r = 1; r < c.size(); ++r) acc += Element<T>(r, i);
    want[i] = acc;
  }
  ExpectOk(c.AllReduceSum(std::span<T>(x), "check sum"), "AllReduceSum n=" + std::to_string(n));
  Expect(n == 0 || std::memcmp(x.data(), want.data(), n * sizeof(T)) == 0,
         "AllReduceSum n=" + std::to_string(n) + " (" + std::to_string(sizeof(T)) +
             "-byte) is not the rank-order sum, bit for bit");
}

}  // namespace

int main(int argc, char** argv) {
  if (!attnlab::dist_check::Start(&argc, &argv)) return 1;
  dist::Comm& c = dist::World();
  const int P = c.size(), me = c.rank();
  Expect(me >= 0 && me < P, "rank in [0, size)");

  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{P - 1}, int64_t{P}, int64_t{P + 1},
                    int64_t{1000}, int64_t{100003}}) {
    CheckSum<float>(c, n);
    CheckSum<double>(c, n);
    CheckSum<int64_t>(c, n);
  }

  std::vector<double> m = {static_cast<double>(me), -static_cast<double>(me), 0.5};
  ExpectOk(c.AllReduceMax(std::span<double>(m), "check max"), "AllReduceMax");
  Expect(m[0] == P - 1 && m[1] == 0 && m[2] == 0.5, "AllReduceMax values");

  std::vector<uint8_t> b(1000003, static_cast<uint8_t>(me));
  ExpectOk(c.Broadcast(std::span<uint8_t>(b), P - 1, "check broadcast"), "Broadcast");
  bool same = true;
  for (uint8_t v : b) same &= v == static_cast<uint8_t>(P - 1);
  Expect(same, "Broadcast delivers the root's bytes");
  Expect(!c.Broadcast(std::span<uint8_t>(b), P, "bad root").ok(), "Broadcast from rank P fails");

  std::vector<std::string> all;
  const std::string mine = me == 0 ? "" : std::string(static_cast<size_t>(me * 7), 'a' + me);
  ExpectOk(c.AllGather(mine, &all, "check gather"), "AllGather");
  Expect(static_cast<int>(all.size()) == P, "AllGather: one string per rank");
  for (int r = 0; r < P && r < static_cast<int>(all.size()); ++r) {
    Expect(all[r] == (r == 0 ? "" : std::string(static_cast<size_t>(r * 7), 'a' + r)),
           "AllGather: rank " + std::to_string(r) + "'s string");
  }

  if (P > 1) {
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    for (int64_t bytes : {int64_t{(1 << 20) + 3}, int64_t{0}}) {
      std::vector<uint8_t> out(bytes), in(bytes, 0xff);
      for (int64_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 31 + me);
      auto s = c.Isend(out.data(), bytes, next, 5, "ring send");
      auto r = c.Irecv(in.data(), bytes, prev, 5, "ring recv");
      ExpectOk(s.status(), "Isend");
      ExpectOk(r.status(), "Irecv");
      if (s.ok() && r.ok()) {
        dist::Request q[2] = {std::move(s).value(), std::move(r).value()};
        ExpectOk(c.Wait(std::span<dist::Request>(q, 2)), "Wait");
        bool good = true;
        for (int64_t i = 0; i < bytes; ++i) good &= in[i] == static_cast<uint8_t>(i * 31 + prev);
        Expect(good, "ring transfer of " + std::to_string(bytes) + " bytes");
      }
    }
  }
  Expect(!c.Isend(nullptr, 0, P, 1, "bad").ok(), "Isend to rank P fails");
  Expect(!c.Irecv(nullptr, -1, 0, 1, "bad").ok(), "Irecv of a negative size fails");
  ExpectOk(c.Barrier("check barrier"), "Barrier");

  std::vector<int64_t> fails = {g_failures};
  ExpectOk(c.AllReduceSum(std::span<int64_t>(fails), "failures"), "failure count");
  if (me == 0) {
    std::printf("%s: %d ranks, %ld failure(s)\n", fails[0] == 0 ? "ok" : "FAIL", P,
                static_cast<long>(fails[0]));
  }
  if (fails[0] != 0) dist::AbortWorld(1);
  dist::FinalizeWorld();
  return 0;
}
