#include "stages/grid/tiled.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_invoke.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <climits>
#include <cstdlib>
#include <vector>

#include "runtime/dist.hpp"
#include "runtime/error.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/tiles.hpp"
#include "stages/shared/chebyshev.hpp"
#include "stages/shared/placement.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::grid_tiled {
namespace {

// g += (vis*weight) * C along one run of kernel values, (re, im) interleaved. The conjugation is
// folded into vr_s = sign*vr and vi_s = sign*vi (exact, sign = +-1), so the loop has no branch
// and vectorises, and every update rounds exactly as grid.serial's does.
inline void add_row(float* __restrict g, const float* __restrict k, int n, float vr, float vi, float vr_s, float vi_s) {
  for (int m = 0; m < n; ++m) {
    const float cr = k[2 * m], ci = k[2 * m + 1];
    g[2 * m] += vr * cr - vi_s * ci;
    g[2 * m + 1] += vi * cr + vr_s * ci;
  }
}

struct CellBox {  // inclusive cell ranges
  int u0, u1, v0, v1;
};

// Where the gridding loop gets a footprint row's kernel values K(|off_u + k o|, |off_v + j o|),
// k = k0..k0+n-1: `at` once per visibility, `row` once per footprint row j.
// The table (variant uvflow): runs of the rows layout, read in place.
class TableRows {
 public:
  explicit TableRows(const KernelStack& ks) : rows_(ks.rows.host_data()), rows_start_(ks.rows_start.host_data()), o_(ks.oversample) {}
  struct At {
    const cfloat* runs;
    int row_len;
  };
  // The run for (plane, off_u, iy) holds K[iy][|off_u + k*o|], k = -s..s; start at k0.
  At at(const GridCoord& c, int k0) const {
    const int s = c.support, row_len = 2 * s + 1, half_size = o_ / 2 + o_ * s + 1;
    return {rows_ + rows_start_[c.plane] + std::int64_t(c.off_u + o_ / 2) * half_size * row_len + s + k0, row_len};
  }
  const cfloat* row(const At& a, const GridCoord& c, int j, int, cfloat*) const {
    return a.runs + std::int64_t(std::abs(c.off_v + j * o_)) * a.row_len;
  }
  std::size_t scratch() const { return 0; }

 private:
  const cfloat* rows_;
  const std::int64_t* rows_start_;
  int o_;
};

// The Chebyshev series (variant chebyshev): evaluated into a scratch run at each point's distance.
class ChebyshevRows {
 public:
  explicit ChebyshevRows(const KernelStack& ks)
      : cheb_(ChebyshevKernel::of(ks)), o_(ks.oversample), max_row_(2 * std::size_t(ks.max_support) + 1) {}
  struct At {
    ChebyshevKernel::Plane plane;
    int ix0;  // sub-sample offset along u of footprint column k0
  };
  At at(const GridCoord& c, int k0) const { return {cheb_.plane(c.plane), c.off_u + k0 * o_}; }
  const cfloat* row(const At& a, const GridCoord& c, int j, int n, cfloat* out) const {
    const int iy = c.off_v + j * o_;
    for (int m = 0; m < n; ++m) {
      float re, im;
      cheb_.value(a.plane, a.ix0 + m * o_, iy, re, im);
      out[m] = cfloat(re, im);
    }
    return out;
  }
  std::size_t scratch() const { return max_row_; }

 private:
  ChebyshevKernel cheb_;
  int o_;
  std::size_t max_row_;
};

// One block's tiles with the kernels: what a tile costs, and gridding a run of its entries.
template <class Kernel>
class TileGridder {
 public:
  TileGridder(const TileBuckets& b, const KernelStack& ks)
      : l_(b.layout),
        offsets_(b.offsets.host_data()),
        entries_(b.entries.host_data()),
        n_(std::int64_t(b.vis.size())),
        coords_(b.vis.coords.host_data()),
        vis_(b.vis.vis.host_data()),
        weight_(b.vis.weight.host_data()),
        kernel_(ks) {}

  const std::int64_t* offsets() const { return offsets_; }

