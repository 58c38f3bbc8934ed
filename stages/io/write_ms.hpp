// io.write_ms: write visibilities to a new Measurement Set (casacore) that WSClean and CASA read.
//
//   in   info  VisSetInfo, once, host: phase centre, frequencies, telescope, antennas
//        vis   VisBlock, stream, host: Stokes I visibilities with antenna1, antenna2, time and
//              channel set (io.simulate, io.read_ms)
//   params
//     path               the Measurement Set to write (a directory)
//     correlations       linear4 (XX XY YX YY) | linear2 (XX YY) | circular4 (RR RL LR LL) |
//                        circular2 (RR LL)
//     weight_spectrum    boolean, true: write WEIGHT_SPECTRUM (per channel) besides WEIGHT
//     flag_fraction      number in [0, 1], 0: fraction of visibilities flagged at random (tests)
//     flag_row_fraction  number in [0, 1], 0: fraction of rows flagged whole (FLAG_ROW)
//     flag_seed          integer, 1: seed of the random flags
//     overwrite          boolean, false: replace an existing Measurement Set at path
//
// Consecutive visibilities with the same antenna pair and time, and rising channels, make one
// row. XX = YY = I (RR = LL = I), cross hands 0, every correlation weight w/4 so that Stokes I
// read back (4 min(w_a, w_b), as io.read_ms and WSClean form it) has weight w. UVW is written in
// metres, converted at the frequency of the row's first channel. The directory appears only when
// the whole run succeeds.
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec io_write_ms_spec();

}  // namespace uvflow
