// The processes of one run and what they exchange (issue 36): a thin layer over MPI (Debian's
// OpenMPI), or a single process when attnlab was built without it or was not started by a
// launcher. Every other file of attnlab sees only this interface, never <mpi.h>.
//
// Contracts:
//   * World() is the run's communicator: rank() in [0, size()). Without InitWorld (tests, the
//     Python module, a plain `attnlab ...`) it is one process, and every collective below is
//     the identity, so single-process code paths need no special case.
//   * Collectives are called by every rank in the same order with the same sizes (the SPMD
//     discipline); a size that differs between ranks is reported as an error, not a hang.
//   * Determinism: AllReduceSum adds the ranks' contributions in rank order 0, 1, ..., P-1 for
//     every element, and every rank receives the same bits. A sum of P = 1 is the input itself.
//   * Faults: every wait polls with a deadline (timeout_seconds(): $ATTNLAB_DIST_TIMEOUT, default
//     600 s). A rank that died or never arrives makes the others return kUnavailable naming the
//     operation and the time waited; the CLI then aborts the whole job (AbortWorld) instead of
//     hanging in MPI_Finalize. A rank killed outright is also noticed by the launcher
//     (OpenMPI's mpirun ends the job and names the rank).
//   * Threads: any thread may call, one call at a time per process (calls are serialised by a
//     mutex; a wait releases it between polls), so a communication thread can reduce gradients
//     while the main thread runs the backward (grad_reducer.h).
#ifndef ATTNLAB_DIST_COMM_H_
#define ATTNLAB_DIST_COMM_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnlab/status.h"

namespace attnlab::dist {

// A pending point-to-point transfer (Comm::Isend / Irecv). Move-only; Wait before reuse of the
// buffer. A Request destroyed unwaited is cancelled by Comm::Wait's absence only at AbortWorld:
// always wait.
class Request {
 public:
  Request() = default;
  Request(Request&& o) noexcept : handle_(o.handle_), what_(std::move(o.what_)) { o.handle_ = -1; }
  Request& operator=(Request&& o) noexcept {
    handle_ = o.handle_;
    what_ = std::move(o.what_);
    o.handle_ = -1;
    return *this;
  }
  bool pending() const { return handle_ >= 0; }

 private:
  friend class Comm;
  int64_t handle_ = -1;  // index into the communicator's request table; -1: none
  std::string what_;
};

struct CommStats {
  int64_t bytes_sent = 0;     // by this rank, all operations
  int64_t bytes_received = 0;
  double seconds = 0;         // inside Comm calls (waiting included)
  int64_t calls = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool root() const { return rank() == 0; }
  bool distributed() const { return size() > 1; }
  // Ranks on this machine (for the default thread count), and this one's index among them.
  virtual int local_size() const = 0;
  virtual int local_rank() const = 0;
  double timeout_seconds() const { return timeout_s_; }
  void set_timeout_seconds(double s) { timeout_s_ = s; }
  const CommStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CommStats{}; }

  // `what` names the operation in errors ("all-reduce of gradients, step 12").
  virtual Status Barrier(const std::string& what) = 0;
  // x[i] = sum over ranks of x[i], added in rank order; identical bits on every rank.
  virtual Status AllReduceSum(std::span<float> x, const std::string& what) = 0;
  virtual Status AllReduceSum(std::span<double> x, const std::string& what) = 0;
  virtual Status AllReduceSum(std::span<int64_t> x, const std::string& what) = 0;
  virtual Status AllReduceMax(std::span<double> x, const std::string& what) = 0;
  // root's bytes to every rank (sizes must agree).
  virtual Status Broadcast(std::span<uint8_t> bytes, int root, const std::string& what) = 0;
  // Every rank's string, in rank order, on every rank (lengths may differ).
  virtual Status AllGather(const std::string& mine, std::vector<std::string>* all,
                           const std::string& what) = 0;
  // Non-blocking point-to-point; `tag` separates concurrent streams between the same ranks.
  virtual Result<Request> Isend(const void* data, int64_t bytes, int dest, int tag,
                                const std::string& what) = 0;
  virtual Result<Request> Irecv(void* data, int64_t bytes, int src, int tag,
                                const std::string& what) = 0;
  // Waits for every pending request, with the deadline; clears them.
  virtual Status Wait(std::span<Request> requests) = 0;

 protected:
  // Request's fields, for the implementations (friendship does not pass to derived classes).
  static int64_t& HandleOf(Request& r) { return r.handle_; }
  static std::string& WhatOf(Request& r) { return r.what_; }

  double timeout_s_ = 600;
  CommStats stats_;
};

// The run's communicator (single process until InitWorld succeeds under a launcher).
Comm& World();
// A communicator of this process alone, whatever World() is (e.g. a reference run inside a
// distributed test, or work only rank 0 does).
Comm& SingleProcess();

// True when this process was started by an MPI launcher (mpirun / mpiexec / srun) with more
// than one rank, judged from the launcher's environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE, ...).
bool LaunchedWithRanks();

// Called once at the start of main(). Under a launcher: initialises MPI (a build without MPI
// returns an error that says so); otherwise does nothing and World() stays a single process.
// Reads $ATTNLAB_DIST_TIMEOUT (seconds) and the test-only $ATTNLAB_DIST_TEST_STALL ("R:N": rank
// R stops answering before its N-th collective, to test that the others time out).
Status InitWorld(int* argc, char*** argv);
// Called once at the end of main(): MPI_Finalize after a clean run. Never hangs on a dead peer:
// after a failure on any rank, use AbortWorld.
void FinalizeWorld();
// Ends every rank of the job with this exit code (MPI_Abort); plain exit for one process.
[[noreturn]] void AbortWorld(int code);

// Whether this build can run distributed (compiled with MPI), for --version and the docs.
bool BuiltWithMpi();

// Multi-rank behaviour is tested under mpirun: tests/dist_comm_check.cc and dist_ring_check.cc
// (ctest mpi.*) and tests/distributed_cli_test.py.

}  // namespace attnlab::dist

#endif  // ATTNLAB_DIST_COMM_H_