  CellBox cells(std::int64_t t) const {
    const int u0 = l_.origin_u + int(t % l_.ntiles_u) * l_.tile_u, v0 = l_.origin_v + int(t / l_.ntiles_u) * l_.tile_v;
    return {u0, u0 + l_.tile_u - 1, v0, v0 + l_.tile_v - 1};
  }

  // Kernel-point updates in tile t: its visibilities' footprints clipped to the tile. Also checks
  // the entries, so that gridding them cannot write outside the tile.
  std::int64_t updates(std::int64_t t) const {
    const CellBox b = cells(t);
    std::int64_t sum = 0;
    for (std::int64_t e = offsets_[t]; e < offsets_[t + 1]; ++e) {
      const std::int32_t i = entries_[e];
      if (i < 0 || i >= n_) throw InputError("tile " + std::to_string(t) + " lists visibility " + std::to_string(i) +
                                             " of a block of " + std::to_string(n_));
      const GridCoord& c = coords_[i];
      const int du = std::min(b.u1 - c.u, +c.support) - std::max(b.u0 - c.u, -c.support) + 1;
      const int dv = std::min(b.v1 - c.v, +c.support) - std::max(b.v0 - c.v, -c.support) + 1;
      if (du <= 0 || dv <= 0)
        throw InputError("tile " + std::to_string(t) + " lists visibility " + std::to_string(i) +
                         ", whose footprint does not meet it");
      sum += std::int64_t(du) * dv;
    }
    return sum;
  }

  // The cells that entries [e0, e1) of tile t touch, clipped to the tile, as a box (u0 > u1 when none).
  CellBox touched(std::int64_t t, std::int64_t e0, std::int64_t e1) const {
    const CellBox b = cells(t);
    CellBox box{b.u1 + 1, b.u0 - 1, b.v1 + 1, b.v0 - 1};
    for (std::int64_t e = e0; e < e1; ++e) {
      const GridCoord& c = coords_[entries_[e]];
      box = {std::min(box.u0, std::max(b.u0, c.u - c.support)), std::max(box.u1, std::min(b.u1, c.u + c.support)),
             std::min(box.v0, std::max(b.v0, c.v - c.support)), std::max(box.v1, std::min(b.v1, c.v + c.support))};
    }
    return box;
  }

  // Grids entries [e0, e1) of tile t, each footprint clipped to the tile, into `target`: a
  // row-major array whose element 0 is grid cell (origin_u, origin_v), rows `stride` apart.
  void grid(std::int64_t t, std::int64_t e0, std::int64_t e1, cfloat* target, int origin_u, int origin_v,
            std::int64_t stride) const {
    const CellBox b = cells(t);
    std::vector<cfloat> scratch(kernel_.scratch());
    for (std::int64_t e = e0; e < e1; ++e) {
      const std::int32_t i = entries_[e];
      const GridCoord c = coords_[i];
      const int s = c.support;
      const int k0 = std::max(b.u0 - c.u, -s), k1 = std::min(b.u1 - c.u, s);
      const int j0 = std::max(b.v0 - c.v, -s), j1 = std::min(b.v1 - c.v, s);
      const float vr = vis_[i].real() * weight_[i], vi = vis_[i].imag() * weight_[i];
      const float sign = c.conj ? -1.0f : 1.0f;
      const typename Kernel::At at = kernel_.at(c, k0);
      cfloat* row = target + std::int64_t(c.v - origin_v) * stride + (c.u + k0 - origin_u);
      const int n = k1 - k0 + 1;
      for (int j = j0; j <= j1; ++j)
        add_row(reinterpret_cast<float*>(row + j * stride),
                reinterpret_cast<const float*>(kernel_.row(at, c, j, n, scratch.data())), n, vr, vi, sign * vr, sign * vi);
    }
  }

