// Metadata errors (not an MS, a missing column, unusable correlations, field or channel choice)
// are found in prepare(), so `uvflow check` reports them; a selection with no unflagged data is
// found in prepare() of a run. casacore itself is behind stages/io/ms_tables.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_read_ms {

inline constexpr Out<VisSetInfo> info{
    .name = "info",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "the Observation: phase centre, frequencies, sizes and uvw statistics; emitted before the first block"};
inline constexpr Out<VisBlock> vis{
    .name = "vis", .residency = Residency::host, .doc = "the visibilities of rows_per_block rows, row by row, channel by channel"};

struct Params {
  std::filesystem::path path;
  std::string data_column = "DATA";
  std::int64_t field = -1;
  std::string channels = "";
  std::string stokes = "I";
  std::int64_t rows_per_block = 0;
  std::string share = "none";
};

inline const StageDecl<Params> decl{
    .type = "io.read_ms",
    .summary = "read visibilities from a Measurement Set, in blocks of rows, with their uvw statistics up front",
    .doc = "Streams one block per rows_per_block rows of the main table (rows without selected data are "
           "skipped), reading only the selected channels and correlations of FLAG, the data column and "
           "WEIGHT_SPECTRUM (or WEIGHT when WEIGHT_SPECTRUM is absent or empty) with casacore column "
           "slicing: memory stays bounded by one block whatever the size of the MS. Each selected channel "
           "of each row of the chosen field becomes one visibility, UVW (metres, antenna2 - antenna1) "
           "scaled to wavelengths at that channel's CHAN_FREQ: multi-frequency synthesis. stokes I is "
           "(XX + YY)/2 or (RR + LL)/2, Q, U and V follow WSClean's definitions (Q = (XX - YY)/2 = (RL + "
           "LR)/2, U = (XY + YX)/2 = (RL - LR)/2i, V = (XY - YX)/2i = (RR - LL)/2), each with weight "
           "4 min(w_a, w_b), WSClean's choice: a visibility is as good as its worse correlation, a zero "
           "weight on either leaves it out, and the factor 4 keeps WSClean's weight sums (a common scale "
           "does not change a normalised image). A single correlation keeps its own value and weight. A "
           "visibility flagged in either correlation used, in a row with FLAG_ROW set, or with a "
           "non-finite value is dropped from the block, never given weight 0, because 0 x NaN is NaN on "
           "a grid. Before the first block, prepare() reads UVW, TIME, the indices and the flags once "
           "(not the data) to validate the rows and compute the statistics kernels.wproj needs (max, min "
           "and RMS of |w|, max of |u| and |v|, in wavelengths over the selected unflagged "
           "visibilities, exactly as the blocks carry them; a value found non-finite while streaming "
           "is dropped and logged, but stays in these statistics and in total_visibilities). The VisSetInfo also carries the phase "
           "centre (FIELD PHASE_DIR, J2000), the selected frequencies (reference: the band centre), the "
           "telescope (OBSERVATION), DATE-OBS (the first selected TIME), the antennas and INTERVAL. "
           "Errors name the path and the table or column: not a Measurement Set, a missing data column "
           "(the existing columns are listed), correlations that cannot make the Stokes parameter, a "
           "field or channel that does not exist, several fields without a choice (they are listed), "
           "more than one data description, and a selection left empty by the flags. Tested against "
           "io.simulate data written by io.write_ms and Measurement Sets written directly with casacore.",
    .outputs = {info, vis},
    .params = {{&Params::path, {.name = "path", .doc = "the Measurement Set (a directory)", .required = true, .role = PathRole::input}},
               {&Params::data_column,
                {.name = "data_column",
                 .choices = {"DATA", "CORRECTED_DATA", "MODEL_DATA"},
                 .doc = "main-table column the visibilities come from"}},
               {&Params::field,
                {.name = "field",
                 .min = -1.0,
                 .max = 1e6,
                 .doc = "FIELD row to read; -1: the only field (an error when there are several)"}},
               {&Params::channels,
                {.name = "channels",
                 .doc = "channels to read, numbers and inclusive ranges from 0 such as \"0-31,40\"; empty: all"}},
               {&Params::stokes,
                {.name = "stokes",
                 .choices = {"I", "Q", "U", "V", "XX", "XY", "YX", "YY", "RR", "RL", "LR", "LL"},
                 .doc = "polarisation imaged: a Stokes parameter formed from two correlations, or one correlation"}},
               {&Params::rows_per_block,
                {.name = "rows_per_block",
                 .unit = "rows",
                 .min = 0.0,
                 .max = 1e9,
                 .doc = "main-table rows per emitted block; memory: the columns of one block (about 100 bytes a row "
                        "with one channel) and 44 bytes per visibility of each block in flight; 0: 2^20 visibilities' "
                        "worth of rows"}},
               {&Params::share,
                {.name = "share",
                 .choices = {"none", "rows"},
                 .doc = "under mpirun -np N (docs/distributed.md): none, every rank reads the whole MS; rows, rank r "
                        "reads (and scans for the uvw statistics, summed over the ranks) only the blocks of "
                        "rows_per_block rows b with b mod N = r. One process reads everything either way"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();

}  // namespace uvflow::io_read_ms
