// mpi.reduce_grid, cuda backend: the ranks' device grids summed on rank 0's device through CUDA IPC,
// so that no grid crosses to the host (the cpu backend downloads every rank's grid and sums it
// through MPI_Reduce: 3.86 s for two 18750^2 double grids on one H100 against 42 ms of gridding,
// bench/results/mpi_h100.md). Every other rank copies its grid, a chunk at a time, into a staging
// buffer rank 0 has mapped; rank 0 adds the chunks in rank order (in double where every rank kept
// double sums) and rounds once. CUDA IPC needs every rank on one node; ranks on other GPUs are
// reached through peer access (NVLink or PCIe), ranks sharing a GPU through its own memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cuda_check.hpp"
#include "runtime/dist.hpp"
#include "runtime/error.hpp"
#include "stages/mpi/reduce_grid.hpp"

namespace uvflow::mpi_reduce_grid {
namespace {

constexpr const char* kWho = "mpi.reduce_grid (cuda)";
constexpr int kMaxRanks = 16;  // the sources of one launch (kernel parameters)

template <class T>
struct Sources {
  const T* p[kMaxRanks];  // rank order: rank 0's own grid first
  int n;
};

// out[i] = float(sum over the ranks of src[r][i]), each sum in T.
template <class T>
__global__ void sum_ranks(const Sources<T> src, std::size_t n, float* out) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    T s = src.p[0][i];
    for (int r = 1; r < src.n; ++r) s += src.p[r][i];
    out[i] = float(s);
  }
}

// A device buffer another process of this node can map (stream-ordered pool memory cannot be
// exported), and this process's mapping of such buffers. Freed or unmapped when destroyed.
class IpcStaging {
 public:
  explicit IpcStaging(std::size_t bytes) { device::check(cudaMalloc(&p_, bytes), kWho, "cudaMalloc (staging)"); }
  ~IpcStaging() { cudaFree(p_); }
  IpcStaging(const IpcStaging&) = delete;
  IpcStaging& operator=(const IpcStaging&) = delete;
  void* data() const { return p_; }
  std::string handle() const {
    cudaIpcMemHandle_t h;
    device::check(cudaIpcGetMemHandle(&h, p_), kWho, "cudaIpcGetMemHandle");
    return {reinterpret_cast<const char*>(&h), sizeof h};
  }

 private:
  void* p_ = nullptr;
};

class IpcMapping {
 public:
  explicit IpcMapping(const std::string& handle) {
    cudaIpcMemHandle_t h;
    std::copy(handle.begin(), handle.end(), reinterpret_cast<char*>(&h));
    device::check(cudaIpcOpenMemHandle(&p_, h, cudaIpcMemLazyEnablePeerAccess), kWho,
                  "cudaIpcOpenMemHandle (another rank's staging buffer)");
  }
  ~IpcMapping() { cudaIpcCloseMemHandle(p_); }
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  void* data() const { return p_; }

 private:
  void* p_ = nullptr;
};

class ReduceGridCuda final : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.in(grid_in);
    auto out = std::make_shared<Grid>(*in);  // shares the arrays: the sum replaces them on rank 0
    if (dist::size() == 1) return ctx.emit(grid_out, out);
    check_one_node();
    const device::Stream& stream = ctx.stream();
    std::int64_t exact = in->cells64.size() == in->cells.size();
    dist::all_reduce(&exact, &exact, 1, dist::Op::min);
    if (dist::root()) out->cells = Array<cfloat>::device(in->cells.size(), stream);
    // A complex sum is the sum of the real and of the imaginary parts: 2n values.
    if (exact) sum_to_root(ctx, reinterpret_cast<const double*>(in->cells64.data()), 2 * in->cells.size(), *out);
    else sum_to_root(ctx, reinterpret_cast<const float*>(in->cells.data()), 2 * in->cells.size(), *out);
    out->cells64 = {};
    // The totals: three doubles, through the host.
    auto totals = Array<double>::host(in->totals.size());
    device::copy(totals.data(), in->totals.data(), totals.bytes(), device::Copy::device_to_host, stream);
    stream.synchronize();
    dist::reduce_to_root(totals.data(), totals.data(), totals.size());
    if (dist::root()) {
      check_counted_once(totals.data(), out->obs.get());
      out->totals = Array<double>::device(totals.size(), stream);
      device::copy(out->totals.data(), totals.data(), totals.bytes(), device::Copy::host_to_device, stream);
      stream.synchronize();  // `totals` is pageable host memory, released on return
    }
    ctx.emit(grid_out, out);
  }

 private:
  static void check_one_node() {
    std::int64_t last_local = dist::local_rank();
    dist::all_reduce(&last_local, &last_local, 1, dist::Op::max);
    if (last_local != dist::size() - 1)
      throw InputError("mpi.reduce_grid: backend cuda sums the grids through CUDA IPC, which needs every rank on one "
                       "node; these " + std::to_string(dist::size()) + " ranks span several: use backend: cpu");
    if (dist::size() > kMaxRanks)
      throw InputError("mpi.reduce_grid: backend cuda sums at most " + std::to_string(kMaxRanks) + " ranks, not " +
                       std::to_string(dist::size()) + ": use backend: cpu");
  }

  // Rank r > 0: copy chunk k of `own` into its staging buffer, wait, barrier; rank 0: add every
  // rank's chunk k into out.cells, wait, barrier (the staging buffers may then be refilled).
  template <class T>
  void sum_to_root(Context& ctx, const T* own, std::size_t n, Grid& out) {
    const device::Stream& stream = ctx.stream();
    const std::size_t step = std::min(n, std::max<std::size_t>(1, (std::size_t(params().chunk_mb) << 20) / sizeof(T)));
    const bool root = dist::root();
    std::unique_ptr<IpcStaging> staging;
    if (!root) staging = std::make_unique<IpcStaging>(step * sizeof(T));
    const std::vector<std::string> handles = dist::gather(root ? std::string() : staging->handle());
    std::vector<std::unique_ptr<IpcMapping>> peers;
    for (std::size_t r = 1; r < handles.size(); ++r) peers.push_back(std::make_unique<IpcMapping>(handles[r]));
    auto* sum = reinterpret_cast<float*>(out.cells.data());
    auto s = static_cast<cudaStream_t>(stream.native());
    const int blocks = device::resident_blocks(reinterpret_cast<const void*>(sum_ranks<T>), 256);
    for (std::size_t i = 0; i < n; i += step) {
      const std::size_t m = std::min(step, n - i);
      if (!root) {
        device::copy(staging->data(), own + i, m * sizeof(T), device::Copy::device_to_device, stream);
        stream.synchronize();
      }
      dist::barrier();
      if (root) {
        Sources<T> src{{own + i}, int(peers.size()) + 1};
        for (std::size_t r = 0; r < peers.size(); ++r) src.p[r + 1] = static_cast<const T*>(peers[r]->data());
        sum_ranks<T><<<blocks, 256, 0, s>>>(src, m, sum + i);
        device::check_launch("mpi.reduce_grid: sum_ranks");
        stream.synchronize();
      }
      dist::barrier();
    }
    peers.clear();     // rank 0 unmaps every staging buffer
    dist::barrier();   // before their owners free them
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<ReduceGridCuda>(); }

}  // namespace uvflow::mpi_reduce_grid
