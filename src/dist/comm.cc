// comm.h over MPI (when built with ATTNLAB_HAVE_MPI) or a single process.
//
// Every MPI call below is non-blocking and completed by Poll(), which tests the requests under
// the communicator's mutex, sleeps between tests without it, and gives up at the deadline. That
// is what turns a dead or absent peer into an error instead of a hang, and what lets two threads
// of one rank share the communicator (MPI_THREAD_SERIALIZED is all we ask of MPI).
#include "dist/comm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#ifdef ATTNLAB_HAVE_MPI
// The C API only: OpenMPI's mpi.h otherwise pulls in the deprecated C++ bindings (libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace attnlab::dist {
namespace {

using Clock = std::chrono::steady_clock;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end && *end == '\0' && x >= 0 && x < INT_MAX) ? static_cast<int>(x) : fallback;
}

// The launcher's world size, or 0 when no launcher set one (OpenMPI, PMIx, MPICH/Hydra, Slurm).
int LauncherWorldSize() {
  for (const char* n : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    const int s = EnvInt(n, 0);
    if (s > 0) return s;
  }
  return 0;
}

// One process: every collective is the identity; point-to-point has no peer.
class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  int local_rank() const override { return 0; }
  Status Barrier(const std::string&) override { return Status::Ok(); }
  Status AllReduceSum(std::span<float>, const std::string&) override { return Status::Ok(); }
  Status AllReduceSum(std::span<double>, const std::string&) override { return Status::Ok(); }
  Status AllReduceSum(std::span<int64_t>, const std::string&) override { return Status::Ok(); }
  Status AllReduceMax(std::span<double>, const std::string&) override { return Status::Ok(); }
  Status Broadcast(std::span<uint8_t>, int root, const std::string& what) override {
    if (root != 0) return Status::InvalidArgument(what + ": root " + std::to_string(root) +
                                                  " is not a rank of a 1-process run");
    return Status::Ok();
  }
  Status AllGather(const std::string& mine, std::vector<std::string>* all,
                   const std::string&) override {
    *all = {mine};
    return Status::Ok();
  }
  Result<Request> Isend(const void*, int64_t, int dest, int, const std::string& what) override {
    return Status::InvalidArgument(what + ": no rank " + std::to_string(dest) +
                                   " in a 1-process run");
  }
  Result<Request> Irecv(void*, int64_t, int src, int, const std::string& what) override {
    return Status::InvalidArgument(what + ": no rank " + std::to_string(src) +
                                   " in a 1-process run");
  }
  Status Wait(std::span<Request> requests) override {
    for (Request& r : requests) {
      if (r.pending()) return Status::Internal("a request on a 1-process communicator");
    }
    return Status::Ok();
  }
};

#ifdef ATTNLAB_HAVE_MPI

std::string MpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

// MPI counts are int: messages are cut into pieces of at most this many elements.
constexpr int64_t kMaxCount = int64_t{1} << 30;

template <typename T>
MPI_Datatype TypeOf();
template <>
MPI_Datatype TypeOf<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype TypeOf<double>() { return MPI_DOUBLE; }

