// uvw.w_sort, cuda backend: one thread per visibility places it and writes its sort key (its
// plane, or one past the last plane when it is off the grid; with within_plane cell, the cell's
// Morton index below it), CUB sorts (key, index) pairs stably, and one thread per output slot
// gathers every array through the sorted indices. The block keeps its size, so nothing the host
// needs depends on device data.
#include <cuda_runtime.h>

#include <bit>
#include <climits>
#include <cub/device/device_radix_sort.cuh>
#include <string>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/shared/locality_key.hpp"
#include "stages/shared/placement.hpp"
#include "stages/shared/vis_checks.hpp"
#include "stages/uvw/w_sort.hpp"

namespace uvflow::uvw_w_sort {
namespace {

constexpr int kThreads = 256;
using Key = std::uint16_t;  // the plane alone: planes <= 32767 (Placement::of), plus the off-grid key

// The sort key of a placed visibility: its plane (one past the last when it is off the grid), above
// `cell_shift` bits that hold its cell's Morton index with within_plane cell (cell_shift 0: none;
// K is then Key, else 64 bits).
template <class K>
__device__ inline K sort_key(const GridCoord& c, Placed where, int planes, int cell_shift) {
  if (where != Placed::inside) return K(K(planes) << cell_shift);
  return K(K(c.plane) << cell_shift | (cell_shift ? K(locality::cell_morton(c.u, c.v)) : K(0)));
}

// A kernel cannot throw: non-finite uvw is keyed as off the grid and counted in bad[0], and bad[1]
// keeps the complement of the smallest (block << 32 | visibility) among them (atomicMax of the
// complement: zeroed memory needs no other initial value), for the error raised at the end.
template <class K>
__global__ void plane_keys(const Placement p, const std::int32_t* support, const float* uu, const float* vv,
                           const float* ww, int n, int cell_shift, K* keys, std::int32_t* order,
                           unsigned long long block, unsigned long long* bad) {
  const std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  GridCoord c;
  const Placed where = place(p, support, uu[i], vv[i], ww[i], c);
  keys[i] = sort_key<K>(c, where, p.planes, cell_shift);
  order[i] = std::int32_t(i);
  if (where == Placed::invalid) {
    atomicAdd(bad, 1ull);
    atomicMax(bad + 1, ~(block << 32 | (unsigned long long)(i)));
  }
}

struct Columns {
  const float *uu, *vv, *ww, *weight;
  const float2* vis;
};
struct OutColumns {
  float *uu, *vv, *ww, *weight;
  float2* vis;
  GridCoord* coords;
};

// Places the visibility again rather than keeping 16 bytes of coords per visibility between the
// kernels: the gather reads its uvw anyway, and place() is a pure function of them, so both
// kernels (and the cpu backend) agree bit for bit.
__global__ void gather(const Placement p, const std::int32_t* support, const std::int32_t* order, int n,
                       const Columns in, const OutColumns out) {
  const std::int64_t d = std::int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (d >= n) return;
  const int i = order[d];
  const float uu = in.uu[i], vv = in.vv[i], ww = in.ww[i];
  out.uu[d] = uu;
  out.vv[d] = vv;
  out.ww[d] = ww;
  out.vis[d] = in.vis[i];
  out.weight[d] = in.weight[i];
  GridCoord c;
  if (place(p, support, uu, vv, ww, c) != Placed::inside) c = off_grid();
  out.coords[d] = c;
}

void cuda_check(cudaError_t e, const char* what) { device::check(e, "uvw.w_sort (cuda)", what); }

class WSortCuda final : public DeclaredStage<decl> {
 public:
  // Here, not at the first block: blocks are sorted concurrently.
  void prepare(PrepareContext& pc) override {
    cell_order_ = params().within_plane == "cell";
    if (pc.dry_run) return;
    bad_ = Array<unsigned long long>::device(2, pc.stream);
    device::memset_zero(bad_.data(), bad_.bytes(), pc.stream);
  }

