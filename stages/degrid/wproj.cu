// degrid.wproj, cuda backend: one warp per visibility (a grid-stride loop over the block), its
// lanes across the flattened (2s+1)^2 footprint, one warp reduction per visibility. A gather
// writes nothing shared, so there are no atomics. Two designs, chosen by `variant`:
//   gather  the degridding report's (003): quarter kernels read at |off + k o|, stride o along u.
//   uvflow  the same work split, kernel values read from the rows layout, so consecutive lanes
//           read consecutive kernel values and grid cells (one coalesced load each), and each
//           lane steps through the footprint without a division per point.
#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda_check.hpp"
#include "stages/degrid/wproj.hpp"
#include "stages/shared/degrid_inputs.hpp"
#include "stages/shared/placement.hpp"

namespace uvflow::degrid_wproj {
namespace {

constexpr int kWarp = 32, kWarpsPerBlock = 8;

struct Args {
  Placement g;
  std::int64_t n;
  const GridCoord* coords;  // placed blocks; null: place here
  const float *uu, *vv, *ww;
  const std::int32_t* support;
  const std::int64_t* start;  // quarter_start (gather) or rows_start (uvflow)
  const float2* kernels;      // quarter (gather) or rows (uvflow)
  const float2* grid;
  float2* out;
  double* work;  // [visibilities, updates]
};

template <bool kRows>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock) degrid_kernel(const Args a) {
  const int lane = threadIdx.x, o = a.g.oversample, half = o / 2;
  const std::int64_t N = a.g.grid_size, warps = std::int64_t(gridDim.x) * kWarpsPerBlock;
  double predicted = 0, updates = 0;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.y; i < a.n; i += warps) {
    GridCoord c;
    bool inside;
    if (a.coords) {
      c = a.coords[i];
      inside = c.plane >= 0;
    } else {
      inside = place(a.g, a.support, a.uu[i], a.vv[i], a.ww[i], c) == Placed::inside;
    }
    if (!inside) {
      if (lane == 0) a.out[i] = make_float2(0, 0);
      continue;
    }
    const int s = c.support, L = 2 * s + 1, S = kernel_half_size(o, s);
    const float sign = c.conj ? -1.0f : 1.0f;
    const float2* kern = a.kernels + a.start[c.plane];
    if (kRows) kern += std::int64_t(c.off_u + half) * S * L;
    const float2* g0 = a.grid + (c.v - s) * N + (c.u - s);
    float rr = 0, ii = 0, ir = 0, ri = 0;
    int j = lane / L, k = lane % L;  // this lane's first footprint point, row j, column k
    for (int t = lane; t < L * L; t += kWarp) {
      const int iy = abs(c.off_v + (j - s) * o);
      const float2 kv = kRows ? kern[std::int64_t(iy) * L + k] : kern[std::int64_t(iy) * S + abs(c.off_u + (k - s) * o)];
      const float2 gv = g0[j * N + k];
      rr += gv.x * kv.x;
      ii += gv.y * kv.y;
      ir += gv.y * kv.x;
      ri += gv.x * kv.y;
      k += kWarp;
      while (k >= L) {
        k -= L;
        ++j;
      }
    }
    // G * conj(C), C = (cr, sign * ci) as the gridder adds it.
    float re = rr + sign * ii, im = ir - sign * ri;
    for (int d = kWarp / 2; d > 0; d /= 2) {
      re += __shfl_down_sync(0xffffffffu, re, d);
      im += __shfl_down_sync(0xffffffffu, im, d);
    }
    if (lane == 0) a.out[i] = make_float2(re, im);
    predicted += 1;
    updates += double(L) * L;
  }
  __shared__ double part[2][kWarpsPerBlock];
  if (lane == 0) {
    part[0][threadIdx.y] = predicted;
    part[1][threadIdx.y] = updates;
  }
  __syncthreads();
  if (threadIdx.y == 0 && lane < 2) {
    double sum = 0;
    for (int q = 0; q < kWarpsPerBlock; ++q) sum += part[lane][q];
    if (sum != 0) atomicAdd(a.work + lane, sum);
  }
}

class WprojDegridderCuda final : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override {
    if (pc.dry_run) return;
    rows_ = params().variant == "uvflow";
    const void* k = rows_ ? reinterpret_cast<const void*>(degrid_kernel<true>)
                          : reinterpret_cast<const void*>(degrid_kernel<false>);
    max_blocks_ = device::resident_blocks(k, kWarp * kWarpsPerBlock);
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto g = ctx.in(grid);
    auto ks = ctx.in(kernels);
    degrid_inputs::check(*block, *g, *ks, "degrid.wproj (cuda)");
    check_on_device(g->cells, "the model grid");
    check_on_device(block->uu, "the visibilities");
    const Array<std::int64_t>& start = rows_ ? ks->rows_start : ks->quarter_start;
    const Array<cfloat>& table = rows_ ? ks->rows : ks->quarter;
    if (start.size() != std::size_t(ks->planes) || table.empty())
      throw InputError(std::string("degrid.wproj (cuda): the kernel stack has no ") + (rows_ ? "rows" : "quarter") +
                       " layout: set kernels.wproj's layouts to " + (rows_ ? "rows or all" : "any"));
    const device::Stream& stream = ctx.stream();
    if (work_.empty()) {
      work_ = Array<double>::device(2, stream);
      device::memset_zero(work_.data(), work_.bytes(), stream);
      ctx.add_work_on_device(work_);
    }
    const std::int64_t n = std::int64_t(block->size());
    auto out = std::make_shared<VisBlock>(*block);
    out->vis = Array<cfloat>::device(block->size(), stream);
    if (n > 0) {
      const bool placed = block->placed() && block->grid_size == ks->geom.grid_size;
      const Args a{Placement::of(*ks),
                   n,
                   placed ? block->coords.data() : nullptr,
                   block->uu.data(),
                   block->vv.data(),
                   block->ww.data(),
                   ks->support.data(),
                   start.data(),
                   reinterpret_cast<const float2*>(table.data()),
                   reinterpret_cast<const float2*>(g->cells.data()),
                   reinterpret_cast<float2*>(out->vis.data()),
                   work_.data()};
      const auto blocks = unsigned(std::min<std::int64_t>((n + kWarpsPerBlock - 1) / kWarpsPerBlock, max_blocks_));
      auto s = static_cast<cudaStream_t>(stream.native());
      if (rows_)
        degrid_kernel<true><<<blocks, dim3(kWarp, kWarpsPerBlock), 0, s>>>(a);
      else
        degrid_kernel<false><<<blocks, dim3(kWarp, kWarpsPerBlock), 0, s>>>(a);
      device::check_launch("degrid.wproj: degrid_kernel");
    }
    ctx.emit(model, out);
  }

 private:
  bool rows_ = true;
  int max_blocks_ = 1;
  Array<double> work_;
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WprojDegridderCuda>(); }

}  // namespace uvflow::degrid_wproj
