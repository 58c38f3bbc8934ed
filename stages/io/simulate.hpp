// Visibility order: dump-major, then baselines (a1, a2), a1 < a2, in layout-file order of the
// chosen stations, then channels. The presets themselves (stations, dumps, elevations) are in
// simulate.cpp; `preset`'s choices below name them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::io_simulate {

inline constexpr Out<VisSetInfo> info{
    .name = "info",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "the Observation: phase centre, frequency, sizes and uvw statistics; emitted before the first block"};
inline constexpr Out<VisBlock> vis{
    .name = "vis", .residency = Residency::host, .doc = "visibility blocks of dumps_per_block whole dumps"};

struct Params {
  std::string preset = "tiny";
  std::filesystem::path layout = "data/ska1_low_v5_512st_enu.txt";
  std::int64_t stations = 0;
  std::int64_t dumps = 0;
  std::int64_t dumps_per_block = 0;
  double freq_hz = 100e6;
  std::int64_t channels = 1;
  double channel_width_hz = 781250.0;
  std::string date = "2030-01-01";
  double ra_deg = 0.0;
  std::optional<double> dec_deg;
  std::optional<double> el_start_deg;
  std::optional<double> el_end_deg;
  std::int64_t seed = 1;
  double noise_jy = 0.0;
  bool precompute = false;
  std::vector<Record> sky;
  double sky_spacing_deg = 0.05;
  std::string share = "none";
};

