// grid.atomic, cuda backend, two designs chosen by `variant`:
//   listing  Listing 4 of the NAG memo: one warp per visibility (grid-stride over the block), the
//            warp's lanes across k, an atomic add per update.
//   uvflow   degrid.wproj's uvflow design transposed: the block in locality order and groups
//            (stages/shared/locality_order.cuh); a warp walks a group's union of footprints, each
//            lane owning a column, and at each point adds the members' sum with one float2 atomic
//            (a member: a cell and sub-cell offset, the values of its visibilities summed first).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/cuda_check.hpp"
#include "stages/grid/atomic.hpp"
#include "stages/shared/device_grid.hpp"
#include "stages/shared/grid_atomics.cuh"
#include "stages/shared/locality_order.cuh"
#include "stages/shared/placement.hpp"

namespace uvflow::grid_atomic {
namespace {

constexpr int kWarpsPerBlock = 8;
using locality::kFull;
using locality::kWarp;

struct Args {
  Placement g;
  std::int64_t n;
  const float *uu, *vv, *ww, *weight;
  const float2* vis;
  const std::int32_t* support;
  const std::int64_t* quarter_start;
  const float2* quarter;
  const double* footprint_sum;
  float2* grid;
  double2* grid64;  // accumulate: double: the sums go here (rounded to `grid` at the end); else null
  double* totals;   // [norm, gridded, skipped]
  double2* box;     // float sums: kBoxCopies copies of the central box_n^2 cells from (box_lo, box_lo), in double
  int box_lo, box_n;
};

// The central cells take the most sums (the short baselines pile up there): each thread block adds
// to copy blockIdx % kBoxCopies of the box, so that fewer warps contend for one double's atomics
// (uvflow on the H100, gridding ms for 1 / 32 / 128 copies: el56-82 28.3-28.6 / 27.6 / 27.6,
// el82-70 18.6-18.8 / 17.7 / 17.8, el30-56 79.8-80.3 / 79.2-79.3 / 79.6-79.7).
constexpr int kBoxCopies = 32;

// Where a float sum for cell (u, v) goes: the double box when the cell is in it (double_box), else
// the cell (`at`). Cells of a double grid are never in a box.
__device__ __forceinline__ void add_sum(const Args& a, float2* at, int u, int v, float2 sum) {
  const unsigned bu = unsigned(u - a.box_lo), bv = unsigned(v - a.box_lo);
  if (bu < unsigned(a.box_n) && bv < unsigned(a.box_n))
    add_cell(a.box + ((std::int64_t(blockIdx.x % kBoxCopies) * a.box_n + bv) * a.box_n + bu), sum);
  else
    add_cell(at, sum);
}
__device__ __forceinline__ void add_sum(const Args&, double2* at, int, int, float2 sum) { add_cell(at, sum); }

// The cells a kernel instantiated for float2 (accumulate: float) or double2 sums adds to.
template <class Cell>
__device__ __forceinline__ Cell* cells_of(const Args& a) {
  if constexpr (std::is_same_v<Cell, double2>) return a.grid64;
  else return a.grid;
}

// A block's tallies summed per thread block (lane 0 of each warp holds its warp's), then one double
// atomic per block and total, not one per visibility on three hot addresses.
template <int kWarps>
__device__ void add_totals(double* totals, double norm, double gridded, double skipped) {
  __shared__ double part[3][kWarps];
  const int lane = threadIdx.x & (kWarp - 1), w = threadIdx.x / kWarp + threadIdx.y;
  if (lane == 0) {
    part[0][w] = norm;
    part[1][w] = gridded;
    part[2][w] = skipped;
  }
  __syncthreads();
  if (w == 0 && lane < 3) {
    double sum = 0;
    for (int q = 0; q < kWarps; ++q) sum += part[lane][q];
    if (sum != 0) atomicAdd(totals + lane, sum);
  }
}

template <class Cell>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock) grid_atomic_kernel(const Args a) {
  const int lane = threadIdx.x, o = a.g.oversample;
  const std::int64_t n_grid = a.g.grid_size, warps = std::int64_t(gridDim.x) * kWarpsPerBlock;
  static_assert(std::is_same_v<Cell, float2> || std::is_same_v<Cell, double2>);
  // Every lane places the visibility itself (the loads are broadcasts), so these tallies are the
  // same in every lane of a warp and lane 0's stand for the warp.
  double norm = 0, gridded = 0, skipped = 0;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.y; i < a.n; i += warps) {
    GridCoord p;
    // A kernel cannot throw: non-finite uvw, an error on the host, count as skipped here.
    if (place(a.g, a.support, a.uu[i], a.vv[i], a.ww[i], p) != Placed::inside) {
      skipped += 1;
      continue;
    }
    const int s = p.support, S = kernel_half_size(o, s);
    const float w = a.weight[i];
    const float2 v = a.vis[i];
    const float vr = v.x * w, vi = v.y * w, conj = p.conj ? -1.0f : 1.0f;
    const float2* kern = a.quarter + a.quarter_start[p.plane];
    for (int j = -s; j <= s; ++j) {
      const float2* krow = kern + std::int64_t(abs(p.off_v + j * o)) * S;
      Cell* row = cells_of<Cell>(a) + (p.v + j) * n_grid + p.u;
      for (int k = -s + lane; k <= s; k += kWarp) {
        float2 c = krow[abs(p.off_u + k * o)];
        c.y *= conj;
        add_sum(a, row + k, p.u + k, p.v + j, make_float2(vr * c.x - vi * c.y, vi * c.x + vr * c.y));
      }
    }
    norm += double(w) * a.footprint_sum[footprint_index(p, o)];
    gridded += 1;
  }
  add_totals<kWarpsPerBlock>(a.totals, norm, gridded, skipped);
}

