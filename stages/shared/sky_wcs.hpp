// The SIN sky coordinates of an image made from an observation (the dirty-image makers share them).
#pragma once

#include <algorithm>

#include "runtime/payloads/image.hpp"

namespace uvflow {

inline SkyWcs sky_wcs(const Observation& obs, double cell_rad) {
  SkyWcs w;
  w.ra_rad = obs.ra_rad;
  w.dec_rad = obs.dec_rad;
  w.cell_rad = cell_rad;
  w.freq_hz = obs.ref_freq_hz;
  // WSClean's CDELT3: the band the channels cover, edge to edge.
  if (!obs.freq_hz.empty() && obs.channel_width_hz > 0) {
    const auto [lo, hi] = std::minmax_element(obs.freq_hz.begin(), obs.freq_hz.end());
    w.bandwidth_hz = *hi - *lo + obs.channel_width_hz;
  }
  w.telescope = obs.telescope;
  w.date_obs = obs.date_obs;
  return w;
}

}  // namespace uvflow
