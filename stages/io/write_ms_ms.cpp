// The casacore side of io.write_ms (C++17): creates a Measurement Set with its subtables and
// appends main-table rows. Every function opens and closes the table, so nothing is held open
// between calls (see ms_tables.hpp).
#include <casacore/casa/Utilities/ValType.h>
#include <casacore/measures/Measures/MFrequency.h>
#include <casacore/measures/Measures/Stokes.h>
#include <casacore/ms/MeasurementSets/MSAntennaColumns.h>
#include <casacore/ms/MeasurementSets/MSDataDescColumns.h>
#include <casacore/ms/MeasurementSets/MSFeedColumns.h>
#include <casacore/ms/MeasurementSets/MSFieldColumns.h>
#include <casacore/ms/MeasurementSets/MSHistoryColumns.h>
#include <casacore/ms/MeasurementSets/MSMainColumns.h>
#include <casacore/ms/MeasurementSets/MSObsColumns.h>
#include <casacore/ms/MeasurementSets/MSPolColumns.h>
#include <casacore/ms/MeasurementSets/MSProcessorColumns.h>
#include <casacore/ms/MeasurementSets/MSSpWindowColumns.h>
#include <casacore/ms/MeasurementSets/MeasurementSet.h>
#include <casacore/tables/DataMan/IncrementalStMan.h>
#include <casacore/tables/DataMan/StandardStMan.h>
#include <casacore/tables/DataMan/TiledColumnStMan.h>
#include <casacore/tables/Tables/ArrColDesc.h>
#include <casacore/tables/Tables/ArrayColumn.h>
#include <casacore/tables/Tables/SetupNewTab.h>
#include <casacore/tables/Tables/TableRecord.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "runtime/error.hpp"
#include "stages/io/ms_tables.hpp"