// double_box: the box's copies summed in double and added into the float grid, rounded once.
__global__ void add_box(const double2* box, float2* cells, int N, int lo, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * n) return;
  float2& c = cells[std::int64_t(lo + i / n) * N + lo + i % n];
  double x = c.x, y = c.y;
  for (int k = 0; k < kBoxCopies; ++k) {
    x += box[std::int64_t(k) * n * n + i].x;
    y += box[std::int64_t(k) * n * n + i].y;
  }
  c = make_float2(float(x), float(y));
}

// Groups of up to 8 (the walk keeps 3 registers per member, against the degridder's 5): on
// el56-82, in a prototype inside the degridder's walker, groups of 8 within 6 cells along v took
// 24.8 ms against 25.1 within 3, 34.6 ms for groups of 6 within 3 and 30.4-31.6 ms for 12 (spilled);
// bench/results/h100_uvflow_gridder.md has this kernel's figures.
constexpr int kGroup = 8, kSpanV = 6;
constexpr int kRowSlots = locality::row_slots(kGroup);
// Warps per walker block (one block per SM): 20 at 96 registers against the degridder's 24 at 80,
// on the H200 in two calls, 5 runs each: el82-70 13.66-13.71 ms against 13.77-13.83; el56-82
// 21.20-21.39 against 21.31-21.37 and el30-56 55.56-55.74 against 55.37-55.73, even. Without
// locality::loads_issued, which the spare registers might have made unneeded, 20 and 16 warps took
// 14.1 and 14.2 ms on el82-70.
constexpr int kWalkerWarps = 20;
using locality::kRowTile;

struct GroupArgs {
  Args a;
  locality::ResidueTable::View table;  // the kernels in residue order, with zeros
  double* work;  // [visibilities, updates]: updates only (the host counts visibilities)
  float2* spare;  // a cell per walker thread, where a lane without a point adds its zero sum (never read)
};

