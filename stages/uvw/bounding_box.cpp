#include "stages/uvw/bounding_box.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <climits>

#include "runtime/payloads/tiles.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::uvw_bounding_box {
namespace {

struct Extent {
  int u_min = INT_MAX, u_max = INT_MIN, v_min = INT_MAX, v_max = INT_MIN;
  Extent merged(const Extent& o) const {
    return {std::min(u_min, o.u_min), std::max(u_max, o.u_max), std::min(v_min, o.v_min), std::max(v_max, o.v_max)};
  }
};

class BoundingBoxStage : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto vis = ctx.in(uvw_bounding_box::vis);
    check_placed(*vis);
    const GridCoord* c = vis->coords.host_data();
    const Extent e = tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, vis->size(), 16384), Extent{},
        [&](const tbb::blocked_range<std::size_t>& r, Extent e) {
          for (std::size_t i = r.begin(); i < r.end(); ++i) {
            if (c[i].plane < 0) continue;  // outside the grid (a block placed on the device)
            e.u_min = std::min(e.u_min, c[i].u - c[i].support);
            e.u_max = std::max(e.u_max, c[i].u + c[i].support);
            e.v_min = std::min(e.v_min, c[i].v - c[i].support);
            e.v_max = std::max(e.v_max, c[i].v + c[i].support);
          }
          return e;
        },
        [](const Extent& a, const Extent& b) { return a.merged(b); });
    auto box = std::make_shared<BoundingBox>();
    box->index = vis->index;
    box->range = Array<std::int32_t>::host(4);
    const bool none = e.u_min > e.u_max;  // no visibility inside the grid
    const std::int32_t r[4] = {none ? 1 : e.u_min, none ? 0 : e.u_max, none ? 1 : e.v_min, none ? 0 : e.v_max};
    std::copy(r, r + 4, box->range.begin());
    ctx.add_work({.visibilities = double(vis->size())});
    ctx.emit(uvw_bounding_box::box, box);
  }
};

}  // namespace

// Rates of the estimate (choose: auto): 2.4e8 visibilities/s per core on the VM, 8.1e9/s on the
// H100 (bench/results/cpu_gridders.md, h100.md, el56-82).
StageSpec spec() {
  return decl.spec({cpu_backend<BoundingBoxStage>(), UVFLOW_CUDA_BACKEND(make_cuda)},
                   [](const Params&, const PortShapes& in, const EstimateContext& c) {
                     return per_visibility_estimate(in, vis.name, c, 2.4e8, 8.1e9);
                   });
}

}  // namespace uvflow::uvw_bounding_box
