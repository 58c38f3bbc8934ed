#include "stages/uvw/w_sort.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/error.hpp"
#include "stages/shared/locality_key.hpp"
#include "stages/shared/placement.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::uvw_w_sort {

namespace {

// Visibilities per chunk of the counting sort. The sort is stable, so its output does not
// depend on the chunking; the size only trades histogram work (chunks x planes) for parallelism.
constexpr std::size_t kChunk = 16384;

class WSort : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override {
    pinned_ = pc.pinned(vis_out.name);
    cell_order_ = params().within_plane == "cell";
  }

  void process(Context& ctx) override {
    auto in = ctx.in(vis_in);
    auto ks = ctx.in(kernels);
    const std::size_t n = in->size();
    check_arrays(*in);
    const Placement placement = Placement::of(*ks);
    const std::int32_t* support = ks->support.host_data();
    const int planes = ks->planes;
    const std::size_t keys = std::size_t(planes) + 1;  // the planes, then "outside the grid"
    const std::size_t chunks = (n + kChunk - 1) / kChunk;
    const float *uu = in->uu.host_data(), *vv = in->vv.host_data(), *ww = in->ww.host_data();

    // Pass 1: place every visibility and count keys per chunk.
    std::vector<GridCoord> placed(n);
    std::vector<std::int64_t> cursor(chunks * keys, 0);  // [chunk][key]
    tbb::parallel_for(std::size_t(0), chunks, [&](std::size_t c) {
      std::int64_t* count = cursor.data() + c * keys;
      for (std::size_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) {
        switch (place(placement, support, uu[i], vv[i], ww[i], placed[i])) {
          case Placed::inside: ++count[placed[i].plane]; break;
          case Placed::outside: placed[i] = off_grid(); ++count[planes]; break;
          case Placed::invalid:
            throw InputError("block " + std::to_string(in->index) + ", visibility " + std::to_string(i) +
                             ": uvw is not finite (" + std::to_string(uu[i]) + ", " + std::to_string(vv[i]) + ", " +
                             std::to_string(ww[i]) + ")");
        }
      }
    });
    // Exclusive scan key-major (the output is sorted by plane, the off-grid ones last), chunk-minor
    // (and stable); plane_start[k]: where key k's run begins.
    std::vector<std::int64_t> plane_start(keys + 1);
    std::int64_t start = 0;
    for (std::size_t k = 0; k < keys; ++k) {
      plane_start[k] = start;
      for (std::size_t c = 0; c < chunks; ++c) {
        const std::int64_t count = cursor[c * keys + k];
        cursor[c * keys + k] = start;
        start += count;
      }
    }
    plane_start[keys] = start;

    // Pass 2: scatter every array to its sorted position.
    auto out = sorted_shell(*in, *ks, cell_order_,
                            [&](auto t, std::size_t m) { return Array<decltype(t)>::host(m, pinned_); });
    const cfloat* vis = in->vis.host_data();
    const float* weight = in->weight.host_data();
    float *out_uu = out->uu.data(), *out_vv = out->vv.data(), *out_ww = out->ww.data(), *out_weight = out->weight.data();
    cfloat* out_vis = out->vis.data();
    GridCoord* out_coords = out->coords.data();
    tbb::parallel_for(std::size_t(0), chunks, [&](std::size_t c) {
      std::int64_t* next = cursor.data() + c * keys;
      for (std::size_t i = c * kChunk, end = std::min(n, i + kChunk); i < end; ++i) {
        const int p = placed[i].plane;
        const std::int64_t d = next[p < 0 ? planes : p]++;
        out_uu[d] = uu[i];
        out_vv[d] = vv[i];
        out_ww[d] = ww[i];
        out_vis[d] = vis[i];
        out_weight[d] = weight[i];
        out_coords[d] = placed[i];
      }
    });
    // within_plane cell: each plane's run reordered stably by Morton index (the off-grid run stays
    // as it is). Only here, so that the default order costs no more than the counting sort.
    if (cell_order_)
      tbb::parallel_for(0, planes, [&](int p) {
        const std::int64_t begin = plane_start[p], len = plane_start[p + 1] - begin;
        std::vector<std::pair<std::uint64_t, std::int64_t>> order(len);  // (Morton index, position): stable
        for (std::int64_t k = 0; k < len; ++k)
          order[k] = {locality::cell_morton(out_coords[begin + k].u, out_coords[begin + k].v), begin + k};
        std::sort(order.begin(), order.end());
        const auto permute = [&](auto* a) {
          std::vector<std::remove_reference_t<decltype(*a)>> run(len);
          for (std::int64_t k = 0; k < len; ++k) run[k] = a[order[k].second];
          std::copy(run.begin(), run.end(), a + begin);
        };
        permute(out_uu), permute(out_vv), permute(out_ww), permute(out_vis), permute(out_weight), permute(out_coords);
      });
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(vis_out, out);
  }

 private:
  bool pinned_ = false;
  bool cell_order_ = false;
};

}  // namespace

// Rates of the estimate (choose: auto): 9.4e6 visibilities/s per core on the VM
// (bench/results/cpu_gridders.md, and the small preset), 1.04e9/s on the H100 (h100.md, el56-82).
StageSpec spec() {
  return decl.spec({cpu_backend<WSort>(), UVFLOW_CUDA_BACKEND(make_cuda)},
                   [](const Params&, const PortShapes& in, const EstimateContext& c) {
                     return per_visibility_estimate(in, vis_in.name, c, 9.4e6, 1.04e9);
                   });
}

}  // namespace uvflow::uvw_w_sort
