// The casacore side of io.read_ms (C++17): opens a Measurement Set, checks its subtables, and
// reads runs of rows with column slicing straight into the caller's buffers.
#include <casacore/casa/Quanta/MVTime.h>
#include <casacore/measures/Measures/MDirection.h>
#include <casacore/measures/Measures/Stokes.h>
#include <casacore/ms/MeasurementSets/MSAntennaColumns.h>
#include <casacore/ms/MeasurementSets/MSDataDescColumns.h>
#include <casacore/ms/MeasurementSets/MSFieldColumns.h>
#include <casacore/ms/MeasurementSets/MSObsColumns.h>
#include <casacore/ms/MeasurementSets/MSPolColumns.h>
#include <casacore/ms/MeasurementSets/MSSpWindowColumns.h>
#include <casacore/ms/MeasurementSets/MeasurementSet.h>
#include <casacore/tables/Tables/ArrayColumn.h>
#include <casacore/tables/Tables/ScalarColumn.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "runtime/error.hpp"
#include "stages/io/ms_tables.hpp"

namespace uvflow::ms {

namespace cc = casacore;

namespace {

template <class T>
cc::Vector<T> wrap(T* p, std::size_t n) {
  return cc::Vector<T>(cc::IPosition(1, std::int64_t(n)), p, cc::SHARE);
}

template <class T>
cc::Array<T> wrap(T* p, const cc::IPosition& shape) {
  return cc::Array<T>(shape, p, cc::SHARE);
}

}  // namespace

struct MsReader::Impl {
  std::string path;
  cc::MeasurementSet ms;
  cc::ArrayColumn<double> uvw;
  cc::ScalarColumn<double> time;
  cc::ScalarColumn<int> antenna1, antenna2, field, data_desc;
  cc::ScalarColumn<bool> flag_row;
  cc::ArrayColumn<bool> flag;
  cc::ArrayColumn<cc::Complex> data;
  cc::ArrayColumn<float> weight;
  std::string data_name, weight_name;
  cc::Slicer cells, corrs;  // the selected channels x correlations; the correlations alone
  int nchan = 0, ncorr = 0;
  bool spectrum = false;

  // Runs `f`, turning casacore's exceptions into InputErrors that name the path and `where`.
  template <class F>
  auto guarded(const std::string& where, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const cc::AipsError& e) {
      throw InputError(path + ": " + where + ": " + e.what());
    }
  }
};

std::mutex& casacore_mutex() {
  static std::mutex m;
  return m;
}

