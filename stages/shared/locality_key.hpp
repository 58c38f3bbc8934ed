// The key of the uvflow walkers' visiting order (stages/shared/locality_order.cuh), 64 bits, high to
// low: the plane field (planes - plane, so the widest kernels come first and the narrow ones fill
// the SMs' tail; 0 off the grid), the Morton index of the cell, and the entry's index, which the
// walkers read back from the sorted key. Plain C++ so that the host tests it (locality_key_test).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "runtime/host_device.hpp"

namespace uvflow::locality {

// The fields' widths. The cell's u and v are shifted right by `coarse` before they are interleaved:
// 0 unless the three fields would pass 64 bits (a huge grid with many planes and entries keeps a
// coarser locality instead of failing; the plane and index fields take at most 31 bits each, so the
// cells can always give way).
struct KeyLayout {
  int planes = 1, plane_bits = 1, index_bits = 1, coarse = 0;
  int plane_shift = 2;  // index_bits + 2 (cell bits - coarse)
  UVFLOW_HD int end_bit() const { return plane_shift + plane_bits; }
  UVFLOW_HD std::uint64_t index_mask() const { return (std::uint64_t(1) << index_bits) - 1; }
};

// For a block of n entries (1 .. 2^31 - 1) on a grid_size^2 grid with `planes` planes.
inline KeyLayout key_layout(std::int64_t grid_size, int planes, std::int64_t n) {
  const auto bits_below = [](std::int64_t count) {  // bits for the values 0 .. count - 1, at least 1
    return std::max(1, int(std::bit_width(std::uint64_t(std::max<std::int64_t>(count, 1) - 1))));
  };
  KeyLayout k;
  k.planes = planes;
  k.plane_bits = int(std::bit_width(unsigned(planes)));
  k.index_bits = bits_below(n);
  const int cell_bits = bits_below(grid_size);
  k.coarse = std::max(0, (k.plane_bits + 2 * cell_bits + k.index_bits - 64 + 1) / 2);
  k.plane_shift = k.index_bits + 2 * (cell_bits - k.coarse);
  return k;
}

// Morton interleave: bit b of x goes to bit 2b.
UVFLOW_HD inline std::uint64_t spread_bits(std::uint32_t x) {
  std::uint64_t v = x;
  v = (v | (v << 16)) & 0x0000FFFF0000FFFFull;
  v = (v | (v << 8)) & 0x00FF00FF00FF00FFull;
  v = (v | (v << 4)) & 0x0F0F0F0F0F0F0F0Full;
  v = (v | (v << 2)) & 0x3333333333333333ull;
  v = (v | (v << 1)) & 0x5555555555555555ull;
  return v;
}

// The Morton index of cell (u, v) with `coarse` low bits of each dropped. Full cells (coarse 0)
// sort in an order that refines every coarser one, so a block in that order (uvw.w_sort's
// within_plane: cell) is in the walkers' order whatever KeyLayout::coarse is.
UVFLOW_HD inline std::uint64_t cell_morton(int u, int v, int coarse = 0) {
  return spread_bits(std::uint32_t(u) >> coarse) | spread_bits(std::uint32_t(v) >> coarse) << 1;
}

// Entry i at cell (u, v) of `plane` (negative: off the grid).
UVFLOW_HD inline std::uint64_t locality_key(const KeyLayout& k, int plane, int u, int v, std::int64_t i) {
  return std::uint64_t(i) | (plane < 0 ? 0
                                       : std::uint64_t(k.planes - plane) << k.plane_shift |
                                             cell_morton(u, v, k.coarse) << k.index_bits);
}

// The plane of a key (-1 off the grid) and its entry's index.
UVFLOW_HD inline int key_plane(const KeyLayout& k, std::uint64_t key) {
  const int field = int(key >> k.plane_shift);
  return field == 0 ? -1 : k.planes - field;
}
UVFLOW_HD inline std::int32_t key_index(std::uint64_t key, std::uint64_t index_mask) {
  return std::int32_t(key & index_mask);
}

}  // namespace uvflow::locality