// A group of exactly K members (bits of `members`; each member lane holds its weighted visibility
// in `value`, conjugated for a conjugated kernel: V conj(C) = conj(conj(V) C), and the sum is
// conjugated back by `sign`) of one plane, support s, whose footprints' union is W x H cells from
// (u_lo - s, v_lo - s). Every lane walks the union's columns (G lanes along a row, R rows at once);
// per point it reads the members' staged row offsets (a broadcast of K ints in 16-byte reads), per
// member one kernel value (the K loads issued together: locality::loads_issued) and 4 FMAs, and adds
// the sum with one atomic. A member whose footprint misses the lane's column reads its rows' zero
// column (ResidueTable), so the loop tests nothing per member (on the H200, gridding el56-82 took
// 23.4 ms against 25.4 with a test per member and one shared read per member, el82-70 15.4 against
// 16.6, el30-56 59.5 against 65.3).
template <class Cell, int K, bool kBox>
__device__ __forceinline__ void grid_group(const GroupArgs& ga, float2 value, float sign, unsigned members, int s,
                                           int u_lo, int v_lo, int W, int H, int (*rowp)[kRowSlots],
                                           const locality::Member* memb) {
  const Args& a = ga.a;
  const int lane = threadIdx.x & (kWarp - 1), o = a.g.oversample, L = 2 * s + 1, S = kernel_half_size(o, s);
  const std::int64_t N = a.g.grid_size;
  const int G = W <= 8 ? 8 : (W <= 16 ? 16 : kWarp), R = kWarp / G;
  const int col = lane & (G - 1), row = lane / G;
  float vr[K], vi[K];
  float2* const spare =
      ga.spare + (std::int64_t(blockIdx.x) * kWalkerWarps + threadIdx.x / kWarp) * kWarp + lane;
  // The members' lanes lowest first, by clearing bits (__fns per member made the kernel 5-8 % slower
  // on el56-82 and el82-70).
  unsigned rest = members;
#pragma unroll
  for (int m = 0; m < K; ++m) {
    const int src = __ffs(rest) - 1;
    rest &= rest - 1;
    vr[m] = __shfl_sync(kFull, value.x, src);
    vi[m] = __shfl_sync(kFull, value.y, src);
  }
  for (int x = col; x - col < W; x += G) {  // every lane takes part: the row tables are shared
    const bool on = x < W;
    Cell* gcol = cells_of<Cell>(a) + (v_lo - s + row) * N + (u_lo - s) + x;
    int colofs[K];
#pragma unroll
    for (int m = 0; m < K; ++m)
      colofs[m] = unsigned(x - memb[m].du) < unsigned(L) ? residue_run_column(memb[m].cols, x - memb[m].du) : S;
    for (int y0 = 0; y0 < H; y0 += kRowTile) {
      const int rows = min(kRowTile, H - y0);
      locality::stage_rows<K>(memb, s, o, y0, rowp);
      Cell* gp = gcol + y0 * N;
      // Every lane takes every pass, also one past the union's last row or column: it reads zero
      // kernel values (zero rows and columns of the table) and adds its zero sum to its spare cell.
      // So the warp stays converged (the fence is one barrier, and the shuffles and votes of the
      // next group take their converged path) and the point loop has no branch but its own (a test
      // around the atomic costs a convergence barrier per point). On the H200 against the loop
      // that skipped such lanes: el82-70 13.79-13.87 ms against 15.25-15.31, el56-82 21.37-21.57
      // against 22.46-22.56, el30-56 55.4-56.1 against 55.5-55.8. Box groups keep the test.
      for (int yy = row; yy - row < rows; yy += R, gp += R * N) {
        float sx = 0, sy = 0;
        int rp[locality::row_slots(K)];
        locality::read_row<K>(rowp[yy], rp);
        float2 kv[K];
#pragma unroll
        for (int m = 0; m < K; ++m) kv[m] = __ldg(ga.table.values + (rp[m] + colofs[m]));
        if constexpr (K >= 4) locality::loads_issued();  // ptxas keeps the loads of K <= 3 together
#pragma unroll
        for (int m = 0; m < K; ++m) {
          sx = fmaf(-vi[m], kv[m].y, fmaf(vr[m], kv[m].x, sx));
          sy = fmaf(vr[m], kv[m].y, fmaf(vi[m], kv[m].x, sy));
        }
        const float2 sum = make_float2(sx, sign * sy);
        const bool point = on && yy < rows;
        if constexpr (kBox || !std::is_same_v<Cell, float2>) {
          if (point) add_sum(a, gp, u_lo - s + x, v_lo - s + y0 + yy, sum);
        } else {
          add_cell(point ? gp : spare, sum);
        }
      }
    }
  }
}