 private:
  const TileLayout& l_;
  const std::int64_t* offsets_;
  const std::int32_t* entries_;
  std::int64_t n_;
  const GridCoord* coords_;
  const cfloat* vis_;
  const float* weight_;
  Kernel kernel_;
};

void check_rows_layout(const KernelStack& ks) {
  const int o = ks.oversample, planes = ks.planes;
  const std::size_t offsets = std::size_t(o + 1) * (o + 1);
  bool ok = planes >= 1 && ks.support.size() == std::size_t(planes) && ks.rows_start.size() == std::size_t(planes) &&
            ks.footprint_sum.size() == std::size_t(planes) * offsets;
  if (ok) {
    const std::int64_t s = ks.support[planes - 1];
    ok = ks.rows_start[planes - 1] + (o + 1) * std::int64_t(ks.half_size(planes - 1)) * (2 * s + 1) <=
         std::int64_t(ks.rows.size());
  }
  if (!ok)
    throw InputError("kernel stack: rows layout or footprint sums missing or not matching " + std::to_string(planes) +
                     " planes (build them with build_kernel_layouts)");
}

void check_chebyshev_fit(const KernelStack& ks) {
  const std::size_t planes = std::size_t(ks.planes), o1 = std::size_t(ks.oversample) + 1;
  if (ks.cheb_terms < 1)
    throw InputError("grid.tiled variant chebyshev: the kernel stack has no Chebyshev fit (set kernels.wproj chebyshev, "
                     "the number of coefficients, e.g. 25)");
  if (ks.planes < 1 || ks.support.size() != planes || ks.cheb_coef.size() != planes * std::size_t(ks.cheb_terms) ||
      ks.cheb_radius.size() != planes || ks.cheb_footprint_sum.size() != planes * o1 * o1)
    throw InputError("kernel stack: its Chebyshev fit does not match its " + std::to_string(ks.planes) + " planes");
}

class TiledGridder : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    central_box_ = p.central_box;
    in_double_ = p.accumulate == "double";
    chebyshev_ = p.variant == "chebyshev";
    if (p.variant != "uvflow" && !chebyshev_)
      throw ParamError("variant", "'" + p.variant + "' is a cuda design; the cpu backend has uvflow and chebyshev");
  }

  void prepare(PrepareContext& pc) override {
    if (const auto& g = pc.output(grid).grid; g && !pc.dry_run)
      grid_ = std::make_shared<Grid>(Grid::zeros_on_host(*g, nullptr, pc.pinned(grid.name)));
  }

  void process(Context& ctx) override {
    auto b = ctx.in(buckets);
    auto ks = ctx.in(kernels);
    const VisBlock& block = b->vis;
    check_arrays(block);
    check_placed(block);
    if (chebyshev_) check_chebyshev_fit(*ks);
    else check_rows_layout(*ks);
    const std::string where = "block " + std::to_string(block.index);
    if (block.grid_size != ks->geom.grid_size)
      throw InputError(where + " was placed on a grid of " + std::to_string(block.grid_size) + " cells, the kernels make " +
                       std::to_string(ks->geom.grid_size));
    const TileLayout& l = b->layout;
    // Entries may be longer than the offsets' total (tiles.bucket_sort's cuda backend over-allocates).
    if (b->offsets.size() != std::size_t(l.count()) + 1 || b->offsets[l.count()] > std::int64_t(b->entries.size()))
      throw InputError(where + ": tile offsets do not match the tile layout and entries");
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ks->geom, nullptr));
    expect_geometry(*grid_, ks->geom, "grid.tiled");
    if (!grid_->obs) grid_->obs = block.obs;

    const Sums sums = block_sums(block, *ks, chebyshev_ ? ks->cheb_footprint_sum : ks->footprint_sum);
    if (chebyshev_) grid_tiles<ChebyshevRows>(*b, *ks);
    else grid_tiles<TableRows>(*b, *ks);
    grid_->totals[0] += sums.norm;
    grid_->totals[1] += sums.gridded;
    grid_->totals[2] += double(block.skipped) + sums.outside;
    ctx.add_work({.visibilities = sums.gridded, .updates = sums.updates});
  }

  void finish(Context& ctx) override {
    if (!grid_) grid_ = std::make_shared<Grid>(Grid::zeros_on_host(ctx.in(kernels)->geom, nullptr));
    if (!sum_.empty()) {  // rounded to float once, cell by cell, where the blocks reached
      const std::int64_t grid_size = grid_->geom.grid_size;
      cfloat* cells = grid_->cells.data();
      const cdouble* sum = sum_.data();
      tbb::parallel_for(std::int64_t(active_.v0), std::int64_t(active_.v1) + 1, [&](std::int64_t v) {
        for (std::int64_t i = v * grid_size + active_.u0; i <= v * grid_size + active_.u1; ++i) cells[i] = cfloat(sum[i]);
      });
      // mpi.reduce_grid sums the ranks' double cells; one process needs them no more.
      if (dist::size() > 1) grid_->cells64 = sum_;
      sum_ = {};
      active_ = kNoCells;
    }
    ctx.emit(grid, grid_);
  }

 private:
  struct Sums {
    double norm = 0, updates = 0, gridded = 0, outside = 0;
  };

  // The block's norm (weight times the footprint's sum of Re C, per visibility, from `fsum`: the
  // table's or the fit's) and its updates; checks every coord against the kernels, so that
  // gridding stays inside the grid and the stack.
  static Sums block_sums(const VisBlock& block, const KernelStack& ks, const Array<double>& fsum) {
    const int o = ks.oversample, half = o / 2, planes = ks.planes, grid_size = ks.geom.grid_size;
    const GridCoord* coords = block.coords.host_data();
    const float* weight = block.weight.host_data();
    const std::int32_t* support = ks.support.host_data();
    const double* footprint_sum = fsum.host_data();
    return tbb::parallel_deterministic_reduce(
        tbb::blocked_range<std::size_t>(0, block.size(), 16384), Sums{},
        [&](const tbb::blocked_range<std::size_t>& r, Sums sums) {
          for (std::size_t i = r.begin(); i < r.end(); ++i) {
            const GridCoord& c = coords[i];
            const int s = c.support;
            if (c.plane < 0) {  // marked outside the grid (a block placed on the device)
              sums.outside += 1;
              continue;
            }
            if (c.plane >= planes || s != support[c.plane] || std::abs(c.off_u) > half ||
                std::abs(c.off_v) > half || c.u - s < 0 || c.v - s < 0 || c.u + s >= grid_size || c.v + s >= grid_size)
              throw InputError("block " + std::to_string(block.index) + ", visibility " + std::to_string(i) +
                               ": its coords do not fit these kernels and grid (placed with another kernel stack?)");
            sums.norm += weight[i] * footprint_sum[footprint_index(c, o)];
            sums.updates += double(2 * s + 1) * (2 * s + 1);
            sums.gridded += 1;
          }
          return sums;
        },
        [](Sums a, const Sums& b) {
          a.norm += b.norm;
          a.updates += b.updates;
          a.gridded += b.gridded;
          a.outside += b.outside;
          return a;
        });
  }

  template <class Kernel>
  void grid_tiles(const TileBuckets& b, const KernelStack& ks) {
    const TileLayout& l = b.layout;
    const TileGridder<Kernel> tiles(b, ks);
    const std::int64_t* offsets = tiles.offsets();
    const std::int64_t grid_size = ks.geom.grid_size;
    cfloat* cells = grid_->cells.data();
    if (in_double_ && sum_.empty()) {
      // calloc takes fresh pages, which the system has zeroed: no pass over the whole grid (an
      // 18000^2 grid is 5.2 GB in double, of which gridding touches only the part the blocks reach).
      const std::size_t n = std::size_t(grid_size * grid_size);
      void* p = std::calloc(n, sizeof(cdouble));
      if (!p) throw OutOfMemory(n * sizeof(cdouble), "grid.tiled's double grid");
      sum_ = Array<cdouble>::external(static_cast<cdouble*>(p), n, Location::host, std::shared_ptr<void>(p, std::free));
    }
    if (in_double_)
      active_ = {std::min(active_.u0, std::max(0, l.origin_u)),
                 std::max(active_.u1, std::min(int(grid_size) - 1, l.origin_u + int(l.ntiles_u) * l.tile_u - 1)),
                 std::min(active_.v0, std::max(0, l.origin_v)),
                 std::max(active_.v1, std::min(int(grid_size) - 1, l.origin_v + int(l.ntiles_v) * l.tile_v - 1))};
    cdouble* sum = sum_.data();  // null in float

    // Central box: tile ranges clipped to the layout; empty when there is none.
    std::int64_t cu0 = 0, cu1 = -1, cv0 = 0, cv1 = -1;
    if (central_box_ >= 0) {
      cu0 = std::max<std::int64_t>(0, l.centre_u - central_box_);
      cu1 = std::min<std::int64_t>(l.ntiles_u - 1, l.centre_u + central_box_);
      cv0 = std::max<std::int64_t>(0, l.centre_v - central_box_);
      cv1 = std::min<std::int64_t>(l.ntiles_v - 1, l.centre_v + central_box_);
    }
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;  // tiles with entries: (updates, tile)
    for (std::int64_t t = 0; t < l.count(); ++t)
      if (offsets[t] != offsets[t + 1]) busy.push_back({0, t});
    tbb::parallel_for(std::size_t(0), busy.size(), [&](std::size_t q) { busy[q].first = tiles.updates(busy[q].second); });
    std::vector<std::int64_t> central;
    std::vector<std::pair<std::int64_t, std::int64_t>> queue;
    for (const auto& [updates, t] : busy) {
      const std::int64_t tu = t % l.ntiles_u, tv = t / l.ntiles_u;
      if (cu0 <= tu && tu <= cu1 && cv0 <= tv && tv <= cv1) central.push_back(t);
      else queue.push_back({updates, t});
    }
    // Largest tiles first, by updates rather than visibility counts (NAG memo 4.4: counts
    // balance badly where supports vary).
    std::sort(queue.begin(), queue.end(), [](auto& a, auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });

    // Outer tiles: one task owns a tile, so no two threads write one cell. Each worker takes the
    // next tile of the sorted queue, so the big tiles start first and the small ones fill in. It
    // grids the tile into the float grid; in double, the float grid is zero between blocks: the
    // worker then adds the cells it touched into the double sum and zeroes them again.
    auto outer = [&] {
      std::atomic<std::size_t> next{0};
      tbb::parallel_for(
          0, tbb::this_task_arena::max_concurrency(),
          [&](int) {
            for (std::size_t q; (q = next.fetch_add(1, std::memory_order_relaxed)) < queue.size();) {
              const std::int64_t t = queue[q].second;
              tiles.grid(t, offsets[t], offsets[t + 1], cells, 0, 0, grid_size);
              if (!in_double_) continue;
              const CellBox touched = tiles.touched(t, offsets[t], offsets[t + 1]);
              for (std::int64_t v = touched.v0; v <= touched.v1; ++v)
                add_into(sum + v * grid_size + touched.u0, cells + v * grid_size + touched.u0, touched.u1 - touched.u0 + 1);
            }
          },
          tbb::simple_partitioner{});
    };
    if (central.empty()) {
      outer();
      return;
    }

    // Central box (NAG memo Listing 11): its entries are split into kCentralParts fixed parts,
    // each added into its own copy of the box, and the copies are summed into the grid in part
    // order: the same sums in the same order whatever the threads do, so the grid is
    // bit-for-bit reproducible (per-thread copies were summed in whichever order threads ran).
    const CellBox box{std::max(0, l.origin_u + int(cu0) * l.tile_u),
                      std::min(int(grid_size) - 1, l.origin_u + int(cu1 + 1) * l.tile_u - 1),
                      std::max(0, l.origin_v + int(cv0) * l.tile_v),
                      std::min(int(grid_size) - 1, l.origin_v + int(cv1 + 1) * l.tile_v - 1)};
    const std::int64_t width = box.u1 - box.u0 + 1, height = box.v1 - box.v0 + 1;
    std::vector<std::int64_t> start(central.size() + 1, 0);  // central entries, numbered tile after tile
    for (std::size_t i = 0; i < central.size(); ++i) start[i + 1] = start[i] + offsets[central[i] + 1] - offsets[central[i]];
    const std::int64_t entries = start.back();
    for (auto& part : parts_)
      if (part.size() < std::size_t(width * height)) part.assign(std::size_t(width * height), cfloat(0));
    auto centre = [&] {
      tbb::parallel_for(0, kCentralParts, [&](int k) {
        const std::int64_t x0 = entries * k / kCentralParts, x1 = entries * (k + 1) / kCentralParts;
        std::size_t i = std::upper_bound(start.begin(), start.end(), x0) - start.begin() - 1;
        for (std::int64_t x = x0; x < x1; ++i) {
          const std::int64_t t = central[i], run_end = std::min(x1, start[i + 1]);
          tiles.grid(t, offsets[t] + x - start[i], offsets[t] + run_end - start[i], parts_[k].data(), box.u0, box.v0,
                     width);
          x = run_end;
        }
      });
    };
    tbb::parallel_invoke(outer, centre);
    // Add the copies into the grid (or the double sum) and clear them for the next block.
    tbb::parallel_for(std::int64_t(0), height, [&](std::int64_t y) {
      const std::int64_t at = (box.v0 + y) * grid_size + box.u0;
      for (auto& copy : parts_) {
        if (in_double_) add_into(sum + at, copy.data() + y * width, width);
        else add_into(cells + at, copy.data() + y * width, width);
      }
    });
  }

  // sum[x] += part[x] in T's precision, then part[x] = 0, for n cells.
  template <class T>
  static void add_into(std::complex<T>* __restrict sum, cfloat* __restrict part, std::int64_t n) {
    T* s = reinterpret_cast<T*>(sum);
    float* p = reinterpret_cast<float*>(part);
    for (std::int64_t x = 0; x < 2 * n; ++x) s[x] += T(p[x]);
    std::fill(p, p + 2 * n, 0.0f);
  }

  // Parts of the central box's entries: enough to keep 16 threads busy beside the outer tiles.
  static constexpr int kCentralParts = 16;

  std::int64_t central_box_ = 2;
  bool in_double_ = false;  // accumulate: double
  bool chebyshev_ = false;  // variant chebyshev: the kernels evaluated from their fit
  std::shared_ptr<Grid> grid_;
  // accumulate: double: the grid's sum over blocks, in double. Each block's tile (and central box)
  // is gridded in float, as grid.serial does, and added here once, so that the grid does not depend
  // on how the blocks were spread over MPI ranks (mpi.reduce_grid sums these) beyond one rounding
  // to float at the end. Allocated at the first block, released (or handed to the reduction) when
  // the grid is emitted.
  Array<cdouble> sum_;
  static constexpr CellBox kNoCells{INT_MAX, -1, INT_MAX, -1};
  CellBox active_ = kNoCells;  // the cells the blocks' tile layouts cover: all that sum_ can hold

  std::array<std::vector<cfloat>, kCentralParts> parts_;  // copies of the central box, zero between blocks
};

}  // namespace

