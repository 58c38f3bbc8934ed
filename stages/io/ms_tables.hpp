// The casacore side of io.read_ms and io.write_ms, behind plain types: casacore 3.5's headers do
// not compile as C++20, so read_ms_ms.cpp and write_ms_ms.cpp (C++17, the only files that include
// casacore) implement what is declared here and the stages never see a casacore type.
// Array layouts follow the Measurement Set's: [row][channel][correlation], correlation fastest.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace uvflow::ms {

// Flags as casacore reads and writes them (std::vector<bool> packs bits, which casacore cannot fill).
struct Flags {
  std::unique_ptr<bool[]> data;
  std::size_t size = 0;
  void resize(std::size_t n) {
    if (n > size) data.reset(new bool[n]);
    size = n;
  }
  bool operator[](std::size_t i) const { return data[i]; }
  bool* begin() const { return data.get(); }
  bool* end() const { return data.get() + size; }
};

struct Field {
  std::string name;
  double ra_rad = 0, dec_rad = 0;  // PHASE_DIR, J2000
};

struct Antenna {
  std::string name;
  double x = 0, y = 0, z = 0;  // ITRF, metres
  double dish_diameter_m = 0;
};

// ---------------------------------------------------------------- reading

// What io.read_ms checks before reading any visibility: the subtables and the main table's shape.
struct MsInfo {
  std::int64_t rows = 0;
  std::vector<std::string> columns;       // main-table column names, in table order
  std::vector<Field> fields;              // FIELD rows
  std::vector<std::string> correlations;  // POLARIZATION CORR_TYPE names ("XX", "RR", ...)
  std::vector<double> chan_freq_hz, chan_width_hz;  // SPECTRAL_WINDOW CHAN_FREQ, CHAN_WIDTH
  std::string telescope;                  // OBSERVATION TELESCOPE_NAME of row 0
  std::vector<Antenna> antennas;
  bool weight_spectrum = false;           // WEIGHT_SPECTRUM exists and holds values
  double interval_s = 0;                  // INTERVAL of row 0
};

// Main-table columns of a run of rows; flag, data and weight hold the selected channels and
// correlations only (see MsReader::select).
struct Chunk {
  std::int64_t rows = 0;
  std::vector<double> uvw;  // metres, 3 per row
  std::vector<double> time;  // MJD seconds
  std::vector<std::int32_t> antenna1, antenna2, field, data_desc;
  Flags flag_row, flag;
  std::vector<std::complex<float>> data;  // only when read with values
  std::vector<float> weight;  // with values: WEIGHT_SPECTRUM [row][channel][corr] or WEIGHT [row][corr]
};

class MsReader {
 public:
  // Opens `path` read-only. InputError (naming the path and the table or column) when it is not
  // a Measurement Set or its subtables are not what io.read_ms reads: one spectral window and one
  // polarisation setup, J2000 (or ICRS) phase centres.
  explicit MsReader(const std::string& path);
  ~MsReader();
  const MsInfo& info() const { return info_; }
  // What read() takes of the array columns: channels [chan0, chan0 + nchan), correlations
  // corr0 + k corr_step for k < ncorr, the data column by name, and per-channel weights if
  // `spectrum` (WEIGHT_SPECTRUM) or else WEIGHT.
  void select(const std::string& data_column, int chan0, int nchan, int corr0, int corr_step, int ncorr,
              bool spectrum);
  // Rows [first, first + n): uvw, time, antennas, field, data description and flags; the data and
  // weights too when `values`. Buffers are reused: a chunk read twice allocates nothing.
  void read(std::int64_t first, std::int64_t n, bool values, Chunk& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  MsInfo info_;
};

// ISO 8601 UTC (milliseconds) of a Measurement Set TIME, MJD seconds.
std::string iso8601(double mjd_seconds);

// casacore's table system is not thread-safe: two readers of one MS share an open table, and
// concurrent calls corrupt data or crash (seen with the two readers of a uniform-weighting
// pipeline). Every call into casacore, reading or writing, holds this one lock.
std::mutex& casacore_mutex();

// ---------------------------------------------------------------- writing

// What fixes the subtables of a new Measurement Set.
struct MsLayout {
  std::vector<std::string> correlations;  // "XX", "XY", ... or "RR", "RL", ...
  std::vector<double> chan_freq_hz;
  double chan_width_hz = 0;
  Field field;
  std::string telescope, origin;
  bool weight_spectrum = true;
};

// Main-table rows to append, all in the first field, spectral window and polarisation setup.
struct Rows {
  std::int64_t rows = 0;
  std::vector<double> uvw, time;  // metres (3 per row); MJD seconds
  std::vector<std::int32_t> antenna1, antenna2;
  double interval_s = 0;          // INTERVAL and EXPOSURE of every row
  Flags flag_row, flag;           // flag: [row][channel][corr]
  std::vector<std::complex<float>> data;
  std::vector<float> weight, sigma;   // [row][corr]
  std::vector<float> weight_spectrum;  // [row][channel][corr], when the layout has it
};

// A new Measurement Set at `path` (which must not exist) with every subtable but ANTENNA and FEED
// filled, and no rows. Each call below opens and closes it, so that between calls everything is
// on disk and the directory can be removed (a failed run) or renamed (a successful one).
void create_ms(const std::string& path, const MsLayout& layout);
void append_rows(const std::string& path, const Rows& rows);
// ANTENNA and FEED rows, and the observed time range in OBSERVATION and FIELD.
void finish_ms(const std::string& path, const std::vector<Antenna>& antennas, double first_time, double last_time);

// ---------------------------------------------------------------- a column of an existing set

// What io.write_ms needs to write one complex column of an existing Measurement Set's main table
// (MODEL_DATA, CORRECTED_DATA, ...): the rows' keys, the correlations and channels, and the files
// of the column's storage manager (the only ones, with table.dat and table.lock, that writing it
// changes).
struct ColumnTarget {
  std::int64_t rows = 0;
  std::vector<double> time;                     // per row, MJD seconds
  std::vector<std::int32_t> antenna1, antenna2;  // per row
  std::vector<std::string> correlations;
  std::vector<double> chan_freq_hz;
  bool exists = false;                          // the column is there (else it is to be added)
  std::string manager_file;                     // "table.f<n>": its storage manager's files start so
};

// Reads `path` (not changing it), the rows' keys only if `keys`. InputError naming the path and
// column when it is not a Measurement Set with one data description, the column is missing (and
// not `add`), is not a complex array column, or its cells are not [correlations, channels].
ColumnTarget inspect_column(const std::string& path, const std::string& column, bool add, bool keys);
// On a copy of the Measurement Set: adds the column (tiled, zeros) when it is missing, and gives
// cells that hold no array zeros of the right shape.
void prepare_column(const std::string& path, const std::string& column, int ncorr, int nchan);
// Rows [first, first + n) of the column, [row][channel][corr]: read, and written back.
void get_cells(const std::string& path, const std::string& column, std::int64_t first, std::int64_t n,
               std::vector<std::complex<float>>& out);
void put_cells(const std::string& path, const std::string& column, std::int64_t first, std::int64_t n,
               const std::vector<std::complex<float>>& cells);

}  // namespace uvflow::ms
