// io.simulate: visibilities of a point-source sky observed by SKA1-Low (v5 station layout), in
// blocks of whole dumps, with the uvw statistics known before the first block.
//
//   outputs  info: VisSetInfo, once (emitted before the first block, from start())
//            vis:  VisBlock, stream, host; one block of dumps_per_block dumps per item
//   params   preset (tiny | small | synthetic | el30-56 | el56-82 | el82-70), layout (path),
//            stations, dumps, dumps_per_block (0 = preset), freq_hz, channels, channel_width_hz,
//            date (YYYY-MM-DD, labels the dumps with UTC times), ra_deg, dec_deg,
//            el_start_deg, el_end_deg (unset = preset), seed, noise_jy,
//            sky (records l_deg, m_deg, flux_jy; empty = 16 x 16 grid), sky_spacing_deg
//   backend  cpu; serial source
//
// Visibility order: dump-major, then baselines (a1, a2), a1 < a2, in layout-file order of the
// chosen stations, then channels (freq_hz + c channel_width_hz, uvw in wavelengths at each).
// Blocks carry each visibility's antenna pair, time and channel (for io.write_ms).
// UVW = antenna2 - antenna1 and V = sum S exp(+2 pi i (u l + v m + w (n - 1))) (the Measurement
// Set convention of DESIGN.md).
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec io_simulate_spec();

}  // namespace uvflow