namespace uvflow::ms {

namespace cc = casacore;

namespace {

// Cells per tile of the tiled columns: about 128 KiB of DATA per tile, whole rows of up to 32
// channels, so that reading a run of rows (or a channel range) touches whole tiles.
constexpr int kTileCells = 16384;
constexpr int kTileChannels = 32;
// Rows are put in runs, every column of a run before the next, so that the run's buckets of the
// standard storage manager (ANTENNA1, ANTENNA2) stay in its cache.
constexpr std::int64_t kRowsPerRun = 8192;
constexpr int kSsmBucketBytes = 32768, kSsmCacheBuckets = 64;
// Columns that rarely change: the incremental storage manager stores a value where it changes.
const char* const kIncrementalColumns[] = {"TIME", "TIME_CENTROID", "INTERVAL", "EXPOSURE", "ARRAY_ID",
                                           "DATA_DESC_ID", "FEED1", "FEED2", "FIELD_ID", "FLAG_ROW",
                                           "OBSERVATION_ID", "PROCESSOR_ID", "SCAN_NUMBER", "STATE_ID"};

template <class T>
cc::Array<T> wrap(const T* p, const cc::IPosition& shape) {
  return cc::Array<T>(shape, const_cast<T*>(p), cc::SHARE);  // read by casacore only
}

// casacore takes a relative name with a leading '.' (the framework's temporary names) for a name
// without it: give it absolute ones.
std::string table_name(const std::string& path) { return std::filesystem::absolute(path).string(); }

// A column of the incremental storage manager: a row not put has the previous row's value (its
// documented semantics), so only the run's first row and the rows that change are put.
template <class T>
void put_changes(cc::ScalarColumn<T>& column, std::int64_t first, const T* v, std::int64_t n) {
  for (std::int64_t k = 0; k < n; ++k)
    if (k == 0 || v[k] != v[k - 1]) column.put(cc::rownr_t(first + k), v[k]);
}

template <class F>
void guarded(const std::string& path, const std::string& what, F&& f) {
  try {
    f();
  } catch (const cc::AipsError& e) {
    throw std::runtime_error("Measurement Set " + path + ": " + what + ": " + e.what());
  }
}

// A fixed-shape array column (cells [corr] or [corr, channel], or UVW's [3]) in its own tiled
// hypercolumn, which reads and writes runs of rows in bulk: describe() before the table is set
// up, bind() after.
struct Tiled {
  std::string column;
  cc::IPosition cell;
  int tile_cells;
  void describe(cc::TableDesc& td) const {
    if (td.columnDesc(column).shape().empty()) td.rwColumnDesc(column).setShape(cell);  // UVW has its [3]
    td.defineHypercolumn("Tiled" + column, cell.size() + 1, cc::Vector<cc::String>(1, column));
  }
  cc::IPosition tile() const {
    cc::IPosition tile = cell;
    if (tile.size() == 2) tile[1] = std::min<std::int64_t>(tile[1], kTileChannels);
    tile.append(cc::IPosition(1, std::max<std::int64_t>(1, tile_cells / tile.product())));
    return tile;
  }
  void bind(cc::SetupNewTable& setup) const { setup.bindColumn(column, cc::TiledColumnStMan("Tiled" + column, tile())); }
};

}  // namespace

void create_ms(const std::string& path, const MsLayout& layout) {
  std::lock_guard lock(casacore_mutex());
  guarded(path, "creating it", [&] {
    const int ncorr = int(layout.correlations.size()), nchan = int(layout.chan_freq_hz.size());
    const cc::IPosition cell(2, ncorr, nchan);
    cc::TableDesc td = cc::MS::requiredTableDesc();
    cc::MS::addColumnToDesc(td, cc::MS::DATA, 2);
    if (layout.weight_spectrum) cc::MS::addColumnToDesc(td, cc::MS::WEIGHT_SPECTRUM, 2);
    const cc::IPosition corr(1, ncorr);
    std::vector<Tiled> tiled = {{"DATA", cell, kTileCells}, {"FLAG", cell, 8 * kTileCells},  // FLAG: bits
                                {"UVW", cc::IPosition(1, 3), 4 * kTileCells}, {"WEIGHT", corr, 2 * kTileCells},
                                {"SIGMA", corr, 2 * kTileCells}};
    if (layout.weight_spectrum) tiled.push_back({"WEIGHT_SPECTRUM", cell, 2 * kTileCells});
    for (const Tiled& t : tiled) t.describe(td);
    cc::SetupNewTable setup(table_name(path), td, cc::Table::NewNoReplace);
    cc::StandardStMan ssm("SSMData", kSsmBucketBytes, kSsmCacheBuckets);
    cc::IncrementalStMan ism("ISMData");
    setup.bindAll(ssm);
    for (const char* c : kIncrementalColumns) setup.bindColumn(c, ism);
    for (const Tiled& t : tiled) t.bind(setup);
    cc::MeasurementSet ms(setup);
    ms.createDefaultSubtables(cc::Table::New);

    cc::MSSpectralWindow spw_table = ms.spectralWindow();
    spw_table.addRow();
    cc::MSSpWindowColumns spw(spw_table);
    const cc::Vector<double> freq(layout.chan_freq_hz), width(nchan, layout.chan_width_hz);
    spw.name().put(0, "uvflow");
    spw.numChan().put(0, nchan);
    spw.refFrequency().put(0, freq[0]);
    spw.chanFreq().put(0, freq);
    spw.chanWidth().put(0, width);
    spw.effectiveBW().put(0, width);
    spw.resolution().put(0, width);
    spw.totalBandwidth().put(0, nchan * layout.chan_width_hz);
    spw.measFreqRef().put(0, cc::MFrequency::TOPO);
    spw.netSideband().put(0, 1);
    spw.ifConvChain().put(0, 0);
    spw.freqGroup().put(0, 0);
    spw.freqGroupName().put(0, "");
    spw.flagRow().put(0, false);

    cc::MSPolarization pol_table = ms.polarization();
    pol_table.addRow();
    cc::MSPolarizationColumns pol(pol_table);
    cc::Vector<int> types(ncorr);
    cc::Matrix<int> products(2, ncorr);
    for (int k = 0; k < ncorr; ++k) {
      const std::string& c = layout.correlations[k];
      types[k] = cc::Stokes::type(c);
      // Receptor 0 is X (or R), receptor 1 is Y (or L).
      products(0, k) = (c[0] == 'Y' || c[0] == 'L') ? 1 : 0;
      products(1, k) = (c[1] == 'Y' || c[1] == 'L') ? 1 : 0;
    }
    pol.numCorr().put(0, ncorr);
    pol.corrType().put(0, types);
    pol.corrProduct().put(0, products);
    pol.flagRow().put(0, false);

    cc::MSDataDescription dd_table = ms.dataDescription();
    dd_table.addRow();
    cc::MSDataDescColumns dd(dd_table);
    dd.spectralWindowId().put(0, 0);
    dd.polarizationId().put(0, 0);
    dd.flagRow().put(0, false);

    cc::MSField field_table = ms.field();
    field_table.addRow();
    cc::MSFieldColumns field(field_table);
    cc::Matrix<double> dir(2, 1);
    dir(0, 0) = layout.field.ra_rad;
    dir(1, 0) = layout.field.dec_rad;
    field.name().put(0, layout.field.name);
    field.code().put(0, "");
    field.numPoly().put(0, 0);
    field.delayDir().put(0, dir);  // J2000, the columns' default reference
    field.phaseDir().put(0, dir);
    field.referenceDir().put(0, dir);
    field.sourceId().put(0, -1);
    field.flagRow().put(0, false);

    cc::MSObservation obs_table = ms.observation();
    obs_table.addRow();
    cc::MSObservationColumns obs(obs_table);
    obs.telescopeName().put(0, layout.telescope);
    obs.observer().put(0, "");
    obs.project().put(0, "");
    obs.schedule().put(0, cc::Vector<cc::String>());
    obs.scheduleType().put(0, "");
    obs.log().put(0, cc::Vector<cc::String>());
    obs.releaseDate().put(0, 0.0);
    obs.flagRow().put(0, false);

    cc::MSProcessor proc_table = ms.processor();
    proc_table.addRow();
    cc::MSProcessorColumns proc(proc_table);
    proc.type().put(0, "CORRELATOR");
    proc.subType().put(0, "uvflow");
    proc.typeId().put(0, -1);
    proc.modeId().put(0, -1);
    proc.flagRow().put(0, false);

    cc::MSHistory hist_table = ms.history();
    hist_table.addRow();
    cc::MSHistoryColumns hist(hist_table);
    hist.time().put(0, 0.0);
    hist.observationId().put(0, 0);
    hist.message().put(0, layout.origin);
    hist.priority().put(0, "NORMAL");
    hist.origin().put(0, "uvflow io.write_ms");
    hist.objectId().put(0, 0);
    hist.application().put(0, "uvflow");
    hist.cliCommand().put(0, cc::Vector<cc::String>());
    hist.appParams().put(0, cc::Vector<cc::String>());
  });
}

void append_rows(const std::string& path, const Rows& r) {
  if (r.rows == 0) return;  // nothing to add (and the per-row sizes below divide by it)
  std::lock_guard lock(casacore_mutex());
  guarded(path, "appending rows", [&] {
    cc::MeasurementSet ms(table_name(path), cc::Table::Update);
    const std::int64_t first = std::int64_t(ms.nrow()), n = r.rows;
    ms.addRow(cc::rownr_t(n));
    cc::MSMainColumns mc(ms);
    put_changes(mc.time(), first, r.time.data(), n);
    put_changes(mc.timeCentroid(), first, r.time.data(), n);
    put_changes(mc.flagRow(), first, r.flag_row.begin(), n);
    const cc::rownr_t row = cc::rownr_t(first);
    mc.interval().put(row, r.interval_s);
    mc.exposure().put(row, r.interval_s);
    for (auto* c : {&mc.feed1(), &mc.feed2(), &mc.arrayId(), &mc.dataDescId(), &mc.fieldId(), &mc.observationId(),
                    &mc.processorId()})
      c->put(row, 0);
    mc.scanNumber().put(row, 1);
    mc.stateId().put(row, -1);
    const std::int64_t ncorr = std::int64_t(r.weight.size()) / n, cells = std::int64_t(r.data.size()) / n;
    for (std::int64_t r0 = 0; r0 < n; r0 += kRowsPerRun) {
      const std::int64_t m = std::min(kRowsPerRun, n - r0);
      const cc::Slicer range(cc::IPosition(1, first + r0), cc::IPosition(1, m), cc::Slicer::endIsLength);
      const cc::IPosition rows(1, m), cube(3, ncorr, cells / ncorr, m), per_corr(2, ncorr, m);
      mc.uvw().putColumnRange(range, wrap(r.uvw.data() + 3 * r0, cc::IPosition(2, 3, m)));
      mc.antenna1().putColumnRange(range, wrap(r.antenna1.data() + r0, rows));
      mc.antenna2().putColumnRange(range, wrap(r.antenna2.data() + r0, rows));
      mc.flag().putColumnRange(range, wrap(r.flag.begin() + r0 * cells, cube));
      mc.data().putColumnRange(range, wrap(r.data.data() + r0 * cells, cube));
      mc.weight().putColumnRange(range, wrap(r.weight.data() + r0 * ncorr, per_corr));
      mc.sigma().putColumnRange(range, wrap(r.sigma.data() + r0 * ncorr, per_corr));
      if (!r.weight_spectrum.empty())
        mc.weightSpectrum().putColumnRange(range, wrap(r.weight_spectrum.data() + r0 * cells, cube));
    }
  });
}

void finish_ms(const std::string& path, const std::vector<Antenna>& antennas, double first_time, double last_time) {
  std::lock_guard lock(casacore_mutex());
  guarded(path, "writing ANTENNA, FEED and the time range", [&] {
    cc::MeasurementSet ms(table_name(path), cc::Table::Update);
    const cc::Vector<int> types = cc::MSPolarizationColumns(ms.polarization()).corrType()(0);
    const bool linear = types[0] >= cc::Stokes::XX && types[0] <= cc::Stokes::YY;

    cc::MSAntenna ant_table = ms.antenna();
    ant_table.addRow(antennas.size());
    cc::MSAntennaColumns ant(ant_table);
    cc::MSFeed feed_table = ms.feed();
    feed_table.addRow(antennas.size());
    cc::MSFeedColumns feed(feed_table);
    cc::Vector<cc::String> receptors(2);
    receptors[0] = linear ? "X" : "R";
    receptors[1] = linear ? "Y" : "L";
    cc::Vector<double> angles(2, 0.0);
    if (linear) angles[1] = M_PI / 2;  // Y at 90 degrees to X
    cc::Matrix<cc::Complex> response(2, 2, cc::Complex(0));
    response(0, 0) = response(1, 1) = cc::Complex(1);
    for (std::size_t a = 0; a < antennas.size(); ++a) {
      const Antenna& an = antennas[a];
      cc::Vector<double> pos(3);
      pos[0] = an.x;
      pos[1] = an.y;
      pos[2] = an.z;
      ant.name().put(a, an.name);
      ant.station().put(a, an.name);
      ant.type().put(a, "GROUND-BASED");
      ant.mount().put(a, "ALT-AZ");
      ant.position().put(a, pos);
      ant.offset().put(a, cc::Vector<double>(3, 0.0));
      ant.dishDiameter().put(a, an.dish_diameter_m);
      ant.flagRow().put(a, false);

      feed.antennaId().put(a, int(a));
      feed.feedId().put(a, 0);
      feed.spectralWindowId().put(a, -1);
      feed.time().put(a, 0.0);
      feed.interval().put(a, 0.0);  // valid at all times
      feed.numReceptors().put(a, 2);
      feed.beamId().put(a, -1);
      feed.beamOffset().put(a, cc::Matrix<double>(2, 2, 0.0));
      feed.polarizationType().put(a, receptors);
      feed.polResponse().put(a, response);
      feed.position().put(a, cc::Vector<double>(3, 0.0));
      feed.receptorAngle().put(a, angles);
    }

    cc::MSObservationColumns obs(ms.observation());
    cc::Vector<double> range(2);
    range[0] = first_time;
    range[1] = last_time;
    obs.timeRange().put(0, range);
    cc::MSFieldColumns field(ms.field());
    field.time().put(0, first_time);
  });
}

}  // namespace uvflow::ms

