// mpi.reduce_grid, cuda backend: the ranks' device grids summed on rank 0's device through CUDA IPC,
// so that no grid crosses to the host (the cpu backend downloads every rank's grid and sums it
// through MPI_Reduce: 3.86 s for two 18750^2 double grids on one H100 against 42 ms of gridding,
// bench/results/mpi_h100.md). Only the rectangle that holds every rank's non-zero cells is summed
// (beyond the longest baseline a grid stays zero). Every other rank copies its rows of it, a chunk
// at a time, into a staging buffer rank 0 has mapped; rank 0 adds them in rank order (in double
// where every rank kept double sums) and rounds once. CUDA IPC needs every rank on one node; ranks
// on other GPUs are reached through peer access (NVLink or PCIe), ranks sharing a GPU through its
// own memory.
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

// The smallest rectangle of cells holding every non-zero cell of a grid of n x n complex cells
// (pairs of T): atomics into box = {u0, v0, u1, v1} (inclusive), which starts as {n, n, -1, -1}.
template <class T>
__global__ void nonzero_box(const T* cells, int n, int* box) {
  int u0 = n, v0 = n, u1 = -1, v1 = -1;
  for (int v = blockIdx.x; v < n; v += gridDim.x) {
    const T* row = cells + 2 * std::int64_t(v) * n;
    for (int u = threadIdx.x; u < n; u += blockDim.x)
      if (row[2 * u] != 0 || row[2 * u + 1] != 0) u0 = min(u0, u), u1 = max(u1, u), v0 = min(v0, v), v1 = max(v1, v);
  }
  for (int d = 16; d > 0; d /= 2) {
    u0 = min(u0, __shfl_xor_sync(0xffffffffu, u0, d)), v0 = min(v0, __shfl_xor_sync(0xffffffffu, v0, d));
    u1 = max(u1, __shfl_xor_sync(0xffffffffu, u1, d)), v1 = max(v1, __shfl_xor_sync(0xffffffffu, v1, d));
  }
  if ((threadIdx.x & 31) == 0 && u1 >= 0) {
    atomicMin(box, u0), atomicMin(box + 1, v0), atomicMax(box + 2, u1), atomicMax(box + 3, v1);
  }
}

// Rows of the summed rectangle, `width` complex cells from column u0 of grid rows v0 .. v0 + rows - 1.
template <class T>
struct Sources {
  const T* own;            // rank 0's grid (pitch: the grid's row); null: a zero grid
  const T* p[kMaxRanks];   // the other ranks' staged rows (pitch: 2 width), rank order
  int n;                   // other ranks
};

// out = float(own + sum over the ranks' staged rows), each sum in T, for the rectangle's rows.
template <class T>
__global__ void sum_ranks(const Sources<T> src, std::int64_t grid_row, int u0, int v0, int width, int rows, float* out) {
  const std::int64_t row_values = 2 * std::int64_t(width), total = row_values * rows;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t at = (v0 + i / row_values) * 2 * grid_row + 2 * std::int64_t(u0) + i % row_values;
    T s = src.own ? src.own[at] : T(0);
    for (int r = 0; r < src.n; ++r) s += src.p[r][i];
    out[at] = float(s);
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
    if (dist::root()) {
      out->cells = Array<cfloat>::device(in->cells.size(), stream);
      device::memset_zero(out->cells.data(), out->cells.bytes(), stream);  // outside the summed rectangle
    }
    const int n = int(in->geom.grid_size);
    const auto* cells64 = in->cells64.size() == in->cells.size() ? reinterpret_cast<const double*>(in->cells64.data()) : nullptr;
    const auto* cells = reinterpret_cast<const float*>(in->cells.data());
    const SumPlan plan = plan_sum(cells64, cells64 ? nonzero_rectangle(cells64, n, stream) : nonzero_rectangle(cells, n, stream),
                                  n, ctx.stage_id());
    if (plan.exact) sum_to_root(ctx, cells64, n, plan.cells, *out);
    else sum_to_root(ctx, cells, n, plan.cells, *out);
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

  // This rank's rectangle of non-zero cells.
  template <class T>
  static Rectangle nonzero_rectangle(const T* own, int n, const device::Stream& stream) {
    auto box = Array<int>::device(4, stream);
    const int start[4] = {n, n, -1, -1};
    device::copy(box.data(), start, sizeof start, device::Copy::host_to_device, stream);
    const int blocks = device::resident_blocks(reinterpret_cast<const void*>(nonzero_box<T>), 256);
    nonzero_box<T><<<blocks, 256, 0, static_cast<cudaStream_t>(stream.native())>>>(own, n, box.data());
    device::check_launch("mpi.reduce_grid: nonzero_box");
    int found[4];
    device::copy(found, box.data(), sizeof found, device::Copy::device_to_host, stream);
    stream.synchronize();
    return {found[0], found[1], found[2], found[3]};
  }

  // The rectangle r's rows a chunk at a time. Rank r > 0: copy the chunk's rows of `own` (null: a
  // zero grid) into its staging buffer, wait, barrier; rank 0: add every rank's rows into
  // out.cells, wait, barrier (the staging buffers may then be refilled).
  template <class T>
  void sum_to_root(Context& ctx, const T* own, int n, Rectangle r, Grid& out) {
    const device::Stream& stream = ctx.stream();
    const auto [u0, v0, u1, v1] = r;
    if (r.empty()) return;  // every grid is zero: so is the sum
    const int width = int(u1 - u0 + 1), height = int(v1 - v0 + 1);
    const std::size_t row_bytes = 2 * sizeof(T) * std::size_t(width);
    const int step = int(std::clamp<std::size_t>((std::size_t(params().chunk_mb) << 20) / row_bytes, 1, std::size_t(height)));
    const bool root = dist::root();
    std::unique_ptr<IpcStaging> staging;
    if (!root) staging = std::make_unique<IpcStaging>(std::size_t(step) * row_bytes);
    const std::vector<std::string> handles = dist::gather(root ? std::string() : staging->handle());
    std::vector<std::unique_ptr<IpcMapping>> peers;
    for (std::size_t r = 1; r < handles.size(); ++r) peers.push_back(std::make_unique<IpcMapping>(handles[r]));
    auto* sum = reinterpret_cast<float*>(out.cells.data());
    auto s = static_cast<cudaStream_t>(stream.native());
    const int blocks = device::resident_blocks(reinterpret_cast<const void*>(sum_ranks<T>), 256);
    const std::size_t pitch = 2 * sizeof(T) * std::size_t(n);
    for (int v = int(v0); v <= v1; v += step) {
      const int rows = std::min<int>(step, int(v1) + 1 - v);
      if (!root) {
        if (own)
          device::check(cudaMemcpy2DAsync(staging->data(), row_bytes, own + 2 * (std::int64_t(v) * n + u0), pitch, row_bytes,
                                          rows, cudaMemcpyDeviceToDevice, s),
                        kWho, "cudaMemcpy2DAsync (to the staging buffer)");
        else
          device::memset_zero(staging->data(), std::size_t(rows) * row_bytes, stream);
        stream.synchronize();
      }
      dist::barrier();
      if (root) {
        Sources<T> src{own, {}, int(peers.size())};
        for (std::size_t r = 0; r < peers.size(); ++r) src.p[r] = static_cast<const T*>(peers[r]->data());
        sum_ranks<T><<<blocks, 256, 0, s>>>(src, n, int(u0), v, width, rows, sum);
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
