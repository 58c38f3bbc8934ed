// XX = YY = I (RR = LL = I) and every correlation weight w/4, so that Stokes I read back
// (4 min(w_a, w_b), as io.read_ms and WSClean form it) has weight w. casacore itself is behind
// stages/io/ms_tables.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_write_ms {

inline constexpr In<VisSetInfo> info{.name = "info",
                                     .arity = Arity::once,
                                     .residency = Residency::host,
                                     .doc = "the observation: phase centre, frequencies, antennas"};
inline constexpr In<VisBlock> vis{
    .name = "vis",
    .residency = Residency::host,
    .doc = "Stokes I visibilities with antenna1, antenna2, time and channel (from io.simulate or io.read_ms)"};

struct Params {
  std::filesystem::path path;
  std::string correlations = "linear4";
  bool weight_spectrum = true;
  double flag_fraction = 0.0;
  double flag_row_fraction = 0.0;
  std::int64_t flag_seed = 1;
  bool overwrite = false;
  std::string column;
  bool add_column = false;
};

inline const StageDecl<Params> decl{
    .type = "io.write_ms",
    .summary = "write visibilities to a new Measurement Set (for WSClean, CASA, DP3), or into a column of an existing one",
    .doc = "Creates a Measurement Set (casacore) with the standard subtables: ANTENNA (the observation's "
           "antennas: name, ITRF position, diameter; placeholders where unknown), FEED (two receptors, X "
           "and Y or R and L), FIELD (one field at the phase centre, J2000), SPECTRAL_WINDOW (the "
           "observation's frequencies, TOPO), POLARIZATION (the chosen correlations), DATA_DESCRIPTION, "
           "OBSERVATION (telescope, time range), PROCESSOR and HISTORY (where the data came from). Main "
           "table rows: consecutive visibilities with the same antenna pair and time, and rising "
           "channels, make one row (a block's rows are written together); UVW in metres from the first "
           "visibility's wavelengths at its channel's frequency; TIME and TIME_CENTROID; INTERVAL and "
           "EXPOSURE the observation's integration time; DATA with XX = YY = I (or RR = LL = I) and the "
           "cross hands 0, as a Stokes I sky gives; WEIGHT_SPECTRUM w/4 in every correlation, so that "
           "Stokes I read back as 4 min(w_XX, w_YY) (io.read_ms, WSClean) has weight w; WEIGHT the mean "
           "over the row's channels, SIGMA = 1/sqrt(WEIGHT); FLAG set for channels a row does not hold "
           "(weight 0) and, for tests, at random: flag_fraction of the visibilities (all correlations "
           "of a channel) and flag_row_fraction of the rows (FLAG_ROW and every FLAG), from a hash of "
           "(flag_seed, row, channel) so that they do not depend on block sizes. DATA, FLAG and "
           "WEIGHT_SPECTRUM are tiled (TiledColumnStMan, tiles of whole rows of up to 32 channels), so "
           "readers that slice channels or runs of rows read whole tiles. The Measurement Set is written "
           "under a temporary name, closed after every block, and appears at path only when the whole "
           "run succeeds; an existing path is replaced only with overwrite and only if it is a table. "
           "With column set, it writes instead into that column (MODEL_DATA, CORRECTED_DATA or any name) of "
           "the existing Measurement Set at path, leaving every other column as it was: each visibility goes "
           "to the row with its time and antenna pair and to the channel with its frequency, Stokes I into "
           "XX and YY (or RR and LL) and 0 into the cross hands, as above; cells no block writes keep their "
           "values (0 in a column added with add_column, tiled like DATA). The set is not changed during "
           "the run: a copy of it (hard links to every file the column does not live in, copies of the "
           "column's storage manager files and of table.dat) is written and replaces it when the whole run "
           "succeeds. Input errors, before anything is written where they can be known up front: a path "
           "that does not exist or is not a Measurement Set, a read-only set (no write permission), a "
           "missing column without add_column, a column that is not complex [correlations, channels]; while "
           "running, a visibility without a row of its time and antennas, or a frequency that is not a "
           "channel of the set. "
           "Tested by reading back with io.read_ms and independently with casacore, and by imaging with "
           "WSClean where installed; the column mode by predicting into copies of Measurement Sets (every "
           "other column byte for byte the same) and against a direct DFT.",
    .inputs = {info, vis},
    .params = {{&Params::path, {.name = "path",
                                 .doc = "the Measurement Set to write (a directory)",
                                 .required = true,
                                 .role = PathRole::output}},
               {&Params::correlations,
                {.name = "correlations",
                 .choices = {"linear4", "linear2", "circular4", "circular2"},
                 .doc = "correlations written: linear4 = XX XY YX YY, linear2 = XX YY, circular4 = RR RL LR LL, "
                        "circular2 = RR LL"}},
               {&Params::weight_spectrum,
                {.name = "weight_spectrum", .doc = "write WEIGHT_SPECTRUM (per-channel weights) besides WEIGHT"}},
               {&Params::flag_fraction,
                {.name = "flag_fraction",
                 .min = 0.0,
                 .max = 1.0,
                 .doc = "fraction of visibilities (all correlations of one channel of one row) flagged at random"}},
               {&Params::flag_row_fraction,
                {.name = "flag_row_fraction",
                 .min = 0.0,
                 .max = 1.0,
                 .doc = "fraction of rows flagged whole at random (FLAG_ROW)"}},
               {&Params::flag_seed, {.name = "flag_seed", .min = 0.0, .doc = "seed of the random flags"}},
               {&Params::column,
                {.name = "column",
                 .doc = "write this column of the existing Measurement Set at path instead of creating one (e.g. "
                        "MODEL_DATA); empty: create a new set"}},
               {&Params::add_column,
                {.name = "add_column", .doc = "with column: add it when the Measurement Set has none (zeros)"}},
               {&Params::overwrite,
                {.name = "overwrite",
                 .doc = "replace an existing Measurement Set at path (a path that is not a table is never replaced)"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();

}  // namespace uvflow::io_write_ms