// ---------------------------------------------------------------- a column of an existing set

namespace uvflow::ms {

namespace {

template <class F>
void guarded_input(const std::string& path, const std::string& what, F&& f) {
  try {
    f();
  } catch (const cc::AipsError& e) {
    throw InputError(path + ": " + what + ": " + e.what());
  }
}

}  // namespace

ColumnTarget inspect_column(const std::string& path, const std::string& column, bool add, bool keys) {
  ColumnTarget out;
  {
    // The subtables' checks and the rows' keys as io.read_ms reads them (it takes the lock itself).
    MsReader reader(path);
    const MsInfo& info = reader.info();
    out.rows = info.rows;
    out.correlations = info.correlations;
    out.chan_freq_hz = info.chan_freq_hz;
    // select() opens a data column (read() reads none of it here): DATA, which every set has.
    reader.select("DATA", 0, int(info.chan_freq_hz.size()), 0, 1, int(info.correlations.size()), false);
    Chunk chunk;
    constexpr std::int64_t kRows = 1 << 16;
    for (std::int64_t first = 0; keys && first < info.rows; first += kRows) {
      reader.read(first, std::min(kRows, info.rows - first), false, chunk);
      out.time.insert(out.time.end(), chunk.time.begin(), chunk.time.end());
      out.antenna1.insert(out.antenna1.end(), chunk.antenna1.begin(), chunk.antenna1.end());
      out.antenna2.insert(out.antenna2.end(), chunk.antenna2.begin(), chunk.antenna2.end());
    }
  }
  std::lock_guard lock(casacore_mutex());
  guarded_input(path, "column " + column, [&] {
    const cc::Table t(table_name(path), cc::Table::Old);
    out.exists = t.tableDesc().isColumn(column);
    if (!out.exists) {
      if (!add)
        throw InputError(path + ": the main table has no column " + column +
                         "; set add_column: true to add it (other columns are left as they are)");
      return;
    }
    const cc::ColumnDesc& desc = t.tableDesc().columnDesc(column);
    // getTypeStr pads the name with blanks.
    std::string type_name = cc::ValType::getTypeStr(desc.dataType());
    type_name.erase(type_name.find_last_not_of(' ') + 1);
    if (desc.dataType() != cc::TpComplex || !desc.isArray())
      throw InputError(path + ": column " + column + " holds " + type_name +
                       (desc.isArray() ? " arrays" : " scalars") + ", not complex arrays: it cannot hold visibilities");
    const cc::IPosition want(2, std::int64_t(out.correlations.size()), std::int64_t(out.chan_freq_hz.size()));
    const cc::ArrayColumn<cc::Complex> col(t, column);
    for (cc::rownr_t r = 0; r < t.nrow(); ++r)
      if (col.isDefined(r) && col.shape(r) != want)
        throw InputError(path + ": column " + column + " row " + std::to_string(r) + " holds " +
                         col.shape(r).toString() + " values, expected [correlations, channels] = " + want.toString());
    const cc::Record dm = t.dataManagerInfo();
    for (cc::uInt k = 0; k < dm.nfields(); ++k) {
      const cc::Record& m = dm.subRecord(k);
      const cc::Vector<cc::String> cols = m.asArrayString("COLUMNS");
      if (std::find(cols.begin(), cols.end(), cc::String(column)) != cols.end())
        out.manager_file = "table.f" + std::to_string(m.asuInt("SEQNR"));
    }
    if (out.manager_file.empty())
      throw std::logic_error("Measurement Set " + path + ": no storage manager lists column " + column);
  });
  return out;
}

void prepare_column(const std::string& path, const std::string& column, int ncorr, int nchan) {
  std::lock_guard lock(casacore_mutex());
  guarded(path, "preparing column " + column, [&] {
    cc::Table t(table_name(path), cc::Table::Update);
    const cc::IPosition cell(2, ncorr, nchan);
    const cc::Array<cc::Complex> zeros(cell, cc::Complex(0));
    if (!t.tableDesc().isColumn(column)) {
      cc::TableDesc td;
      td.addColumn(cc::ArrayColumnDesc<cc::Complex>(column, "added by uvflow io.write_ms", cell, cc::ColumnDesc::FixedShape));
      const Tiled tiled{column, cell, kTileCells};
      tiled.describe(td);
      t.addColumn(td, cc::TiledColumnStMan("Tiled" + column, tiled.tile()));
      cc::ArrayColumn<cc::Complex> col(t, column);
      const std::int64_t rows = std::int64_t(t.nrow());
      for (std::int64_t r0 = 0; r0 < rows; r0 += kRowsPerRun) {
        const std::int64_t m = std::min(kRowsPerRun, rows - r0);
        col.putColumnRange(cc::Slicer(cc::IPosition(1, r0), cc::IPosition(1, m), cc::Slicer::endIsLength),
                           cc::Array<cc::Complex>(cc::IPosition(3, ncorr, nchan, m), cc::Complex(0)));
      }
      return;
    }
    cc::ArrayColumn<cc::Complex> col(t, column);
    for (cc::rownr_t r = 0; r < t.nrow(); ++r)
      if (!col.isDefined(r)) col.put(r, zeros);
  });
}

void get_cells(const std::string& path, const std::string& column, std::int64_t first, std::int64_t n,
               std::vector<std::complex<float>>& out) {
  std::lock_guard lock(casacore_mutex());
  guarded(path, "reading column " + column, [&] {
    const cc::Table t(table_name(path), cc::Table::Old);
    const cc::ArrayColumn<cc::Complex> col(t, column);
    const cc::IPosition cell = col.shape(cc::rownr_t(first));
    out.resize(std::size_t(cell.product() * n));
    cc::Array<cc::Complex> a(cc::IPosition(3, cell[0], cell[1], n), out.data(), cc::SHARE);
    col.getColumnRange(cc::Slicer(cc::IPosition(1, first), cc::IPosition(1, n), cc::Slicer::endIsLength), a);
  });
}

void put_cells(const std::string& path, const std::string& column, std::int64_t first, std::int64_t n,
               const std::vector<std::complex<float>>& cells) {
  std::lock_guard lock(casacore_mutex());
  guarded(path, "writing column " + column, [&] {
    cc::Table t(table_name(path), cc::Table::Update);
    cc::ArrayColumn<cc::Complex> col(t, column);
    const cc::IPosition cell = col.shape(cc::rownr_t(first));
    col.putColumnRange(cc::Slicer(cc::IPosition(1, first), cc::IPosition(1, n), cc::Slicer::endIsLength),
                       wrap(cells.data(), cc::IPosition(3, cell[0], cell[1], n)));
  });
}

}  // namespace uvflow::ms
