#include "stages/uvw/bounding_box.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <climits>

#include "runtime/payloads/tiles.hpp"
#include "stages/uvw/w_sort.hpp"

namespace uvflow {
namespace {

struct Extent {
  int u_min = INT_MAX, u_max = INT_MIN, v_min = INT_MAX, v_max = INT_MIN;
  Extent merged(const Extent& o) const {
    return {std::min(u_min, o.u_min), std::max(u_max, o.u_max), std::min(v_min, o.v_min), std::max(v_max, o.v_max)};
  }
};

class BoundingBoxStage : public Stage {
 public:
  void process(Context& ctx) override {
    auto vis = ctx.in<VisBlock>("vis");
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
    ctx.emit("box", box);
  }
};

}  // namespace

StageSpec uvw_bounding_box_spec() {
  StageSpec s;
  s.type = "uvw.bounding_box";
  s.summary = "the inclusive range of grid cells a placed block's footprints touch";
  s.doc =
      "For a block placed by uvw.w_sort, the smallest box of grid cells holding every footprint of a visibility "
      "on the grid (cell +- support of its w-plane, inclusive; visibilities marked off the grid, plane -1, are "
      "left out): the active grid that tiles.count covers with tiles. A block with no visibility on the grid "
      "gives the empty box [1, 0, 1, 0]. "
      "cpu: a parallel reduction over the block. "
      "cuda: each thread block reduces 4096 visibilities and folds its extent into the device-resident box with "
      "atomicMin/atomicMax, from INT_MAX/INT_MIN sentinels that a last one-thread kernel turns into the empty "
      "box if nothing was found; the host never reads the box. "
      "Tested: cpu against a plain loop over the block, cuda against cpu.";
  s.inputs = {{"vis", kVisBlock, Arity::stream, Residency::backend, "a block placed by uvw.w_sort"}};
  s.outputs = {{"box", kBoundingBox, Arity::stream, Residency::backend, "inclusive cell range of all footprints"}};
  s.backends = {{"cpu", [] { return std::make_unique<BoundingBoxStage>(); }}};
  s.backends.push_back(UVFLOW_CUDA_BACKEND(make_bounding_box_cuda));
  s.concurrency = Concurrency::parallel;
  return s;
}

}  // namespace uvflow