class MpiComm final : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    local_size_ = std::max(1, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", EnvInt("MPI_LOCALNRANKS", 1)));
    local_rank_ = std::min(local_size_ - 1, EnvInt("OMPI_COMM_WORLD_LOCAL_RANK",
                                                   EnvInt("MPI_LOCALRANKID", 0)));
    // "R:N": rank R stops before its N-th collective (tests of the timeout).
    if (const char* s = std::getenv("ATTNLAB_DIST_TEST_STALL")) {
      int r = -1, n = -1;
      if (std::sscanf(s, "%d:%d", &r, &n) == 2 && r == rank_) stall_at_ = n;
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }

  Status Barrier(const std::string& what) override {
    Collective();
    MPI_Request r;
    ATTNLAB_RETURN_IF_ERROR(Call(MPI_Ibarrier(MPI_COMM_WORLD, &r), what));
    return Poll(&r, 1, what);
  }

  Status AllReduceSum(std::span<float> x, const std::string& what) override {
    return OrderedSum(x, what);
  }
  Status AllReduceSum(std::span<double> x, const std::string& what) override {
    return OrderedSum(x, what);
  }
  Status AllReduceSum(std::span<int64_t> x, const std::string& what) override {
    return Reduce(x.data(), static_cast<int64_t>(x.size()), MPI_INT64_T, MPI_SUM, what);
  }
  Status AllReduceMax(std::span<double> x, const std::string& what) override {
    return Reduce(x.data(), static_cast<int64_t>(x.size()), MPI_DOUBLE, MPI_MAX, what);
  }

  Status Broadcast(std::span<uint8_t> bytes, int root, const std::string& what) override {
    if (root < 0 || root >= size_) {
      return Status::InvalidArgument(what + ": root " + std::to_string(root) + " is not a rank");
    }
    Collective();
    for (int64_t off = 0; off < static_cast<int64_t>(bytes.size()); off += kMaxCount) {
      const int n = static_cast<int>(std::min<int64_t>(kMaxCount, bytes.size() - off));
      MPI_Request r;
      ATTNLAB_RETURN_IF_ERROR(
          Call(MPI_Ibcast(bytes.data() + off, n, MPI_BYTE, root, MPI_COMM_WORLD, &r), what));
      ATTNLAB_RETURN_IF_ERROR(Poll(&r, 1, what));
      Count(root == rank_ ? n * int64_t{size_ - 1} : 0, root == rank_ ? 0 : n);
    }
    return Status::Ok();
  }

  Status AllGather(const std::string& mine, std::vector<std::string>* all,
                   const std::string& what) override {
    Collective();
    if (static_cast<int64_t>(mine.size()) > kMaxCount) {
      return Status::OutOfRange(what + ": " + std::to_string(mine.size()) +
                                " bytes is more than one all-gather carries");
    }
    std::vector<int64_t> lens(size_);
    int64_t my_len = static_cast<int64_t>(mine.size());
    MPI_Request r;
    ATTNLAB_RETURN_IF_ERROR(Call(
        MPI_Iallgather(&my_len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, MPI_COMM_WORLD, &r),
        what));
    ATTNLAB_RETURN_IF_ERROR(Poll(&r, 1, what));
    std::vector<int> counts(size_), displs(size_);
    int64_t total = 0;
    for (int i = 0; i < size_; ++i) {
      if (lens[i] < 0 || lens[i] > kMaxCount || total + lens[i] > kMaxCount) {
        return Status::OutOfRange(what + ": the ranks' strings add up to more than one "
                                  "all-gather carries");
      }
      counts[i] = static_cast<int>(lens[i]);
      displs[i] = static_cast<int>(total);
      total += lens[i];
    }
    std::string buf(static_cast<size_t>(total), '\0');
    ATTNLAB_RETURN_IF_ERROR(Call(MPI_Iallgatherv(mine.data(), static_cast<int>(my_len), MPI_BYTE,
                                                 buf.data(), counts.data(), displs.data(),
                                                 MPI_BYTE, MPI_COMM_WORLD, &r),
                                 what));
    ATTNLAB_RETURN_IF_ERROR(Poll(&r, 1, what));
    Count(my_len * (size_ - 1), total - my_len);
    all->clear();
    for (int i = 0; i < size_; ++i) all->push_back(buf.substr(displs[i], counts[i]));
    return Status::Ok();
  }

  Result<Request> Isend(const void* data, int64_t bytes, int dest, int tag,
                        const std::string& what) override {
    return PointToPoint(const_cast<void*>(data), bytes, dest, tag, /*send=*/true, what);
  }
  Result<Request> Irecv(void* data, int64_t bytes, int src, int tag,
                        const std::string& what) override {
    return PointToPoint(data, bytes, src, tag, /*send=*/false, what);
  }

  Status Wait(std::span<Request> requests) override {
    for (Request& q : requests) {
      if (!q.pending()) continue;
      std::vector<MPI_Request> rs;
      {
        std::lock_guard<std::mutex> lock(mu_);
        rs = std::move(slots_[HandleOf(q)]);
        slots_[HandleOf(q)].clear();
        free_.push_back(HandleOf(q));
      }
      HandleOf(q) = -1;
      ATTNLAB_RETURN_IF_ERROR(Poll(rs.data(), static_cast<int>(rs.size()), WhatOf(q)));
    }
    return Status::Ok();
  }

 private:
  Status Call(int code, const std::string& what) {
    if (code == MPI_SUCCESS) return Status::Ok();
    return Status::Unavailable(what + ": MPI error on rank " + std::to_string(rank_) + ": " +
                               MpiError(code));
  }

  void Count(int64_t sent, int64_t received) {
    stats_.bytes_sent += sent;
    stats_.bytes_received += received;
  }

  // Collectives are numbered for the stall test.
  void Collective() {
    ++collectives_;
    ++stats_.calls;
    if (stall_at_ >= 0 && collectives_ >= stall_at_) {
      std::fprintf(stderr, "attnlab: rank %d: ATTNLAB_DIST_TEST_STALL: not answering from "
                   "collective %ld on\n", rank_, static_cast<long>(collectives_));
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }

  // Tests the requests until all complete or the deadline passes.
  Status Poll(MPI_Request* r, int n, const std::string& what) {
    const auto t0 = Clock::now();
    for (;;) {
      int done = 0;
      int code;
      {
        std::lock_guard<std::mutex> lock(mu_);
        code = MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
      }
      if (code != MPI_SUCCESS) return Call(code, what);
      const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      if (done) {
        stats_.seconds += waited;
        return Status::Ok();
      }
      if (waited > timeout_s_) {
        return Status::Unavailable(
            what + ": rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
            " waited " + std::to_string(static_cast<int>(waited)) +
            " s for the other ranks (a rank died, hung or never reached this point; "
            "$ATTNLAB_DIST_TIMEOUT sets the limit)");
      }
      // MPI progresses a non-blocking collective only inside MPI calls (each test moves the
      // next fragments), so poll without sleeping while the operation is young (yielding, as
      // ranks may share cores under --oversubscribe); sleep between tests only after 50 ms,
      // when a peer is late rather than the data in flight. (Sleeping 20-200 us between tests
      // from the start made a 17 MB all-reduce over shared memory take 0.8 s.)
      if (waited < 0.05) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  Status Reduce(void* x, int64_t n, MPI_Datatype t, MPI_Op op, const std::string& what) {
    Collective();
    int tsize = 0;
    MPI_Type_size(t, &tsize);
    for (int64_t off = 0; off < n; off += kMaxCount) {
      const int c = static_cast<int>(std::min(kMaxCount, n - off));
      MPI_Request r;
      ATTNLAB_RETURN_IF_ERROR(Call(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(x) + off * tsize,
                                                  c, t, op, MPI_COMM_WORLD, &r),
                                   what));
      ATTNLAB_RETURN_IF_ERROR(Poll(&r, 1, what));
      Count(int64_t{c} * tsize, int64_t{c} * tsize);
    }
    return Status::Ok();
  }

  // Reduce-scatter by all-to-all (rank k owns the k-th slice and adds every rank's copy of it
  // in rank order), then all-gather of the slices: each rank sends and receives 2 (P - 1) / P
  // of the array, as a ring all-reduce does, and the order of the additions is fixed.
  template <typename T>
  Status OrderedSum(std::span<T> x, const std::string& what) {
    Collective();
    const int P = size_;
    const int64_t seg = kMaxCount / P;
    for (int64_t s0 = 0; s0 < static_cast<int64_t>(x.size()); s0 += seg) {
      const int64_t n = std::min<int64_t>(seg, x.size() - s0);
      T* base = x.data() + s0;
      std::vector<int> counts(P), displs(P);
      for (int k = 0; k < P; ++k) {
        displs[k] = static_cast<int>(k * n / P);
        counts[k] = static_cast<int>((k + 1) * n / P - k * n / P);
      }
      const int mine = counts[rank_];
      std::vector<T> staging(static_cast<size_t>(mine) * P);
      std::vector<int> rcounts(P, mine), rdispls(P);
      for (int k = 0; k < P; ++k) rdispls[k] = k * mine;
      MPI_Request r;
      ATTNLAB_RETURN_IF_ERROR(Call(MPI_Ialltoallv(base, counts.data(), displs.data(), TypeOf<T>(),
                                                  staging.data(), rcounts.data(), rdispls.data(),
                                                  TypeOf<T>(), MPI_COMM_WORLD, &r),
                                   what));
      ATTNLAB_RETURN_IF_ERROR(Poll(&r, 1, what));
      T* out = base + displs[rank_];
      for (int i = 0; i < mine; ++i) {
        T acc = staging[i];
        for (int k = 1; k < P; ++k) acc += staging[static_cast<size_t>(k) * mine + i];
        out[i] = acc;
      }
      ATTNLAB_RETURN_IF_ERROR(Call(MPI_Iallgatherv(MPI_IN_PLACE, 0, TypeOf<T>(), base,
                                                   counts.data(), displs.data(), TypeOf<T>(),
                                                   MPI_COMM_WORLD, &r),
                                   what));
      ATTNLAB_RETURN_IF_ERROR(Poll(&r, 1, what));
      const int64_t moved = (n - mine) * static_cast<int64_t>(sizeof(T));
      Count(2 * moved, 2 * moved);
    }
    return Status::Ok();
  }

  Result<Request> PointToPoint(void* data, int64_t bytes, int peer, int tag, bool send,
                               const std::string& what) {
    if (peer < 0 || peer >= size_) {
      return Status::InvalidArgument(what + ": no rank " + std::to_string(peer));
    }
    if (bytes < 0) return Status::InvalidArgument(what + ": negative size");
    std::vector<MPI_Request> rs;
    // Pieces of at most kMaxCount bytes, tags tag * 64 + piece (a message over 64 GiB is refused).
    const int64_t pieces = std::max<int64_t>(1, (bytes + kMaxCount - 1) / kMaxCount);
    if (pieces > 64 || tag < 0 || tag > (1 << 20)) {
      return Status::OutOfRange(what + ": message too large or tag out of range");
    }
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t off = p * kMaxCount;
      const int n = static_cast<int>(std::min(kMaxCount, bytes - off));
      MPI_Request r;
      std::lock_guard<std::mutex> lock(mu_);
      const int code =
          send ? MPI_Isend(static_cast<char*>(data) + off, n, MPI_BYTE, peer,
                           static_cast<int>(tag * 64 + p), MPI_COMM_WORLD, &r)
               : MPI_Irecv(static_cast<char*>(data) + off, n, MPI_BYTE, peer,
                           static_cast<int>(tag * 64 + p), MPI_COMM_WORLD, &r);
      if (code != MPI_SUCCESS) return Call(code, what);
      rs.push_back(r);
    }
    if (send) Count(bytes, 0);
    else Count(0, bytes);
    Request q;
    WhatOf(q) = what;
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      free_.push_back(static_cast<int64_t>(slots_.size()));
      slots_.emplace_back();
    }
    HandleOf(q) = free_.back();
    free_.pop_back();
    slots_[HandleOf(q)] = std::move(rs);
    return q;
  }

  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
  int64_t collectives_ = 0, stall_at_ = -1;
  std::mutex mu_;
  std::vector<std::vector<MPI_Request>> slots_;
  std::vector<int64_t> free_;
};

