#include "stages/uvw/weight_density.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "runtime/error.hpp"
#include "stages/uvw/w_sort.hpp"

namespace uvflow {

namespace weighting {

int wsclean_padded_size(int image_size, double padding) {
  // The same double arithmetic as WSClean's Settings::RecalculateDerivedDimensions.
  const auto padded = static_cast<std::int64_t>(std::ceil(image_size * padding));
  return int(padded + (4 - padded % 4) % 4);
}

WeightGridGeometry weight_grid(const KernelStack& ks, double padding) {
  const int n = ks.geom.image_size;
  if (n < 2 || !(ks.geom.cell_rad > 0 && std::isfinite(ks.geom.cell_rad)))
    throw InputError("kernel stack geometry: image_size " + std::to_string(n) + ", cell " +
                     std::to_string(ks.geom.cell_rad) + " rad: no weighting grid can be made for it");
  return {wsclean_padded_size(n, padding), ks.geom.cell_rad};
}

std::shared_ptr<WeightDensity> zero_density(const WeightGridGeometry& g, bool pinned) {
  auto d = std::make_shared<WeightDensity>();
  d->geom = g;
  d->cells = Array<double>::host(std::size_t(g.cells()), pinned);
  double* c = d->cells.data();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, d->cells.size(), std::size_t(1) << 16),
                    [c](const tbb::blocked_range<std::size_t>& r) { std::fill(c + r.begin(), c + r.end(), 0.0); });
  d->totals = Array<double>::host(2, pinned);
  std::fill(d->totals.begin(), d->totals.end(), 0.0);
  return d;
}

void check_block(const VisBlock& vis, Location where) {
  check_arrays(vis);
  auto located = [&](const ArrayBase& a, const char* name) {
    // The planner moves inputs to the backend's side; anything else is a planning bug.
    if (!a.empty() && a.location() != where)
      throw std::logic_error("block " + std::to_string(vis.index) + ": " + name + " is in " + to_string(a.location()) +
                             " memory, the backend reads " + to_string(where) + " memory");
  };
  located(vis.uu, "uu");
  located(vis.vv, "vv");
  located(vis.weight, "weight");
}

void check_density(const WeightDensity& d, Location where) {
  if (d.geom.width < 2 || d.geom.width % 2 || !(d.geom.cell_rad > 0))
    throw InputError("weight density: grid width " + std::to_string(d.geom.width) + ", cell " +
                     std::to_string(d.geom.cell_rad) + " rad is not a weighting grid");
  if (std::int64_t(d.cells.size()) != d.geom.cells() || d.totals.size() != 2)
    throw InputError("weight density: " + std::to_string(d.cells.size()) + " cells and " +
                     std::to_string(d.totals.size()) + " totals for a grid of " + std::to_string(d.geom.cells()) +
                     " cells and 2 totals");
  if (d.cells.location() != where || d.totals.location() != where)
    throw std::logic_error(std::string("weight density is in ") + to_string(d.cells.location()) +
                           " memory, the backend reads " + to_string(where) + " memory");
}

void check_same_data(const VisBlock& vis, const WeightDensity& d) {
  if (!vis.obs || !d.obs) return;
  if (vis.obs->origin != d.obs->origin || vis.obs->total_visibilities != d.obs->total_visibilities)
    throw InputError("block " + std::to_string(vis.index) + " comes from " + vis.obs->origin + " (" +
                     std::to_string(vis.obs->total_visibilities) + " visibilities), the weight density from " +
                     d.obs->origin + " (" + std::to_string(d.obs->total_visibilities) +
                     "): uvw.weight_density and uvw.weighting must read the same visibilities");
}

}  // namespace weighting

namespace {

class WeightDensityCpu final : public Stage {
 public:
  void configure(const Params& p) override { padding_ = p.number("padding"); }
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned("density"); }

