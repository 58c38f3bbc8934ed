// io.read_ms: visibilities from a Measurement Set, streamed in blocks of rows, with the uvw
// statistics of the selected data known before the first block.
//
//   outputs  info: VisSetInfo, once (emitted before the first block, from start())
//            vis:  VisBlock, stream, host; one block per rows_per_block rows that hold data
//   params   path (the MS), data_column (DATA | CORRECTED_DATA | MODEL_DATA), field (-1 = the
//            only one), channels ("" = all, else e.g. "0-31,40"), stokes (I | Q | U | V | XX |
//            XY | YX | YY | RR | RL | LR | LL), rows_per_block (0 = 2^20 visibilities' worth)
//   backend  cpu; serial source
//
// Every selected channel of every row becomes one visibility, uvw scaled to wavelengths at that
// channel's frequency (multi-frequency synthesis), in row order then channel order. Stokes I is
// (XX + YY) / 2 or (RR + LL) / 2 with weight 4 min(w_a, w_b), as WSClean forms it (Q, U, V
// likewise, with WSClean's definitions); one correlation keeps its own weight. Flagged
// visibilities (FLAG of either correlation used, FLAG_ROW) are dropped, as are non-finite values.
// Blocks carry each visibility's antenna pair, time and channel. Metadata errors (not an MS, a
// missing column, unusable correlations, field or channel choice) are found in prepare(), so
// `uvflow check` reports them; a selection with no unflagged data is found in prepare() of a run.
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec io_read_ms_spec();

}  // namespace uvflow
