#include "stages/grid/atomic.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "runtime/dist.hpp"
#include "runtime/error.hpp"
#include "stages/shared/placement.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::grid_atomic {

void check_inputs(const VisBlock& block, const KernelStack& ks, Location where) {
  check_arrays(block);
  const std::string at = "block " + std::to_string(block.index) + ": kernel stack ";
  const int o = ks.oversample, planes = ks.planes;
  const GridGeometry& geom = ks.geom;
  // GridCoord holds offsets in 8 bits and the plane in 16.
  if (planes < 1 || planes > INT16_MAX) throw InputError(at + "has " + std::to_string(planes) + " w-planes");
  if (o < 2 || o % 2 || o > 254) throw InputError(at + "oversample " + std::to_string(o) + " is not even in [2, 254]");
  if (geom.grid_size < 2 || geom.grid_size % 2)
    throw InputError(at + "grid size " + std::to_string(geom.grid_size) + " is not even and positive");
  if (!(geom.cell_rad > 0 && std::isfinite(geom.cell_rad)))
    throw InputError(at + "cell size " + std::to_string(geom.cell_rad) + " rad is not positive");
  if (!(ks.w_scale >= 0 && std::isfinite(ks.w_scale)))
    throw InputError(at + "w_scale " + std::to_string(ks.w_scale) + " is not finite and >= 0");
  auto sized = [&](const ArrayBase& a, std::size_t want, const char* name) {
    if (a.size() != want)
      throw InputError(at + name + " holds " + std::to_string(a.size()) + " values, " + std::to_string(planes) +
                       " planes need " + std::to_string(want));
  };
  sized(ks.support, std::size_t(planes), "support");
  sized(ks.quarter_start, std::size_t(planes), "quarter_start");
  sized(ks.footprint_sum, std::size_t(planes) * (o + 1) * (o + 1), "footprint_sum");
  if (ks.quarter.empty()) throw InputError(at + "has no quarter kernels");

  // The planner moves inputs to the backend's side; anything else is a planning bug.
  auto located = [&](const ArrayBase& a, const char* name) {
    if (!a.empty() && a.location() != where)
      throw std::logic_error("block " + std::to_string(block.index) + ": " + name + " is in " +
                             to_string(a.location()) + " memory, the backend reads " + to_string(where) + " memory");
  };
  located(block.uu, "uu");
  located(block.vv, "vv");
  located(block.ww, "ww");
  located(block.vis, "vis");
  located(block.weight, "weight");
  located(ks.support, "kernel support");
  located(ks.quarter_start, "kernel quarter_start");
  located(ks.quarter, "kernel quarter");
  located(ks.footprint_sum, "kernel footprint_sum");
}

namespace {

struct Tally {
  double norm = 0, gridded = 0, skipped = 0, updates = 0;
  Tally operator+(const Tally& b) const {
    return {norm + b.norm, gridded + b.gridded, skipped + b.skipped, updates + b.updates};
  }
};

// Listing 9 with oneTBB in place of OpenMP: visibilities in parallel, every grid update an
// atomic add, the kernel read straight from the compacted quarter. Faithful, not fast: the
// atomics keep the inner loop scalar.
class AtomicCpu final : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override {
    if (p.variant != "listing")
      throw ParamError("variant", "'" + p.variant + "' is a cuda design; the cpu backend has listing (Listing 9)");
  }

  void prepare(PrepareContext& pc) override {
    double_sums_ = params().accumulate == "double";
    pinned_ = pc.pinned(grid.name);
    if (const auto& g = pc.output(grid).grid; g && !pc.dry_run) grid_ = new_grid(*g);
  }