#endif  // ATTNLAB_HAVE_MPI

std::unique_ptr<Comm>& WorldSlot() {
  static std::unique_ptr<Comm> w = std::make_unique<SingleComm>();
  return w;
}

#ifdef ATTNLAB_HAVE_MPI
bool g_mpi_initialised = false;
#endif

}  // namespace

Comm& World() { return *WorldSlot(); }

Comm& SingleProcess() {
  static SingleComm one;
  return one;
}

bool LaunchedWithRanks() { return LauncherWorldSize() > 1; }

bool BuiltWithMpi() {
#ifdef ATTNLAB_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Status InitWorld(int* argc, char*** argv) {
  if (const char* t = std::getenv("ATTNLAB_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double s = std::strtod(t, &end);
    if (!(end && *end == '\0' && s > 0 && s < 1e7)) {
      return Status::InvalidArgument("ATTNLAB_DIST_TIMEOUT='" + std::string(t) +
                                     "': expected seconds > 0");
    }
    World().set_timeout_seconds(s);
  }
  if (!LaunchedWithRanks()) return Status::Ok();
#ifdef ATTNLAB_HAVE_MPI
  int provided = 0;
  const int code = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (code != MPI_SUCCESS) return Status::Unavailable("MPI_Init_thread failed: " + MpiError(code));
  g_mpi_initialised = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    return Status::Unavailable("this MPI library does not support MPI_THREAD_SERIALIZED");
  }
  const double timeout = World().timeout_seconds();
  WorldSlot() = std::make_unique<MpiComm>();
  World().set_timeout_seconds(timeout);
  return Status::Ok();
#else
  (void)argc;
  (void)argv;
  return Status::InvalidArgument(
      "started by an MPI launcher with " + std::to_string(LauncherWorldSize()) +
      " ranks, but this attnlab was built without MPI (install libopenmpi-dev and rebuild: "
      "CMake finds it)");
#endif
}

void FinalizeWorld() {
#ifdef ATTNLAB_HAVE_MPI
  if (g_mpi_initialised) {
    WorldSlot() = std::make_unique<SingleComm>();
    MPI_Finalize();
    g_mpi_initialised = false;
  }
#endif
}

void AbortWorld(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
#ifdef ATTNLAB_HAVE_MPI
  if (g_mpi_initialised) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

}  // namespace attnlab::dist
