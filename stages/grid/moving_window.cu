// grid.moving_window, cuda backend: Romein's moving window (001_55d00877663aa4fc.txt, Part II).
// The block's group keys (baseline, channel, time block; made on the host from the labels) are
// sorted on the device with the visibility indices (a stable radix sort keeps each group in time
// order) and run-length encoded into groups. A thread block per group: thread 0 sums the group's w
// in double in that order (as the cpu backend does, so both pick the same plane), a chunk of the
// group's visibilities is placed into shared memory, then each thread takes points (x, y) of the
// (2s+1)^2 support window. For a visibility at cell (u, v), the point stands for the footprint
// cell congruent to it modulo 2s+1: as the baseline's track moves by a cell, most points keep
// their cell, so a thread accumulates in registers and commits with one atomic add only when its
// cell changes (or the chunk ends).
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/grid/atomic.hpp"
#include "stages/grid/moving_window.hpp"
#include "stages/shared/baseline_groups.hpp"
#include "stages/shared/device_grid.hpp"
#include "stages/shared/grid_atomics.cuh"
#include "stages/shared/placement.hpp"

namespace uvflow::grid_moving_window {
namespace {

constexpr int kThreads = 256;  // per group; also the visibilities placed per chunk
constexpr int kWarps = kThreads / 32;

struct Args {
  Placement g;
  const float *uu, *vv, *ww, *weight;
  const float2* vis;
  const std::int32_t* support;
  const std::int64_t* quarter_start;
  const float2* quarter;
  const double* footprint_sum;
  const std::int32_t* order;  // visibility indices, grouped, each group in time order
  const std::uint32_t *run_start, *run_length;
  const std::int32_t* num_runs;
  float2* grid;
  double* totals;        // [norm, gridded, skipped]
  double prior_skipped;  // the block's own skipped count, added by thread block 0
};

__global__ void identity_order(std::int32_t* p, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    p[i] = std::int32_t(i);
}

__device__ inline int wrap(int a, int L) {
  const int r = a % L;
  return r < 0 ? r + L : r;
}

__global__ void __launch_bounds__(kThreads) window_kernel(const Args a) {
  __shared__ int s_u[kThreads], s_v[kThreads];  // s_u < 0: the visibility is skipped
  __shared__ int s_off_u[kThreads], s_off_v[kThreads];
  __shared__ float2 s_val[kThreads];
  __shared__ float s_w;
  __shared__ int s_plane;
  __shared__ double part[3][kWarps];
  const int t = threadIdx.x, o = a.g.oversample;
  const std::int64_t n_grid = a.g.grid_size;
  double norm = 0, gridded = 0, skipped = 0;
  const std::int64_t runs = *a.num_runs;
  for (std::int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const std::uint32_t begin = a.run_start[r], len = a.run_length[r];
    __syncthreads();  // the previous group's readers of s_w, s_plane and the chunk are done
    if (t == 0) {
      double sum = 0;
      for (std::uint32_t e = begin; e < begin + len; ++e) sum += a.ww[a.order[e]];
      s_w = float(sum / double(len));
      s_plane = -1;
    }
    __syncthreads();
    const float w = s_w;
    for (std::uint32_t base = 0; base < len; base += kThreads) {
      if (base > 0) __syncthreads();  // the previous chunk's readers are done
      if (base + t < len) {
        const std::int32_t i = a.order[begin + base + t];
        GridCoord c;
        // A kernel cannot throw: non-finite uvw, an error on the cpu backend, count as skipped.
        if (place(a.g, a.support, a.uu[i], a.vv[i], w, c) == Placed::inside) {
          const float wt = a.weight[i];
          const float2 v = a.vis[i];
          s_u[t] = c.u;
          s_v[t] = c.v;
          s_off_u[t] = c.off_u;
          s_off_v[t] = c.off_v;
          s_val[t] = make_float2(v.x * wt, v.y * wt);
          s_plane = c.plane;  // the same for every visibility of the group: it depends on w alone
          norm += double(wt) * a.footprint_sum[footprint_index(c, o)];
          gridded += 1;
        } else {
          s_u[t] = -1;
          skipped += 1;
        }
      }
      __syncthreads();
      const int plane = s_plane;
      if (plane < 0) continue;
      const int count = int(min(len - base, std::uint32_t(kThreads)));
      const int s = a.support[plane], L = 2 * s + 1, S = kernel_half_size(o, s);
      const float2* kern = a.quarter + a.quarter_start[plane];
      const float conj = w > 0 ? -1.0f : 1.0f;
      for (int p = t; p < L * L; p += kThreads) {
        const int x = p % L, y = p / L;
        float2 acc = make_float2(0, 0);
        std::int64_t cell = -1;
        for (int q = 0; q < count; ++q) {
          const int u = s_u[q];
          if (u < 0) continue;
          const int v = s_v[q];
          const int gu = u - s + wrap(x - (u - s), L), gv = v - s + wrap(y - (v - s), L);
          const std::int64_t here = std::int64_t(gv) * n_grid + gu;
          if (here != cell) {
            if (cell >= 0) add_cell(a.grid + cell, acc);
            acc = make_float2(0, 0);
            cell = here;
          }
          float2 k = kern[abs(s_off_v[q] + (gv - v) * o) * S + abs(s_off_u[q] + (gu - u) * o)];
          k.y *= conj;
          const float2 val = s_val[q];
          acc.x += val.x * k.x - val.y * k.y;
          acc.y += val.y * k.x + val.x * k.y;
        }
        if (cell >= 0) add_cell(a.grid + cell, acc);
      }
    }
  }
  // One double atomic per thread block and total.
  for (int off = 16; off > 0; off /= 2) {
    norm += __shfl_down_sync(0xffffffffu, norm, off);
    gridded += __shfl_down_sync(0xffffffffu, gridded, off);
    skipped += __shfl_down_sync(0xffffffffu, skipped, off);
  }
  if ((t & 31) == 0) {
    part[0][t / 32] = norm;
    part[1][t / 32] = gridded;
    part[2][t / 32] = skipped;
  }
  __syncthreads();
  if (t < 3) {
    double sum = t == 2 && blockIdx.x == 0 ? a.prior_skipped : 0;
    for (int q = 0; q < kWarps; ++q) sum += part[t][q];
    if (sum != 0) atomicAdd(a.totals + t, sum);
  }
}

void cuda_check(cudaError_t e, const char* what) { device::check(e, "grid.moving_window (cuda)", what); }

class MovingWindowCuda final : public DeclaredStage<decl> {
 public:
  ~MovingWindowCuda() override {
    // The pinned staging must outlive the copies that read it.
    for (const device::Event& e : staged_) {
      try {
        if (e.valid()) e.synchronize();
      } catch (...) {  // a failed device has already been reported; a destructor must not throw
      }
    }
  }