template <class Cell, int K, int kMax, bool kBox>
__device__ __forceinline__ void grid_group_of(int n, const GroupArgs& ga, float2 value, float sign, unsigned members,
                                              int s, int u_lo, int v_lo, int W, int H, int (*rowp)[kRowSlots],
                                              const locality::Member* memb) {
  if constexpr (K <= kMax) {
    if (n == K)
      grid_group<Cell, K, kBox>(ga, value, sign, members, s, u_lo, v_lo, W, H, rowp, memb);
    else
      grid_group_of<Cell, K + 1, kMax, kBox>(n, ga, value, sign, members, s, u_lo, v_lo, W, H, rowp, memb);
  }
}

// The walker: the warp's claims on the order, each lane one entry (its tallies; those off the grid
// skipped), then the entries by group. The tallies stay in registers: on el56-82 this took 28.7 ms,
// against 39-41 ms with them summed per warp in shared memory or made by a kernel of their own, and
// 40 ms with the members' values read from shared memory (same instructions and atomics, Nsight
// Compute; the compiler's schedule differs).
template <class Cell>
__global__ void __launch_bounds__(kWarp* kWalkerWarps, 1)
    grouped_kernel(const GroupArgs ga, const GridCoord* coords, const locality::Entries order, int ranges,
                   const std::int64_t* range_start, unsigned long long* next) {
  __shared__ __align__(16) int rowp[kWalkerWarps][kRowTile][kRowSlots];
  __shared__ locality::Member memb[kWalkerWarps][kGroup];
  const Args& a = ga.a;
  const int lane = threadIdx.x & (kWarp - 1), w = threadIdx.x / kWarp, o = a.g.oversample;
  double norm = 0, gridded = 0, skipped = 0, updates = 0;
  locality::Claims claims(ranges);
  std::int64_t c0;
  int count;
  while (claims.next(ranges, range_start, next, c0, count)) {
    GridCoord mine = off_grid();
    float2 value{};
    if (lane < count) {
      const std::int32_t idx = order[c0 + lane];
      mine = coords[idx];
      if (mine.plane < 0) {
        skipped += 1;
      } else {
        const float wt = a.weight[idx];
        const float2 v = a.vis[idx];
        value = make_float2(v.x * wt, (mine.conj ? -v.y : v.y) * wt);
        norm += double(wt) * a.footprint_sum[footprint_index(mine, o)];
        gridded += 1;
        updates += double(2 * mine.support + 1) * (2 * mine.support + 1);
      }
    }
    __syncwarp();  // converged for the votes and shuffles of the groups
    unsigned pending = __ballot_sync(kFull, mine.plane >= 0);
    while (pending) {
      const locality::Group gr = locality::next_group<kGroup, kSpanV>(pending, mine);
      // Duplicates (one cell and sub-cell offset) add their values to their leader's, which grids the sum.
      float2 sum = value;
      for (unsigned dups = gr.members & ~gr.leaders; dups; dups &= dups - 1) {
        const int d = __ffs(dups) - 1;
        const float x = __shfl_sync(kFull, value.x, d), y = __shfl_sync(kFull, value.y, d);
        if (gr.same >> d & 1) sum.x += x, sum.y += y;  // the lanes of d's key: only its leader's sum is used
      }
      locality::stage_members(gr.leaders, mine, gr.u_lo, gr.v_lo, gr.s, o, ga.table.start[gr.plane], memb[w]);
      const float sign = __shfl_sync(kFull, mine.conj ? -1.0f : 1.0f, __ffs(gr.leaders) - 1);
      // Groups whose union reaches the central box (float sums only) take the path that sends
      // its cells to the double box; the others keep the plain loop.
      const int u0 = gr.u_lo - gr.s, v0 = gr.v_lo - gr.s, lo = a.box_lo, hi = a.box_lo + a.box_n;
      if (std::is_same_v<Cell, float2> && u0 < hi && u0 + gr.W > lo && v0 < hi && v0 + gr.H > lo)
        grid_group_of<Cell, 1, kGroup, true>(__popc(gr.leaders), ga, sum, sign, gr.leaders, gr.s, gr.u_lo, gr.v_lo,
                                             gr.W, gr.H, rowp[w], memb[w]);
      else
        grid_group_of<Cell, 1, kGroup, false>(__popc(gr.leaders), ga, sum, sign, gr.leaders, gr.s, gr.u_lo,
                                              gr.v_lo, gr.W, gr.H, rowp[w], memb[w]);
    }
  }
  for (int d = kWarp / 2; d > 0; d /= 2) {
    norm += __shfl_down_sync(kFull, norm, d);
    gridded += __shfl_down_sync(kFull, gridded, d);
    skipped += __shfl_down_sync(kFull, skipped, d);
    updates += __shfl_down_sync(kFull, updates, d);
  }
  if (lane == 0 && updates != 0) atomicAdd(ga.work + 1, updates);
  add_totals<kWalkerWarps>(a.totals, norm, gridded, skipped);
}