MsReader::MsReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  std::lock_guard lock(casacore_mutex());
  Impl& m = *impl_;
  m.path = path;
  // casacore takes a relative name with a leading '.' for a name without it: give it absolute ones.
  const std::string table = std::filesystem::absolute(path).string();
  if (!cc::Table::isReadable(table))
    throw InputError(path + " is not a Measurement Set: no readable casacore table there");
  m.guarded("opening the Measurement Set", [&] {
    m.ms = cc::MeasurementSet(table, cc::TableLock(cc::TableLock::AutoNoReadLocking), cc::Table::Old);
  });
  MsInfo& in = info_;
  in.rows = std::int64_t(m.ms.nrow());
  for (const auto& c : m.ms.tableDesc().columnNames()) in.columns.push_back(c);

  m.guarded("DATA_DESCRIPTION", [&] {
    cc::MSDataDescColumns dd(m.ms.dataDescription());
    if (dd.nrow() != 1)
      throw InputError(path + ": DATA_DESCRIPTION has " + std::to_string(dd.nrow()) +
                       " rows: io.read_ms reads Measurement Sets with one spectral window and one polarisation setup");
    const int spw = dd.spectralWindowId()(0), pol = dd.polarizationId()(0);

    cc::MSSpWindowColumns sw(m.ms.spectralWindow());
    if (spw < 0 || cc::rownr_t(spw) >= sw.nrow())
      throw InputError(path + ": DATA_DESCRIPTION row 0 names SPECTRAL_WINDOW row " + std::to_string(spw) +
                       ", which does not exist");
    in.chan_freq_hz = sw.chanFreq()(spw).tovector();
    in.chan_width_hz = sw.chanWidth()(spw).tovector();

    cc::MSPolarizationColumns pc(m.ms.polarization());
    if (pol < 0 || cc::rownr_t(pol) >= pc.nrow())
      throw InputError(path + ": DATA_DESCRIPTION row 0 names POLARIZATION row " + std::to_string(pol) +
                       ", which does not exist");
    for (int t : pc.corrType()(pol).tovector())
      in.correlations.push_back(cc::Stokes::name(cc::Stokes::type(t)));
  });

  m.guarded("FIELD", [&] {
    cc::MSFieldColumns fc(m.ms.field());
    for (cc::rownr_t r = 0; r < fc.nrow(); ++r) {
      const auto ref = cc::MDirection::Types(fc.phaseDirMeas(r).getRef().getType());
      if (ref != cc::MDirection::J2000 && ref != cc::MDirection::ICRS)
        throw InputError(path + ": FIELD row " + std::to_string(r) + " PHASE_DIR is in " +
                         std::string(cc::MDirection::showType(ref)) + ": io.read_ms reads J2000 (or ICRS) phase centres");
      // The stored angles (the measure would round them through direction cosines); the
      // constant term where PHASE_DIR is a polynomial in time.
      const cc::Array<double> dir = fc.phaseDir()(r);
      in.fields.push_back({fc.name()(r), dir(cc::IPosition(2, 0, 0)), dir(cc::IPosition(2, 1, 0))});
    }
  });

  m.guarded("OBSERVATION", [&] {
    cc::MSObservationColumns oc(m.ms.observation());
    if (oc.nrow() > 0) in.telescope = oc.telescopeName()(0);
  });

  m.guarded("ANTENNA", [&] {
    cc::MSAntennaColumns ac(m.ms.antenna());
    for (cc::rownr_t r = 0; r < ac.nrow(); ++r) {
      const cc::Vector<double> p = ac.position()(r);
      in.antennas.push_back({ac.name()(r), p[0], p[1], p[2], ac.dishDiameter()(r)});
    }
  });

  m.guarded("main table", [&] {
    m.uvw = cc::ArrayColumn<double>(m.ms, "UVW");
    m.time = cc::ScalarColumn<double>(m.ms, "TIME");
    m.antenna1 = cc::ScalarColumn<int>(m.ms, "ANTENNA1");
    m.antenna2 = cc::ScalarColumn<int>(m.ms, "ANTENNA2");
    m.field = cc::ScalarColumn<int>(m.ms, "FIELD_ID");
    m.data_desc = cc::ScalarColumn<int>(m.ms, "DATA_DESC_ID");
    m.flag_row = cc::ScalarColumn<bool>(m.ms, "FLAG_ROW");
    m.flag = cc::ArrayColumn<bool>(m.ms, "FLAG");
    if (in.rows > 0) in.interval_s = cc::ScalarColumn<double>(m.ms, "INTERVAL")(0);
    in.weight_spectrum = m.ms.tableDesc().isColumn("WEIGHT_SPECTRUM") && in.rows > 0 &&
                         cc::ArrayColumn<float>(m.ms, "WEIGHT_SPECTRUM").isDefined(0);
  });
}

MsReader::~MsReader() {
  std::lock_guard lock(casacore_mutex());
  impl_.reset();
}

void MsReader::select(const std::string& data_column, int chan0, int nchan, int corr0, int corr_step, int ncorr,
                      bool spectrum) {
  std::lock_guard lock(casacore_mutex());
  Impl& m = *impl_;
  m.data_name = data_column;
  m.weight_name = spectrum ? "WEIGHT_SPECTRUM" : "WEIGHT";
  m.guarded("column " + data_column, [&] { m.data = cc::ArrayColumn<cc::Complex>(m.ms, data_column); });
  m.guarded("column " + m.weight_name, [&] { m.weight = cc::ArrayColumn<float>(m.ms, m.weight_name); });
  m.cells = cc::Slicer(cc::IPosition(2, corr0, chan0), cc::IPosition(2, ncorr, nchan), cc::IPosition(2, corr_step, 1),
                       cc::Slicer::endIsLength);
  m.corrs = cc::Slicer(cc::IPosition(1, corr0), cc::IPosition(1, ncorr), cc::IPosition(1, corr_step),
                       cc::Slicer::endIsLength);
  m.nchan = nchan;
  m.ncorr = ncorr;
  m.spectrum = spectrum;
}