  void prepare(PrepareContext& pc) override {
    if (pc.dry_run) return;
    grid_.prepare(pc, grid, /*double_sums=*/false);
    max_blocks_ = device::resident_blocks(reinterpret_cast<const void*>(window_kernel), kThreads);
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto ks = ctx.in(kernels);
    grid_atomic::check_inputs(*block, *ks, Location::device);
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    Grid& g = grid_.for_block(*block, *ks, stream, "grid.moving_window");
    const std::size_t n = block->size();

    // The keys go up through pinned staging, two buffers in turn: refilling one waits only for its
    // copy of two blocks ago, never for the device as a whole.
    Array<std::uint64_t>& staging = staging_[next_];
    if (staged_[next_].valid()) staged_[next_].synchronize();
    if (staging.size() < n) staging = Array<std::uint64_t>::host(n, true);
    const int end_bit = time_block_keys(*block, params().time_block, staging.data(), "grid.moving_window");
    auto keys_a = Array<std::uint64_t>::device(n, stream), keys_b = Array<std::uint64_t>::device(n, stream);
    auto order_a = Array<std::int32_t>::device(n, stream), order_b = Array<std::int32_t>::device(n, stream);
    auto unique = Array<std::uint64_t>::device(n, stream);
    auto lengths = Array<std::uint32_t>::device(n, stream), starts = Array<std::uint32_t>::device(n, stream);
    auto runs = Array<std::int32_t>::device(1, stream);
    device::memset_zero(runs.data(), runs.bytes(), stream);
    cub::DoubleBuffer<std::uint64_t> keys(keys_a.data(), keys_b.data());
    cub::DoubleBuffer<std::int32_t> order(order_a.data(), order_b.data());
    Array<std::uint8_t> temp;
    if (n > 0) {
      device::copy(keys_a.data(), staging.data(), n * sizeof(std::uint64_t), device::Copy::host_to_device, stream);
      staged_[next_] = stream.record();
      const unsigned fill = unsigned(std::min<std::size_t>((n + 255) / 256, std::size_t(max_blocks_) * 8));
      identity_order<<<fill, 256, 0, s>>>(order_a.data(), std::int64_t(n));
      device::check_launch("grid.moving_window: identity_order");
      device::memset_zero(lengths.data(), lengths.bytes(), stream);  // the scan reads past the runs
      const auto count = std::int64_t(n);
      std::size_t sort_bytes = 0, rle_bytes = 0, scan_bytes = 0;
      cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, order, count, 0, end_bit, s), "sort size");
      cuda_check(cub::DeviceRunLengthEncode::Encode(nullptr, rle_bytes, keys_a.data(), unique.data(), lengths.data(),
                                                    runs.data(), count, s),
                 "run-length size");
      cuda_check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, lengths.data(), starts.data(), count, s),
                 "scan size");
      temp = Array<std::uint8_t>::device(std::max({sort_bytes, rle_bytes, scan_bytes, std::size_t(1)}), stream);
      cuda_check(cub::DeviceRadixSort::SortPairs(temp.data(), sort_bytes, keys, order, count, 0, end_bit, s), "sort");
      cuda_check(cub::DeviceRunLengthEncode::Encode(temp.data(), rle_bytes, keys.Current(), unique.data(),
                                                    lengths.data(), runs.data(), count, s),
                 "run-length encode");
      cuda_check(cub::DeviceScan::ExclusiveSum(temp.data(), scan_bytes, lengths.data(), starts.data(), count, s),
                 "scan");
      next_ ^= 1;
    }
    if (n > 0 || block->skipped > 0) {
      const Args a{Placement::of(*ks),
                   block->uu.data(),
                   block->vv.data(),
                   block->ww.data(),
                   block->weight.data(),
                   reinterpret_cast<const float2*>(block->vis.data()),
                   ks->support.data(),
                   ks->quarter_start.data(),
                   reinterpret_cast<const float2*>(ks->quarter.data()),
                   ks->footprint_sum.data(),
                   order.Current(),
                   starts.data(),
                   lengths.data(),
                   runs.data(),
                   reinterpret_cast<float2*>(g.cells.data()),
                   g.totals.data(),
                   double(block->skipped)};
      const auto blocks = unsigned(std::max<std::size_t>(1, std::min<std::size_t>(n, std::size_t(max_blocks_))));
      window_kernel<<<blocks, kThreads, 0, s>>>(a);
      device::check_launch("grid.moving_window: window_kernel");
    }
    keep_until(stream.record(), {&keys_a, &keys_b, &order_a, &order_b, &unique, &lengths, &starts, &runs, &temp});
    // Updates are left out: the supports are read on the device (as grid.atomic).
    ctx.add_work({.visibilities = double(n)});
  }

  void finish(Context& ctx) override { grid_.finish(ctx, kernels, grid, "grid.moving_window"); }

 private:
  int max_blocks_ = 1;
  DeviceGridSum grid_;
  Array<std::uint64_t> staging_[2];
  device::Event staged_[2];
  int next_ = 0;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<MovingWindowCuda>(); }

}  // namespace uvflow::grid_moving_window