  void process(Context& ctx) override {
    auto in = ctx.in(vis_in);
    auto ks = ctx.in(kernels);
    check_arrays(*in);
    const Placement placement = Placement::of(*ks);
    const std::string block = "block " + std::to_string(in->index);
    if (in->size() > std::size_t(INT_MAX)) throw InputError(block + ": more than 2^31 visibilities in one block");
    check_on_device(in->uu, block + " uu");
    check_on_device(in->vv, block + " vv");
    check_on_device(in->ww, block + " ww");
    check_on_device(in->vis, block + " vis");
    check_on_device(in->weight, block + " weight");
    check_on_device(ks->support, "kernel support");

    const device::Stream& stream = ctx.stream();
    const auto raw = static_cast<cudaStream_t>(stream.native());
    const int n = int(in->size());
    auto out = sorted_shell(*in, *ks, cell_order_,
                            [&](auto t, std::size_t m) { return Array<decltype(t)>::device(m, stream); });
    if (n > 0) {
      auto order_a = Array<std::int32_t>::device(n, stream), order_b = Array<std::int32_t>::device(n, stream);
      cub::DoubleBuffer<std::int32_t> order(order_a.data(), order_b.data());
      if (cell_order_)
        sort<std::uint64_t>(placement, *ks, *in, order, stream);
      else
        sort<Key>(placement, *ks, *in, order, stream);
      const Columns cols{in->uu.data(), in->vv.data(), in->ww.data(), in->weight.data(),
                         reinterpret_cast<const float2*>(in->vis.data())};
      const OutColumns out_cols{out->uu.data(), out->vv.data(), out->ww.data(), out->weight.data(),
                                reinterpret_cast<float2*>(out->vis.data()), out->coords.data()};
      gather<<<(n + kThreads - 1) / kThreads, kThreads, 0, raw>>>(placement, ks->support.data(), order.Current(), n,
                                                                  cols, out_cols);
      device::check_launch("uvw.w_sort: gather launch");
      keep_until(stream.record(), {&order_a, &order_b});  // released only after the gather has read them
    }
    ctx.add_work({.visibilities = double(n)});
    ctx.emit(vis_out, out);
  }

  // The one read-back of the stage: non-finite uvw must stop the run, as on the cpu.
  void finish(Context& ctx) override {
    unsigned long long bad[2] = {0, 0};
    device::copy(bad, bad_.data(), sizeof bad, device::Copy::device_to_host, ctx.stream());
    ctx.stream().synchronize();
    if (bad[0] == 0) return;
    const unsigned long long first = ~bad[1];
    throw InputError("block " + std::to_string(first >> 32) + ", visibility " + std::to_string(first & 0xffffffffull) +
                     ": uvw is not finite (" + std::to_string(bad[0]) + " such visibilities in the stream)");
  }

 private:
  // `order` (the identity after plane_keys) sorted stably by each visibility's key: K = Key, the plane;
  // 64 bits with within_plane cell.
  template <class K>
  void sort(const Placement& placement, const KernelStack& ks, const VisBlock& in,
            cub::DoubleBuffer<std::int32_t>& order, const device::Stream& stream) {
    const auto raw = static_cast<cudaStream_t>(stream.native());
    const int n = int(in.size());
    // Sort only the bits that can be set: the plane's (0 .. planes, off the grid) above the cell's.
    const int cell_shift = cell_order_ ? 2 * std::bit_width(unsigned(ks.geom.grid_size - 1)) : 0;
    const int end_bit = std::bit_width(unsigned(placement.planes)) + cell_shift;
    if (end_bit > int(8 * sizeof(K)))
      throw InputError("uvw.w_sort: within_plane cell on a grid of " + std::to_string(ks.geom.grid_size) +
                       " cells and " + std::to_string(placement.planes) + " planes needs " + std::to_string(end_bit) +
                       " bits of sort key, more than 64");
    auto keys_a = Array<K>::device(n, stream), keys_b = Array<K>::device(n, stream);
    plane_keys<K><<<(n + kThreads - 1) / kThreads, kThreads, 0, raw>>>(
        placement, ks.support.data(), in.uu.data(), in.vv.data(), in.ww.data(), n, cell_shift, keys_a.data(),
        order.Current(), (unsigned long long)(in.index), bad_.data());
    device::check_launch("uvw.w_sort: plane_keys launch");
    bad_.storage()->set_last_writer(stream.record());  // freed only after this kernel
    // The double-buffer form needs no second copy inside CUB's temporary storage.
    cub::DoubleBuffer<K> keys(keys_a.data(), keys_b.data());
    std::size_t bytes = 0;
    cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, order, n, 0, end_bit, raw), "radix sort size");
    auto temp = Array<std::uint8_t>::device(bytes, stream);
    cuda_check(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, keys, order, n, 0, end_bit, raw), "radix sort");
    keep_until(stream.record(), {&keys_a, &keys_b, &temp});
  }

  bool cell_order_ = false;
  Array<unsigned long long> bad_;  // [count, ~first (block << 32 | visibility)] of non-finite uvw
};

}  // namespace

std::unique_ptr<Stage> make_cuda() { return std::make_unique<WSortCuda>(); }

}  // namespace uvflow::uvw_w_sort