inline const StageDecl<Params> decl{
    .type = "io.simulate",
    .summary = "simulate SKA1-Low visibilities of a point-source sky (the seeds' data sets by preset name)",
    .doc = "Stations from the SKA1-Low v5 layout (ENU metres about the array reference position, lon "
           "116.7644482, lat -26.82472208 deg) observe a phase centre at (ra_deg, dec_deg). Dumps are evenly "
           "spaced in hour angle between the elevations el_start_deg and el_end_deg: rising (east of the "
           "meridian) when el_start_deg < el_end_deg, setting (west) otherwise; an elevation the phase "
           "centre never reaches at that declination is a parameter error. Each dump holds every baseline "
           "a1 < a2 of the chosen stations (layout-file order) and each of `channels` channels at freq_hz "
           "+ c * channel_width_hz (order [dump][baseline][channel]), UVW = antenna2 - antenna1 in "
           "wavelengths at the channel's frequency (Measurement Set convention; multi-frequency "
           "synthesis), stored as float. V = sum over sources of S exp(+2 pi i (u l + v m + w (n - 1))), "
           "n = sqrt(1 - l^2 - m^2), evaluated in double precision at the stored uvw, weight 1, plus optional Gaussian noise (noise_jy on each of the "
           "real and imaginary parts) drawn per dump from a generator seeded by (seed, dump), so the data "
           "do not depend on threading or block size. Sources are (l, m) direction-cosine offsets given "
           "in degrees (l = l_deg * pi/180, l towards east = increasing RA, m north): a source at l_deg = "
           "k * cell lands k pixels left of the centre of a SIN image. The default sky is a 16 x 16 grid "
           "of 1 Jy sources sky_spacing_deg apart, centred on the phase centre and offset by half a "
           "spacing so none sits on it. Presets (declination -19 deg, which transits at elevation 82.18 "
           "deg): tiny = 64 stations x 8 dumps (16,128 visibilities), small = 256 x 24 (783,360), "
           "synthetic = the 208 stations nearest the centre x 100 dumps at elevation 30 -> 56 (2,152,800, "
           "the count of the seeds' synthetic set; baselines up to 0.8 km, so a far smaller w range), el30-56, el56-82, el82-70 = 512 stations x 240 dumps (31,395,840; "
           "1.95, 2.28 and 1.21 hours of hour angle); tiny and small observe 56 -> 82. The VisSetInfo "
           "carries the uvw statistics over every visibility (max, min and RMS of |w|; max_abs_uv = max "
           "of |u| and |v|), computed from the geometry before the first block. Hour angles place the dumps; "
           "their times are those on `date` (UTC, the first on or after 0h; GMST of IAU 1982, UT1 = UTC) when "
           "the phase centre stands at those hour angles, so ra_deg and date only label the data. For "
           "io.write_ms, blocks carry each visibility's antenna pair, time (MJD seconds) and channel, and "
           "the VisSetInfo the stations (named S<layout line from 0>, WGS84 positions for a site height of "
           "300 m, 38 m across), the dump spacing, the channel width and DATE-OBS. Tested against "
           "independent rotation-matrix uvw, elevations recovered from the simulated w, the visibility formula evaluated with "
           "std::exp, and a direct-DFT image of a single source.",
    .outputs = {info, vis},
    .params =
        {{&Params::preset,
          {.name = "preset",
           .choices = {"tiny", "small", "synthetic", "el30-56", "el56-82", "el82-70"},
           .doc = "observation shape: tiny and small for tests, synthetic and el30-56/el56-82/el82-70 like the seeds' "
                  "data sets"}},
         {&Params::layout,
          {.name = "layout",
           .doc = "station layout, one 'east north up' line (metres) per station; a relative path is looked up in the "
                  "working directory, then in the uvflow source tree"}},
         {&Params::stations,
          {.name = "stations", .min = 0.0, .max = 1e5, .doc = "stations to use, nearest the array centre first; 0: the preset's"}},
         {&Params::dumps,
          {.name = "dumps", .min = 0.0, .max = 1e6, .doc = "time samples (each holds every baseline); 0: the preset's"}},
         {&Params::dumps_per_block,
          {.name = "dumps_per_block",
           .min = 0.0,
           .max = 1e6,
           .doc = "dumps per emitted VisBlock (at most dumps); 0: the preset's"}},
         {&Params::freq_hz,
          {.name = "freq_hz", .unit = "Hz", .min = 1e6, .max = 1e12, .doc = "observing frequency (of the first channel)"}},
         {&Params::channels,
          {.name = "channels",
           .min = 1.0,
           .max = 65536.0,
           .doc = "frequency channels, each baseline and dump observed in every one"}},
         {&Params::channel_width_hz,
          {.name = "channel_width_hz",
           .unit = "Hz",
           .min = 1.0,
           .max = 1e9,
           .doc = "channel spacing (and width; the default is an SKA1-Low coarse channel)"}},
         {&Params::date,
          {.name = "date", .doc = "UTC day of the observation, YYYY-MM-DD: labels the dumps with times"}},
         {&Params::ra_deg,
          {.name = "ra_deg",
           .unit = "deg",
           .min = 0.0,
           .max = 360.0,
           .doc = "phase centre right ascension (a label: dumps are placed by hour angle)"}},
         {&Params::dec_deg,
          {.name = "dec_deg",
           .unit = "deg",
           .min = -90.0,
           .max = 90.0,
           .doc = "phase centre declination; unset: the preset's (-19)"}},
         {&Params::el_start_deg,
          {.name = "el_start_deg",
           .unit = "deg",
           .min = 0.0,
           .max = 90.0,
           .doc = "phase centre elevation at the first dump; unset: the preset's"}},
         {&Params::el_end_deg,
          {.name = "el_end_deg",
           .unit = "deg",
           .min = 0.0,
           .max = 90.0,
           .doc = "phase centre elevation at the last dump (rising if above el_start_deg, else setting); "
                  "unset: the preset's"}},
         {&Params::seed,
          {.name = "seed", .min = 0.0, .doc = "noise generator seed; the noise of dump d comes from (seed, d)"}},
         {&Params::noise_jy,
          {.name = "noise_jy",
           .unit = "Jy",
           .min = 0.0,
           .doc = "standard deviation of the Gaussian noise on each of the real and imaginary parts; 0: none"}},
         {&Params::precompute,
          {.name = "precompute",
           .doc = "simulate every block before the run starts and stream them from memory (benchmarks: the data are "
                  "in host memory, as if read, before the timed stream begins; memory is the whole data set)"}},
         {&Params::sky,
          {.name = "sky",
           .fields = {{.name = "l_deg",
                       .type = ParamType::number,
                       .unit = "deg",
                       .min = -90.0,
                       .max = 90.0,
                       .doc = "direction-cosine offset towards east (increasing RA), as l * 180/pi"},
                      {.name = "m_deg",
                       .type = ParamType::number,
                       .unit = "deg",
                       .min = -90.0,
                       .max = 90.0,
                       .doc = "direction-cosine offset towards north, as m * 180/pi"},
                      {.name = "flux_jy", .type = ParamType::number, .unit = "Jy", .doc = "flux density"}},
           .doc = "point sources; empty: a 16 x 16 grid of 1 Jy sources sky_spacing_deg apart"}},
         {&Params::sky_spacing_deg,
          {.name = "sky_spacing_deg",
           .unit = "deg",
           .min = 1e-4,
           .max = 5.0,
           .doc = "spacing of the default source grid (used when sky is empty)"}},
         {&Params::share,
          {.name = "share",
           .choices = {"none", "rows"},
           .doc = "under mpirun -np N (docs/distributed.md): none, every rank simulates every block; rows, block b "
                  "(dumps_per_block whole dumps) is simulated by rank b mod N alone, with the same values as in one "
                  "process. One process simulates everything either way"}}},
    .concurrency = Concurrency::serial,
};

StageSpec spec();

}  // namespace uvflow::io_simulate
