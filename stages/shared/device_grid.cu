#include "stages/shared/device_grid.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/dist.hpp"

namespace uvflow {
namespace {

__global__ void round_kernel(const double2* sums, float2* cells, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x)
    cells[i] = make_float2(float(sums[i].x), float(sums[i].y));
}

}  // namespace

Grid device_grid(const GridGeometry& g, bool double_sums, const device::Stream& s) {
  Grid grid = Grid::zeros_on_device(g, s);
  if (double_sums) {
    grid.cells64 = Array<cdouble>::device(grid.cells.size(), s);
    device::memset_zero(grid.cells64.data(), grid.cells64.bytes(), s);
  }
  return grid;
}

void round_double_sums(Grid& g, const device::Stream& s, const char* stage) {
  if (g.cells64.empty()) return;
  const auto n = std::int64_t(g.cells.size());
  const auto blocks = unsigned(std::clamp<std::int64_t>((n + 255) / 256, 1, 4 * device::multiprocessors()));
  round_kernel<<<blocks, 256, 0, static_cast<cudaStream_t>(s.native())>>>(
      reinterpret_cast<const double2*>(g.cells64.data()), reinterpret_cast<float2*>(g.cells.data()), n);
  device::check_launch((std::string(stage) + ": rounding the double grid").c_str());
  if (dist::size() == 1) {
    keep_until(s.record(), {&g.cells64});
    g.cells64 = {};
  }
}

}  // namespace uvflow