class AtomicCuda final : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override {
    if (pc.dry_run) return;
    double_sums_ = params().accumulate == "double";
    grid_.prepare(pc, grid, double_sums_);
    uvflow_ = params().variant == "uvflow";
    if (double_sums_) launch_shapes<double2>();
    else launch_shapes<float2>();
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    const std::shared_ptr<const KernelStack> ks = ctx.in(kernels);
    check_inputs(*block, *ks, Location::device);
    const device::Stream& stream = ctx.stream();
    Grid& g = grid_.for_block(*block, *ks, stream, "grid.atomic");
    const std::int64_t n = std::int64_t(block->size());
    const int N = int(ks->geom.grid_size), n_box = double_sums_ ? 0 : int(std::min<std::int64_t>(params().double_box, N));
    if (n_box > 0 && box_.empty()) {
      box_n_ = n_box;
      box_ = Array<cdouble>::device(std::size_t(kBoxCopies) * n_box * n_box, stream);
      device::memset_zero(box_.data(), box_.bytes(), stream);
    }
    if (n > 0) {
      const Args a{{ks->geom.scale(), ks->w_scale, ks->geom.grid_size, ks->planes, ks->oversample},
                   n,
                   block->uu.data(),
                   block->vv.data(),
                   block->ww.data(),
                   block->weight.data(),
                   reinterpret_cast<const float2*>(block->vis.data()),
                   ks->support.data(),
                   ks->quarter_start.data(),
                   reinterpret_cast<const float2*>(ks->quarter.data()),
                   ks->footprint_sum.data(),
                   reinterpret_cast<float2*>(g.cells.data()),
                   reinterpret_cast<double2*>(g.cells64.data()),
                   g.totals.data(),
                   reinterpret_cast<double2*>(box_.data()),
                   N / 2 - n_box / 2,
                   n_box};
      if (double_sums_) launch<double2>(ctx, a, *block, ks);
      else launch<float2>(ctx, a, *block, ks);
    }
    // Updates: listing leaves them out (the supports are read on the device, see the stage doc);
    // uvflow counts them there.
    ctx.add_work({.visibilities = double(n)});
  }

  void finish(Context& ctx) override {
    if (!box_.empty()) {  // the central box's double sums, rounded once into the float grid
      Grid* g = grid_.grid();
      const int N = int(g->geom.grid_size), n = box_n_;
      add_box<<<unsigned((n * n + 255) / 256), 256, 0, static_cast<cudaStream_t>(ctx.stream().native())>>>(
          reinterpret_cast<const double2*>(box_.data()), reinterpret_cast<float2*>(g->cells.data()), N, N / 2 - n / 2, n);
      device::check_launch("grid.atomic: add_box");
      keep_until(ctx.stream().record(), {&box_});
      box_ = {};
    }
    grid_.finish(ctx, kernels, grid, "grid.atomic");
  }

 private:
  template <class Cell>
  void launch_shapes() {
    if (uvflow_) {
      walker_ = locality::walker_launch(reinterpret_cast<const void*>(grouped_kernel<Cell>), kWalkerWarps);
      order_stream_ = device::Stream::create();
    } else {  // enough blocks to fill every SM once; the grid-stride loop covers larger blocks
      max_blocks_ =
          device::resident_blocks(reinterpret_cast<const void*>(grid_atomic_kernel<Cell>), kWarp * kWarpsPerBlock);
    }
  }

  template <class Cell>
  void launch(Context& ctx, const Args& a, const VisBlock& block, const std::shared_ptr<const KernelStack>& ks) {
    if (uvflow_) {
      grouped<Cell>(ctx, a, block, ks);
    } else {
      const auto blocks = unsigned(std::min<std::int64_t>((a.n + kWarpsPerBlock - 1) / kWarpsPerBlock, max_blocks_));
      grid_atomic_kernel<Cell>
          <<<blocks, dim3(kWarp, kWarpsPerBlock), 0, static_cast<cudaStream_t>(ctx.stream().native())>>>(a);
      device::check_launch("grid.atomic: grid_atomic_kernel launch");
    }
  }

  // The locality order, then the walker. Placed blocks (uvw.w_sort) reuse their coords.
  template <class Cell>
  void grouped(Context& ctx, const Args& a, const VisBlock& block, const std::shared_ptr<const KernelStack>& ks) {
    const device::Stream& stream = ctx.stream();
    if (work_.empty()) {
      work_ = Array<double>::device(2, stream);
      device::memset_zero(work_.data(), work_.bytes(), stream);
      ctx.add_work_on_device(work_);
    }
    if (spare_.empty()) {
      spare_ = Array<cfloat>::device(std::size_t(walker_.blocks) * kWarp * kWalkerWarps, stream);
      device::memset_zero(spare_.data(), spare_.bytes(), stream);
    }
    const GroupArgs ga{a, table_.of(ks, order_stream_, stream, "grid.atomic (cuda)"), work_.data(),
                       reinterpret_cast<float2*>(spare_.data())};
    const bool placed = block.placed() && block.grid_size == ks->geom.grid_size;
    locality::Order order;
    order.build({a.g, a.n, placed ? block.coords.data() : nullptr, a.uu, a.vv, a.ww, a.support,
                 placed && block.cell_order},
                block, *ks, walker_.ranges, order_stream_, stream, "grid.atomic (cuda)");
    grouped_kernel<Cell><<<unsigned(walker_.blocks), kWarp * kWalkerWarps, 0,
                     static_cast<cudaStream_t>(stream.native())>>>(ga, order.coords(), order.entries(), order.ranges(),
                                                                   order.range_start(), order.next());
    device::check_launch("grid.atomic: grouped_kernel");
    order.release(stream);
  }

  bool uvflow_ = false, double_sums_ = false;
  int max_blocks_ = 1;
  locality::WalkerLaunch walker_;
  device::Stream order_stream_;  // uvflow: the locality orders' (Order::build)
  locality::ResidueTable table_;
  Array<double> work_;
  Array<cfloat> spare_;  // GroupArgs::spare
  Array<cdouble> box_;  // float sums: kBoxCopies copies of the central box_n_^2 cells' double sums, made at the first block
  int box_n_ = 0;
  DeviceGridSum grid_;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<AtomicCuda>(); }

}  // namespace uvflow::grid_atomic