void MsReader::read(std::int64_t first, std::int64_t n, bool values, Chunk& out) {
  std::lock_guard lock(casacore_mutex());
  Impl& m = *impl_;
  const std::size_t rows = std::size_t(n), cells = rows * std::size_t(m.nchan) * std::size_t(m.ncorr);
  const cc::Slicer range(cc::IPosition(1, first), cc::IPosition(1, n), cc::Slicer::endIsLength);
  const cc::IPosition cube(3, m.ncorr, m.nchan, n);
  out.rows = n;
  out.uvw.resize(3 * rows);
  out.time.resize(rows);
  out.antenna1.resize(rows);
  out.antenna2.resize(rows);
  out.field.resize(rows);
  out.data_desc.resize(rows);
  out.flag_row.resize(rows);
  out.flag.resize(cells);
  const std::string where = "rows " + std::to_string(first) + "-" + std::to_string(first + n - 1) + ", column ";
  m.guarded(where + "UVW", [&] {
    cc::Array<double> a = wrap(out.uvw.data(), cc::IPosition(2, 3, n));
    m.uvw.getColumnRange(range, a);
  });
  m.guarded(where + "TIME", [&] {
    cc::Vector<double> v = wrap(out.time.data(), rows);
    m.time.getColumnRange(range, v);
  });
  auto ints = [&](cc::ScalarColumn<int>& col, std::vector<std::int32_t>& buf, const char* name) {
    m.guarded(where + name, [&] {
      cc::Vector<int> v = wrap(buf.data(), rows);
      col.getColumnRange(range, v);
    });
  };
  ints(m.antenna1, out.antenna1, "ANTENNA1");
  ints(m.antenna2, out.antenna2, "ANTENNA2");
  ints(m.field, out.field, "FIELD_ID");
  ints(m.data_desc, out.data_desc, "DATA_DESC_ID");
  m.guarded(where + "FLAG_ROW", [&] {
    cc::Vector<bool> v = wrap(out.flag_row.begin(), rows);
    m.flag_row.getColumnRange(range, v);
  });
  m.guarded(where + "FLAG", [&] {
    cc::Array<bool> a = wrap(out.flag.begin(), cube);
    m.flag.getColumnRange(range, m.cells, a);
  });
  if (!values) return;
  out.data.resize(cells);
  m.guarded(where + m.data_name, [&] {
    cc::Array<cc::Complex> a = wrap(out.data.data(), cube);
    m.data.getColumnRange(range, m.cells, a);
  });
  m.guarded(where + m.weight_name, [&] {
    if (m.spectrum) {
      out.weight.resize(cells);
      cc::Array<float> a = wrap(out.weight.data(), cube);
      m.weight.getColumnRange(range, m.cells, a);
    } else {
      out.weight.resize(rows * std::size_t(m.ncorr));
      cc::Array<float> a = wrap(out.weight.data(), cc::IPosition(2, m.ncorr, n));
      m.weight.getColumnRange(range, m.corrs, a);
    }
  });
}

std::string iso8601(double mjd_seconds) {
  const long long ms = std::llround(mjd_seconds * 1e3), per_day = 86'400'000;
  const long long day = ms / per_day, of_day = ms % per_day;
  const cc::MVTime date{double(day)};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02lld:%02lld:%02lld.%03lld", int(date.year()), int(date.month()),
                int(date.monthday()), of_day / 3'600'000, of_day / 60'000 % 60, of_day / 1000 % 60, of_day % 1000);
  return buf;
}

}  // namespace uvflow::ms