// The estimate (choose: auto): the kernel stack's expected footprint per visibility, at the measured
// kernel-point updates/s: 1.03e9 per core on the VM (bench/results/cpu_gridders.md), on the H100
// 4.96e11 (uvflow), 2.24e11 (nvidia), 1.05e11 (nag) (bench/results/h100.md, el56-82).
Estimate estimate(const Params& p, const PortShapes& in, const EstimateContext& c) {
  const double n = estimated_visibilities(in, buckets.name);
  auto k = in.find(kernels.name);
  if (k == in.end() || !k->second.kernel) throw InputError("input 'kernels': the kernel stack's supports are not estimated");
  const double updates = n * k->second.kernel->mean_footprint;
  // Chebyshev evaluation costs about its terms in table reads on the VM (1.88e8, 8.06e7, 3.28e7
  // updates/s on 2 cores at 11, 25, 50 terms against the table's 1.59e9; bench/results/chebyshev.md)
  // and on the H100 about 2e12 / terms updates/s (1.38e11, 7.9e10, 4.6e10; h100_chebyshev.md).
  const bool chebyshev = p.variant == "chebyshev";
  const double terms = chebyshev ? std::max(1, k->second.kernel->chebyshev_terms) : 1;
  const double cuda = chebyshev ? 2e12 / terms : p.variant == "nvidia" ? 2.24e11 : p.variant == "nag" ? 1.05e11 : 4.96e11;
  char basis[96];
  std::snprintf(basis, sizeof basis, "%.3g kernel-point updates", updates);
  return {.seconds = seconds_at(c, updates, 1.03e9 / terms, cuda), .error = k->second.kernel->image_error, .basis = basis};
}

StageSpec spec() { return decl.spec({cpu_backend<TiledGridder>(), UVFLOW_CUDA_BACKEND(make_cuda)}, estimate); }

}  // namespace uvflow::grid_tiled
