// Visibilities from arrays a program hands in by name (uvflow.Pipeline.run(inputs=...) in
// Python; array_feed::put in C++), so that data already in memory goes through the same stages as
// a Measurement Set. The stage itself knows nothing of Python: stages/shared/array_feed is the
// interface.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_vis_arrays {

inline constexpr Out<VisSetInfo> info{
    .name = "info",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "the Observation: phase centre, frequencies and uvw statistics; emitted before the first block"};
inline constexpr Out<VisBlock> vis{
    .name = "vis", .residency = Residency::host, .doc = "the visibilities of rows_per_block rows, row by row, channel by channel"};

struct Params {
  std::string name;
  std::int64_t rows_per_block = 0;
};

inline const StageDecl<Params> decl{
    .type = "io.vis_arrays",
    .summary = "visibilities from arrays handed in by the program that runs the pipeline (Python: NumPy)",
    .doc = "Takes the arrays put under `name` (Python: Pipeline.run(inputs={name: {...}})): uvw (rows x 3, metres, "
           "antenna2 - antenna1, as a Measurement Set's UVW), vis (rows x channels, one polarisation), freq "
           "(channels, Hz), and optionally weight (rows x channels, else 1) and flag (rows x channels, nonzero: "
           "flagged), with the phase centre. Each channel of each row becomes one visibility, uvw scaled to "
           "wavelengths at its frequency, as io.read_ms does; flagged visibilities are dropped, and a non-finite "
           "value that is not flagged is an input error naming its row and channel. Without flags, the blocks' "
           "vis (complex64) and weight (float32) are the arrays handed in, not copies; uvw is always converted. "
           "The uvw statistics kernels.wproj needs are computed over the unflagged visibilities before the first "
           "block. Run from the command line, with no arrays handed in, the stage is an input error.",
    .outputs = {info, vis},
    .params = {{&Params::name, {.name = "name", .doc = "the name the arrays are handed in under", .required = true}},
               {&Params::rows_per_block,
                {.name = "rows_per_block",
                 .unit = "rows",
                 .min = 0.0,
                 .max = 1e9,
                 .doc = "rows per emitted block; 0: 2^20 visibilities' worth of rows"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();

}  // namespace uvflow::io_vis_arrays