  void process(Context& ctx) override {
    auto block = ctx.in(vis);
    auto ks = ctx.in(kernels);
    check_inputs(*block, *ks, Location::host);
    const Placement placement = Placement::of(*ks);
    const std::int32_t* support = ks->support.data();
    const int last = ks->planes - 1;
    const std::int64_t last_size = ks->half_size(last);
    if (std::int64_t(ks->quarter.size()) < ks->quarter_start[last] + last_size * last_size)
      throw InputError("block " + std::to_string(block->index) + ": kernel stack quarter holds " +
                       std::to_string(ks->quarter.size()) + " values, fewer than its supports need");
    if (!grid_) grid_ = new_grid(ks->geom);
    expect_geometry(*grid_, ks->geom, "grid.atomic");
    if (!grid_->obs) grid_->obs = block->obs;

    const float *uu = block->uu.data(), *vv = block->vv.data(), *ww = block->ww.data(), *wt = block->weight.data();
    const cfloat* val = block->vis.data();
    const std::int64_t* qstart = ks->quarter_start.data();
    const cfloat* quarter = ks->quarter.data();
    const double* fsum = ks->footprint_sum.data();
    if (double_sums_ && sums_.empty()) {
      // calloc takes pages the system has zeroed: no pass over gigabytes of double grid.
      const std::size_t n = grid_->cells.size();
      void* p = std::calloc(n, sizeof(cdouble));
      if (!p) throw OutOfMemory(n * sizeof(cdouble), "grid.atomic's double grid");
      sums_ = Array<cdouble>::external(static_cast<cdouble*>(p), n, Location::host, std::shared_ptr<void>(p, std::free));
    }
    const std::int64_t n_grid = ks->geom.grid_size;
    const int o = ks->oversample;
    // double_box (float sums): the central box_n^2 cells from (box_lo, box_lo) summed in double.
    const int box_n = double_sums_ ? 0 : int(std::min<std::int64_t>(params().double_box, n_grid));
    const int box_lo = int(n_grid / 2) - box_n / 2;
    if (box_n > 0 && box_.empty()) {
      box_n_ = box_n;
      box_ = Array<cdouble>::host(std::size_t(box_n) * box_n);
      std::fill(box_.begin(), box_.end(), cdouble(0));
    }
    double* box = reinterpret_cast<double*>(box_.data());

    // `cells` is [v][u][re, im], float or (accumulate: double) double; the products are float either way.
    auto grid_block = [&](auto* cells) {
      using Sum = std::remove_pointer_t<decltype(cells)>;
      return tbb::parallel_reduce(
          tbb::blocked_range<std::size_t>(0, block->size(), 64), Tally{},
          [&](const tbb::blocked_range<std::size_t>& r, Tally t) {
            for (std::size_t i = r.begin(); i != r.end(); ++i) {
              GridCoord c;
              const Placed where = place(placement, support, uu[i], vv[i], ww[i], c);
              if (where == Placed::invalid)
                throw InputError("block " + std::to_string(block->index) + ", visibility " + std::to_string(i) +
                                 ": uvw is not finite");
              if (where == Placed::outside) {
                t.skipped += 1;
                continue;
              }
              const int s = c.support, S = ks->half_size(c.plane);
              const float vr = val[i].real() * wt[i], vi = val[i].imag() * wt[i];
              const float conj = c.conj ? -1.0f : 1.0f;
              const cfloat* kern = quarter + qstart[c.plane];
              for (int j = -s; j <= s; ++j) {
                const cfloat* krow = kern + std::int64_t(std::abs(c.off_v + j * o)) * S;
                Sum* row = cells + 2 * ((c.v + j) * n_grid + c.u);
                const unsigned bv = unsigned(c.v + j - box_lo);
                for (int k = -s; k <= s; ++k) {
                  const cfloat w = krow[std::abs(c.off_u + k * o)];
                  const float cr = w.real(), ci = conj * w.imag();
                  const float re = vr * cr - vi * ci, im = vi * cr + vr * ci;
                  const unsigned bu = unsigned(c.u + k - box_lo);
                  if (bu < unsigned(box_n) && bv < unsigned(box_n)) {
                    double* b = box + 2 * (std::size_t(bv) * box_n + bu);
                    std::atomic_ref<double>(b[0]).fetch_add(re, std::memory_order_relaxed);
                    std::atomic_ref<double>(b[1]).fetch_add(im, std::memory_order_relaxed);
                  } else {
                    std::atomic_ref<Sum>(row[2 * k]).fetch_add(Sum(re), std::memory_order_relaxed);
                    std::atomic_ref<Sum>(row[2 * k + 1]).fetch_add(Sum(im), std::memory_order_relaxed);
                  }
                }
              }
              t.norm += double(wt[i]) * fsum[footprint_index(c, o)];
              t.gridded += 1;
              t.updates += double(2 * s + 1) * (2 * s + 1);
            }
            return t;
          },
          [](const Tally& a, const Tally& b) { return a + b; });
    };
    const Tally t = sums_.empty() ? grid_block(reinterpret_cast<float*>(grid_->cells.data()))
                                  : grid_block(reinterpret_cast<double*>(sums_.data()));

    grid_->totals[0] += t.norm;
    grid_->totals[1] += t.gridded;
    grid_->totals[2] += t.skipped;
    ctx.add_work({.visibilities = double(block->size()), .updates = t.updates});
  }

  void finish(Context& ctx) override {
    if (!grid_) grid_ = new_grid(ctx.in(kernels)->geom);
    if (!box_.empty()) {  // the box's double sums added into the float grid, rounded once
      const std::int64_t N = grid_->geom.grid_size, n = box_n_;
      cfloat* cells = grid_->cells.data();
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t i = 0; i < n; ++i) {
          cfloat& c = cells[(N / 2 - n / 2 + j) * N + N / 2 - n / 2 + i];
          c = cfloat(cdouble(c) + box_[std::size_t(j * n + i)]);
        }
      box_ = {};
    }
    if (!sums_.empty()) {  // rounded to float once
      cfloat* cells = grid_->cells.data();
      const cdouble* sums = sums_.data();
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, sums_.size(), std::size_t(1) << 16),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          for (std::size_t i = r.begin(); i != r.end(); ++i) cells[i] = cfloat(sums[i]);
                        });
      // mpi.reduce_grid sums the ranks' double cells; one process needs them no more.
      if (dist::size() > 1) grid_->cells64 = sums_;
      sums_ = {};
    }
    ctx.emit(grid, std::move(grid_));
  }

 private:
  std::shared_ptr<Grid> new_grid(const GridGeometry& geom) const {
    auto g = std::make_shared<Grid>();
    g->geom = geom;
    g->cells = Array<cfloat>::host(std::size_t(geom.grid_size) * geom.grid_size, pinned_);
    // Zeroed in parallel: large grids are gigabytes, and first touch spreads the pages.
    cfloat* c = g->cells.data();
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, g->cells.size(), std::size_t(1) << 16),
                      [c](const tbb::blocked_range<std::size_t>& r) {
                        std::fill(c + r.begin(), c + r.end(), cfloat(0));
                      });
    g->totals = Array<double>::host(3);
    std::fill(g->totals.begin(), g->totals.end(), 0.0);
    return g;
  }

  bool pinned_ = false, double_sums_ = false;
  std::shared_ptr<Grid> grid_;
  Array<cdouble> sums_;  // accumulate: double: the grid's sums, made at the first block
  Array<cdouble> box_;   // float sums: the central double_box^2 cells' double sums, made at the first block
  int box_n_ = 0;
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<AtomicCpu>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::grid_atomic
