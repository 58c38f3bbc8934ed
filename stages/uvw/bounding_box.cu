// uvw.bounding_box, cuda backend: a block-wide reduction of the footprints' extents, folded into
// the device-resident box with one atomicMin/atomicMax per thread block and bound. The box starts
// at the sentinels INT_MAX/INT_MIN; a second one-thread kernel turns a box that stayed empty
// into the cpu backend's [1, 0, 1, 0].
#include <cuda_runtime.h>

#include <climits>
#include <cub/block/block_reduce.cuh>
#include <string>

#include "runtime/error.hpp"
#include "runtime/payloads/tiles.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/shared/vis_checks.hpp"

namespace uvflow::uvw_bounding_box {
namespace {

constexpr int kThreads = 256, kPerThread = 16;  // 4096 visibilities per thread block

struct Merge {  // (u_min, u_max, v_min, v_max)
  __device__ int4 operator()(const int4& a, const int4& b) const {
    return make_int4(min(a.x, b.x), max(a.y, b.y), min(a.z, b.z), max(a.w, b.w));
  }
};

__global__ void start_box(std::int32_t* range) {
  range[0] = INT_MAX, range[1] = INT_MIN, range[2] = INT_MAX, range[3] = INT_MIN;
}

__global__ void extend_box(const GridCoord* coords, int n, std::int32_t* range) {
  int4 e = make_int4(INT_MAX, INT_MIN, INT_MAX, INT_MIN);
  const std::int64_t first = std::int64_t(blockIdx.x) * kThreads * kPerThread + threadIdx.x;
  for (int k = 0; k < kPerThread; ++k) {
    const std::int64_t i = first + k * kThreads;
    if (i >= n) break;
    const GridCoord c = coords[i];
    if (c.plane < 0) continue;  // off the grid
    e = Merge{}(e, make_int4(c.u - c.support, c.u + c.support, c.v - c.support, c.v + c.support));
  }
  using Reduce = cub::BlockReduce<int4, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  e = Reduce(temp).Reduce(e, Merge{});
  if (threadIdx.x == 0 && e.x <= e.y) {
    atomicMin(range + 0, e.x);
    atomicMax(range + 1, e.y);
    atomicMin(range + 2, e.z);
    atomicMax(range + 3, e.w);
  }
}

__global__ void finish_box(std::int32_t* range) {
  if (range[0] > range[1]) range[0] = 1, range[1] = 0, range[2] = 1, range[3] = 0;
}

class BoundingBoxCuda final : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto vis = ctx.in(uvw_bounding_box::vis);
    check_placed(*vis);
    const std::string block = "block " + std::to_string(vis->index);
    if (vis->size() > std::size_t(INT_MAX)) throw InputError(block + ": more than 2^31 visibilities in one block");
    check_on_device(vis->coords, block + " coords");
    const device::Stream& stream = ctx.stream();
    const auto raw = static_cast<cudaStream_t>(stream.native());
    const int n = int(vis->size());
    auto box = std::make_shared<BoundingBox>();
    box->index = vis->index;
    box->range = Array<std::int32_t>::device(4, stream);
    start_box<<<1, 1, 0, raw>>>(box->range.data());
    device::check_launch("uvw.bounding_box: start_box launch");
    if (n > 0) {
      const int per_block = kThreads * kPerThread;
      extend_box<<<(n + per_block - 1) / per_block, kThreads, 0, raw>>>(vis->coords.data(), n, box->range.data());
      device::check_launch("uvw.bounding_box: extend_box launch");
    }
    finish_box<<<1, 1, 0, raw>>>(box->range.data());
    device::check_launch("uvw.bounding_box: finish_box launch");
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(uvw_bounding_box::box, box);
  }
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<BoundingBoxCuda>(); }

}  // namespace uvflow::uvw_bounding_box
