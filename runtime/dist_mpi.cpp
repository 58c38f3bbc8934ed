// The MPI side of runtime/dist.hpp: the only file of uvflow that includes mpi.h. Collectives are
// called from the TBB worker that runs a stage, one at a time (a mutex makes sure), so the MPI
// library needs MPI_THREAD_SERIALIZED; Open MPI gives MPI_THREAD_MULTIPLE.
// The C API only: MPI's deprecated C++ bindings would need their own library (libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime/dist.hpp"

namespace uvflow::dist {
namespace {

bool g_active = false;  // joined an MPI job
int g_rank = 0, g_size = 1, g_local_rank = 0, g_local_size = 1;
std::mutex g_mutex;     // one collective at a time
std::atomic<double> g_seconds{0};

// mpirun (Open MPI, or a PMI/PMIx launcher such as srun) puts these in each rank's environment.
bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

// Holds the collective lock and adds the time spent to communication_seconds().
class Collective {
 public:
  Collective() : lock_(g_mutex), t0_(std::chrono::steady_clock::now()) {}
  ~Collective() {
    g_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::lock_guard<std::mutex> lock_;
  std::chrono::steady_clock::time_point t0_;
};

MPI_Op mpi_op(Op op) { return op == Op::sum ? MPI_SUM : op == Op::min ? MPI_MIN : MPI_MAX; }

// `n` values in chunks of at most `chunk_bytes` (and of an int's count): to rank 0 (`all` false)
// or to every rank. MPI's default error handler ends the job on a communication failure.
template <class T>
void reduce_chunks(const T* in, T* out, std::size_t n, std::size_t chunk_bytes, MPI_Datatype type, MPI_Op op, bool all) {
  if (!g_active || g_size == 1) {
    if (out != in) std::copy(in, in + n, out);
    return;
  }
  Collective c;
  const std::size_t step = std::clamp<std::size_t>(chunk_bytes / sizeof(T), 1, INT_MAX);
  const bool receives = all || g_rank == 0;
  for (std::size_t i = 0; i < n; i += step) {
    const int m = int(std::min(step, n - i));
    const void* send = receives && in == out ? MPI_IN_PLACE : static_cast<const void*>(in + i);
    if (all) MPI_Allreduce(send, out + i, m, type, op, MPI_COMM_WORLD);
    else MPI_Reduce(send, receives ? out + i : nullptr, m, type, op, 0, MPI_COMM_WORLD);
  }
}

}  // namespace

bool compiled() { return true; }
int rank() { return g_rank; }
int local_rank() { return g_local_rank; }
int local_size() { return g_local_size; }
int size() { return g_size; }

Session::Session(int& argc, char**& argv) {
  if (!launched_by_mpirun()) return;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  // The ranks sharing this node's memory: the node's GPUs are dealt out by this index.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &g_local_rank);
  MPI_Comm_size(node, &g_local_size);
  MPI_Comm_free(&node);
  g_active = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    if (g_rank == 0)
      std::fprintf(stderr, "internal error: the MPI library gives no MPI_THREAD_SERIALIZED (only level %d)\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 6);
  }
}

Session::~Session() {
  if (g_active) MPI_Finalize();
  g_active = false;
}

int Session::end(int rc, bool signalled) {
  if (rc != 0 && g_active && g_size > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    if (signalled) std::_Exit(rc);  // MPI_Finalize would wait for ranks that are gone
    MPI_Abort(MPI_COMM_WORLD, rc);
  }
  return rc;
}

void reduce_to_root(const float* in, float* out, std::size_t n, std::size_t chunk_bytes) {
  reduce_chunks(in, out, n, chunk_bytes, MPI_FLOAT, MPI_SUM, false);
}
void reduce_to_root(const double* in, double* out, std::size_t n, std::size_t chunk_bytes) {
  reduce_chunks(in, out, n, chunk_bytes, MPI_DOUBLE, MPI_SUM, false);
}
void all_reduce(const double* in, double* out, std::size_t n, Op op, std::size_t chunk_bytes) {
  reduce_chunks(in, out, n, chunk_bytes, MPI_DOUBLE, mpi_op(op), true);
}
void all_reduce(const std::int64_t* in, std::int64_t* out, std::size_t n, Op op) {
  reduce_chunks(in, out, n, kDefaultChunkBytes, MPI_INT64_T, mpi_op(op), true);
}

std::vector<std::string> gather(const std::string& text) {
  if (!g_active || g_size == 1) return {text};
  Collective c;
  const int length = int(text.size());
  std::vector<int> lengths(g_rank == 0 ? g_size : 0), offsets(lengths.size());
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (g_rank == 0) {
    for (int r = 1; r < g_size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
    all.resize(std::size_t(offsets.back() + lengths.back()));
  }
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < int(lengths.size()); ++r) out.push_back(all.substr(std::size_t(offsets[r]), std::size_t(lengths[r])));
  return out;
}

void barrier() {
  if (!g_active || g_size == 1) return;
  Collective c;
  MPI_Barrier(MPI_COMM_WORLD);
}

double communication_seconds() { return g_seconds.load(); }

}  // namespace uvflow::dist