  void process(Context& ctx) override {
    auto vis = ctx.in<VisBlock>("vis");
    weighting::check_block(*vis, Location::host);
    if (!density_) {
      density_ = weighting::zero_density(weighting::weight_grid(*ctx.in<KernelStack>("kernels"), padding_), pinned_);
      density_->obs = vis->obs;
    }
    const WeightGridGeometry g = density_->geom;
    const float *uu = vis->uu.data(), *vv = vis->vv.data(), *wt = vis->weight.data();
    double* cells = density_->cells.data();
    const double sum = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, vis->size(), 4096), 0.0,
        [&](const tbb::blocked_range<std::size_t>& r, double sum) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) {
            const double u = uu[i], v = vv[i], w = wt[i];
            if (!(std::isfinite(u) && std::isfinite(v)))
              throw InputError("block " + std::to_string(vis->index) + ", visibility " + std::to_string(i) +
                               ": uv is not finite");
            if (!(w >= 0 && std::isfinite(w)))
              throw InputError("block " + std::to_string(vis->index) + ", visibility " + std::to_string(i) +
                               ": weight " + std::to_string(w) + " is negative or not finite");
            const std::int64_t k = weight_cell(g, u, v);
            if (k < 0) continue;
            std::atomic_ref<double>(cells[k]).fetch_add(w, std::memory_order_relaxed);
            sum += w;
          }
          return sum;
        },
        [](double a, double b) { return a + b; });
    density_->totals[0] += sum;
    ctx.add_work({.visibilities = double(vis->size())});
  }

  void finish(Context& ctx) override {
    if (!density_) density_ = weighting::zero_density(weighting::weight_grid(*ctx.in<KernelStack>("kernels"), padding_), pinned_);
    const double* c = density_->cells.data();
    density_->totals[1] = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, density_->cells.size(), std::size_t(1) << 14), 0.0,
        [c](const tbb::blocked_range<std::size_t>& r, double s) {
          for (std::size_t k = r.begin(); k != r.end(); ++k) s += c[k] * c[k];
          return s;
        },
        [](double a, double b) { return a + b; });
    ctx.emit("density", std::move(density_));
  }

 private:
  double padding_ = 1.2;
  bool pinned_ = false;
  std::shared_ptr<WeightDensity> density_;
};

}  // namespace

StageSpec uvw_weight_density_spec() {
  StageSpec s;
  s.type = "uvw.weight_density";
  s.summary = "the summed visibility weight per cell of WSClean's weighting grid, for uniform and Briggs weighting";
  s.doc =
      "Accumulates, over the whole visibility stream, W_k = the sum of the weights of the visibilities in cell k of "
      "the grid WSClean weights on, and emits it at the end of the stream with the sum of those weights and the sum "
      "over cells of W_k^2: everything uvw.weighting needs for uniform and Briggs weighting. The grid is WSClean's "
      "(3.x: structures/imageweights.{h,cpp}, main/settings.cpp): its side is the padded image size, "
      "ceil(image_size * padding) rounded up to a multiple of 4, its cell 1 / (side * cell) wavelengths (image_size "
      "and cell come with the kernel stack); it keeps v >= 0 only, a visibility with v < 0 counting once at "
      "(-u, -v); cell (x, y) = (floor(u side cell + side/2), floor(v side cell)). Visibilities outside it add "
      "nothing. Because every weight must be known before any can be applied, a pipeline reads its visibilities "
      "twice: once into this stage, once into uvw.weighting, whose blocks wait (bounded by run.max_in_flight) until "
      "the density has arrived; no visibility is buffered. "
      "cpu: oneTBB over visibilities, atomic double adds. cuda: one thread per visibility, atomic double adds, "
      "totals reduced on the device; one host synchronisation at the end of the stream, to report invalid input. "
      "Tested against an independent double-precision implementation of WSClean's definitions, cuda against cpu, "
      "and end to end against WSClean's images (tests/wsclean_test). A non-finite uv or weight or a negative weight "
      "stops the run (cpu: naming the visibility; cuda: with their count).";
  s.inputs = {
      {"vis", kVisBlock, Arity::stream, Residency::backend, "visibilities: uu, vv in wavelengths, weights >= 0"},
      {"kernels", kKernelStack, Arity::once, Residency::any,
       "the kernel stack of the imaging chain: its image_size and cell set the weighting grid (no kernel is read)"},
  };
  s.outputs = {{"density", kWeightDensity, Arity::once, Residency::backend,
                "W_k per cell of the weighting grid and [sum of weights, sum of W_k^2], at the end of the stream"}};
  s.params = {{"padding", ParamType::number, 1.2, false, "", 1.0, 4.0, {}, {},
               "WSClean's -padding: the weighting grid has ceil(image_size * padding) cells a side, rounded up to a "
               "multiple of 4 (keep WSClean's 1.2 to weight as it does)"}};
  s.backends = {{"cpu", [] { return std::make_unique<WeightDensityCpu>(); }}};
  s.backends.push_back(UVFLOW_CUDA_BACKEND(make_weight_density_cuda));
  s.concurrency = Concurrency::serial;
  return s;
}

}  // namespace uvflow
