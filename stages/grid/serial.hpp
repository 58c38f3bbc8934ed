// grid.serial: the serial reference gridder, Listing 1 of the NAG memo (000_21de45a10be372d0.txt)
// as written: one visibility at a time, kernel values read from the quarter kernels with the
// oversampling stride. It is the yardstick the fast gridders are compared with; keep it plain.
//
//   in   vis      VisBlock, stream: visibilities in any order (raw, or placed: its coords are
//                 recomputed and its `skipped` count carried over)
//        kernels  KernelStack, once: quarter kernels, supports, grid geometry
//   out  grid     Grid, once (emitted at the end of the stream): single-precision cells, norm
//                 (double), gridded and skipped counts
//   backend: cpu (serial); no parameters.
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec grid_serial_spec();

}  // namespace uvflow
