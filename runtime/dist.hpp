// The process's place in a distributed run (`mpirun -np N uvflow run ...`): its rank among N, and
// the few collectives uvflow needs. This header is all the rest of uvflow sees of MPI: mpi.h is
// included by runtime/dist_mpi.cpp alone, built when CMake finds MPI (UVFLOW_MPI); otherwise
// runtime/dist_none.cpp makes every process rank 0 of 1. A process not started by mpirun is rank 0
// of 1 in either build and never calls MPI, so a single-process run is exactly as without MPI.
//
// Collectives block until every rank has called them, so every rank must call the same ones in
// the same order (the stages that call them run in dataflow order: the weight density, then the
// grid). A rank that fails ends the whole job (end_job), so nobody waits forever for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace uvflow::dist {

bool compiled();  // built with MPI
int rank();       // 0 .. size() - 1; 0 when not distributed
int size();       // ranks in the job; 1 when not distributed
int local_rank(); // this rank's index among the job's ranks on its node (for one GPU per rank); 0 alone
int local_size(); // the job's ranks on this rank's node (they share its memory); 1 alone
inline bool root() { return rank() == 0; }

// Joins the MPI job when this process was started by mpirun (its environment says so), and
// leaves it (MPI_Finalize) when destroyed. Elsewhere it does nothing.
class Session {
 public:
  Session(int& argc, char**& argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // The exit code `rc` of this rank: 0 is returned; any other, in a job of several ranks, ends
  // every rank now (MPI_Abort with `rc`, which mpirun then exits with) and does not return.
  // `signalled`: this rank was stopped by a signal, which mpirun sends every rank when the job
  // is interrupted or another rank failed; it then only exits, with `rc`, leaving the rest to mpirun.
  int end(int rc, bool signalled = false);
};

enum class Op { sum, min, max };

// Every collective below works in chunks of at most this many bytes, so that MPI never needs a
// buffer of the whole array (an 18000^2 complex grid is 2.6 GB).
inline constexpr std::size_t kDefaultChunkBytes = std::size_t(64) << 20;

// The sum over every rank of `in`, into `out` on rank 0 only (`out` is not touched elsewhere and
// may be null there). `in` and `out` may be the same array.
void reduce_to_root(const float* in, float* out, std::size_t n, std::size_t chunk_bytes = kDefaultChunkBytes);
void reduce_to_root(const double* in, double* out, std::size_t n, std::size_t chunk_bytes = kDefaultChunkBytes);
// Element-wise `op` over every rank, into `out` on every rank (in and out may be the same).
void all_reduce(const double* in, double* out, std::size_t n, Op op, std::size_t chunk_bytes = kDefaultChunkBytes);
void all_reduce(const std::int64_t* in, std::int64_t* out, std::size_t n, Op op);
// Rank 0 gets every rank's `text`, in rank order; the others get an empty list.
std::vector<std::string> gather(const std::string& text);
// Returns when every rank has called it.
void barrier();

// Seconds this process has spent inside the collectives above (waiting for other ranks included).
double communication_seconds();

}  // namespace uvflow::dist
