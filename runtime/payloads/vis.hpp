// Visibilities: the observation they come from, and blocks of them streamed through a pipeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/host_device.hpp"
#include "runtime/payload.hpp"

namespace uvflow {

// What is known about a visibility set before its blocks stream: enough to size w-planes and
// write a FITS header. uvw statistics are in wavelengths over every visibility to be gridded.
struct Observation {
  std::string telescope;
  std::string origin;              // where the data came from (simulator preset, MS path)
  double ra_rad = 0, dec_rad = 0;  // phase centre, J2000
  std::vector<double> freq_hz;     // frequencies gridded together (multi-frequency synthesis)
  double ref_freq_hz = 0;          // written to the FITS header
  std::string date_obs;            // ISO 8601, may be empty
  std::int64_t total_visibilities = -1;  // -1: unknown in advance
  std::int64_t total_blocks = -1;
  double max_abs_w = 0, min_abs_w = 0, rms_abs_w = 0, max_abs_uv = 0;
  std::vector<double> abs_w_quantiles;  // |w| at quantiles (i + 1/2) / 64 (AbsWHistogram); empty: unknown
  // The instrument, for writers that record it (io.write_ms); empty or 0 where unknown.
  struct Antenna {
    std::string name;
    double x = 0, y = 0, z = 0;  // ITRF (geocentric) position, metres
    double dish_diameter_m = 0;
  };
  std::vector<Antenna> antennas;  // indexed by VisBlock::antenna1 and antenna2
  double integration_s = 0;       // length of one time sample (MS INTERVAL)
  double channel_width_hz = 0;
};

inline constexpr char kVisSetInfo[] = "VisSetInfo";
struct VisSetInfo : PayloadOf<VisSetInfo, kVisSetInfo> {
  std::shared_ptr<const Observation> obs;
  template <class F> void each_array(F&&) {}
};

// Where one visibility lands on the grid, computed once by uvw.w_sort (001 memo section 4.2):
// its cell, its w-plane, its sub-cell offsets in [-o/2, o/2], whether the kernel is
// conjugated (w > 0), and the plane's support (so bounding box and tiling need no kernel stack).
// 16 bytes so a device thread reads it in one load.
struct GridCoord {
  std::int32_t u, v;
  std::int16_t plane;
  std::int8_t off_u, off_v;
  std::uint8_t conj;
  std::uint8_t pad_;
  std::int16_t support;
};
static_assert(sizeof(GridCoord) == 16);

// The coords of a visibility whose footprint would leave the grid (both backends of uvw.w_sort).
UVFLOW_HD constexpr GridCoord off_grid() { return GridCoord{0, 0, -1, 0, 0, 0, 0, 0}; }

inline constexpr char kVisBlock[] = "VisBlock";
struct VisBlock : PayloadOf<VisBlock, kVisBlock> {
  std::shared_ptr<const Observation> obs;
  std::int64_t index = 0;          // position in the stream
  Array<float> uu, vv, ww;         // wavelengths, UVW = antenna2 - antenna1
  Array<cfloat> vis;               // V = S exp(+2 pi i (u l + v m + w (n - 1)))
  Array<float> weight;
  // Optional, per visibility, on the host (transfers leave them there; empty where unknown): the
  // Measurement Set row a visibility belongs to (antenna pair; TIME, the mid-point of the sample
  // in MJD seconds, UTC) and its channel, an index into obs->freq_hz. io.simulate and io.read_ms
  // set them, io.write_ms needs them; a stage that reorders or drops visibilities leaves them
  // empty (uvw.w_sort does), one that only changes values keeps them.
  Array<std::int32_t> antenna1, antenna2, channel;
  Array<double> time;
  // Set by uvw.w_sort: the block sorted by w-plane, the size of the grid the coords index (its
  // centre fixes the tile alignment) and the kernel stack's largest support (it bounds how many
  // tiles a footprint meets). Visibilities that would leave the grid stay, at the end of the block
  // in input order, with coords off_grid() (plane -1), on every backend: a device sort cannot
  // shrink a block without a round trip to the host. Every consumer skips plane < 0, and gridders
  // count those as skipped. `skipped` counts visibilities dropped before the block was placed.
  Array<GridCoord> coords;
  std::int64_t skipped = 0;
  int grid_size = 0;
  int max_support = 0;
  // Set by uvw.w_sort with within_plane: cell: inside each plane's run, the visibilities are in the
  // Morton order of their cells (locality::cell_morton), input order among equal cells, so the
  // uvflow walkers visit the block without sorting it again. Copies that keep the order keep it.
  bool cell_order = false;

  std::size_t size() const { return vis.size(); }
  bool placed() const { return grid_size > 0 && coords.size() == vis.size(); }
  template <class F> void each_array(F&& f) { f(uu); f(vv); f(ww); f(vis); f(weight); f(coords); }
  template <class F> void each_host_array(F&& f) { f(antenna1); f(antenna2); f(channel); f(time); }
};

}  // namespace uvflow
