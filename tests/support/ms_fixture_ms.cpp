// casacore side of the test fixtures (C++17): a plain, row-by-row writer and reader, independent
// of io.write_ms and io.read_ms.
#include <casacore/measures/Measures/Stokes.h>
#include <casacore/ms/MeasurementSets/MSAntennaColumns.h>
#include <casacore/ms/MeasurementSets/MSDataDescColumns.h>
#include <casacore/ms/MeasurementSets/MSFieldColumns.h>
#include <casacore/ms/MeasurementSets/MSMainColumns.h>
#include <casacore/ms/MeasurementSets/MSObsColumns.h>
#include <casacore/ms/MeasurementSets/MSPolColumns.h>
#include <casacore/ms/MeasurementSets/MSSpWindowColumns.h>
#include <casacore/ms/MeasurementSets/MeasurementSet.h>
#include <casacore/tables/Tables/SetupNewTab.h>

#include <filesystem>

#include "tests/support/ms_fixture.hpp"

namespace uvflow::test {

namespace cc = casacore;

namespace {

std::string absolute(const std::string& path) { return std::filesystem::absolute(path).string(); }

cc::MS::PredefinedColumns data_column(const std::string& name) {
  if (name == "CORRECTED_DATA") return cc::MS::CORRECTED_DATA;
  if (name == "MODEL_DATA") return cc::MS::MODEL_DATA;
  throw std::invalid_argument("no data column " + name);
}

}  // namespace

void write_test_ms(const std::string& path, const TestMs& t) {
  const int ncorr = int(t.correlations.size()), nchan = int(t.chan_freq_hz.size());
  const cc::IPosition cell(2, ncorr, nchan);
  cc::TableDesc td = cc::MS::requiredTableDesc();
  cc::MS::addColumnToDesc(td, cc::MS::DATA, 2);
  for (auto& c : t.extra_data_columns) cc::MS::addColumnToDesc(td, data_column(c), 2);
  if (t.weight_spectrum) cc::MS::addColumnToDesc(td, cc::MS::WEIGHT_SPECTRUM, 2);
  cc::SetupNewTable setup(absolute(path), td, cc::Table::New);
  cc::MeasurementSet ms(setup);
  ms.createDefaultSubtables(cc::Table::New);

  cc::MSSpectralWindow spw_table = ms.spectralWindow();
  spw_table.addRow();
  cc::MSSpWindowColumns spw(spw_table);
  spw.numChan().put(0, nchan);
  spw.chanFreq().put(0, cc::Vector<double>(t.chan_freq_hz));
  spw.chanWidth().put(0, cc::Vector<double>(nchan, t.chan_width_hz));
  spw.refFrequency().put(0, t.chan_freq_hz[0]);

  cc::MSPolarization pol_table = ms.polarization();
  pol_table.addRow();
  cc::MSPolarizationColumns pol(pol_table);
  cc::Vector<int> types(ncorr);
  for (int k = 0; k < ncorr; ++k) types[k] = cc::Stokes::type(t.correlations[k]);
  pol.numCorr().put(0, ncorr);
  pol.corrType().put(0, types);
  pol.corrProduct().put(0, cc::Matrix<int>(2, ncorr, 0));

  cc::MSDataDescription dd_table = ms.dataDescription();
  dd_table.addRow();
  cc::MSDataDescColumns dd(dd_table);
  dd.spectralWindowId().put(0, 0);
  dd.polarizationId().put(0, 0);

  cc::MSField field_table = ms.field();
  field_table.addRow(t.fields.size());
  cc::MSFieldColumns field(field_table);
  for (std::size_t f = 0; f < t.fields.size(); ++f) {
    cc::Matrix<double> dir(2, 1);
    dir(0, 0) = t.fields[f].ra_rad;
    dir(1, 0) = t.fields[f].dec_rad;
    field.name().put(f, t.fields[f].name);
    field.phaseDir().put(f, dir);
    field.delayDir().put(f, dir);
    field.referenceDir().put(f, dir);
  }

  cc::MSObservation obs_table = ms.observation();
  obs_table.addRow();
  cc::MSObservationColumns(obs_table).telescopeName().put(0, t.telescope);

  cc::MSAntenna ant_table = ms.antenna();
  ant_table.addRow(t.antennas.size());
  cc::MSAntennaColumns ant(ant_table);
  for (std::size_t a = 0; a < t.antennas.size(); ++a) {
    ant.name().put(a, t.antennas[a].name);
    ant.position().put(a, cc::Vector<double>(cc::IPosition(1, 3), const_cast<double*>(t.antennas[a].position), cc::COPY));
    ant.dishDiameter().put(a, t.antennas[a].diameter_m);
  }

  ms.addRow(t.rows.size());
  cc::MSMainColumns mc(ms);
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const MsRow& row = t.rows[r];
    mc.time().put(r, row.time);
    mc.interval().put(r, t.interval_s);
    mc.antenna1().put(r, row.antenna1);
    mc.antenna2().put(r, row.antenna2);
    mc.fieldId().put(r, row.field);
    mc.dataDescId().put(r, 0);
    mc.flagRow().put(r, row.flag_row);
    mc.uvw().put(r, cc::Vector<double>(cc::IPosition(1, 3), const_cast<double*>(row.uvw), cc::COPY));
    cc::Matrix<cc::Complex> data(cell);
    cc::Matrix<bool> flag(cell);
    cc::Matrix<float> spectrum(cell);
    for (int c = 0; c < nchan; ++c)
      for (int p = 0; p < ncorr; ++p) {
        const std::size_t k = std::size_t(c * ncorr + p);
        data(p, c) = row.data[k];
        flag(p, c) = row.flag[k] != 0;
        if (t.weight_spectrum) spectrum(p, c) = row.weight_spectrum[k];
      }
    mc.data().put(r, data);
    for (auto& c : t.extra_data_columns) cc::ArrayColumn<cc::Complex>(ms, c).put(r, data);
    mc.flag().put(r, flag);
    mc.weight().put(r, cc::Vector<float>(row.weight));
    mc.sigma().put(r, cc::Vector<float>(row.weight));
    if (t.weight_spectrum) mc.weightSpectrum().put(r, spectrum);
  }
}

TestMs read_test_ms(const std::string& path) {
  cc::MeasurementSet ms(absolute(path));
  TestMs t;
  const cc::Vector<int> types = cc::MSPolarizationColumns(ms.polarization()).corrType()(0);
  t.correlations.clear();
  for (int type : types) t.correlations.push_back(cc::Stokes::name(cc::Stokes::type(type)));
  cc::MSSpWindowColumns spw(ms.spectralWindow());
  t.chan_freq_hz = spw.chanFreq()(0).tovector();
  t.chan_width_hz = spw.chanWidth()(0)(cc::IPosition(1, 0));
  cc::MSFieldColumns field(ms.field());
  t.fields.clear();
  for (cc::rownr_t f = 0; f < field.nrow(); ++f) {
    const cc::Array<double> dir = field.phaseDir()(f);
    t.fields.push_back({field.name()(f), dir(cc::IPosition(2, 0, 0)), dir(cc::IPosition(2, 1, 0))});
  }
  t.telescope = cc::MSObservationColumns(ms.observation()).telescopeName()(0);
  cc::MSAntennaColumns ant(ms.antenna());
  t.antennas.clear();
  for (cc::rownr_t a = 0; a < ant.nrow(); ++a) {
    const cc::Vector<double> p = ant.position()(a);
    t.antennas.push_back({ant.name()(a), {p[0], p[1], p[2]}, ant.dishDiameter()(a)});
  }
  t.weight_spectrum = ms.tableDesc().isColumn("WEIGHT_SPECTRUM");
  cc::MSMainColumns mc(ms);
  t.interval_s = ms.nrow() ? mc.interval()(0) : 0;
  for (cc::rownr_t r = 0; r < ms.nrow(); ++r) {
    MsRow row;
    row.time = mc.time()(r);
    row.antenna1 = mc.antenna1()(r);
    row.antenna2 = mc.antenna2()(r);
    row.field = mc.fieldId()(r);
    row.flag_row = mc.flagRow()(r);
    const cc::Vector<double> uvw = mc.uvw()(r);
    for (int i = 0; i < 3; ++i) row.uvw[i] = uvw[i];
    const cc::Array<cc::Complex> data = mc.data()(r);
    const cc::Array<bool> flag = mc.flag()(r);
    row.data.assign(data.begin(), data.end());
    row.flag.assign(flag.begin(), flag.end());
    row.weight = mc.weight()(r).tovector();
    if (t.weight_spectrum) {
      const cc::Array<float> w = mc.weightSpectrum()(r);
      row.weight_spectrum.assign(w.begin(), w.end());
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::vector<std::complex<float>> read_column(const std::string& path, const std::string& column) {
  const cc::Table t(absolute(path));
  const cc::ArrayColumn<cc::Complex> col(t, column);
  std::vector<std::complex<float>> out;
  for (cc::rownr_t r = 0; r < t.nrow(); ++r) {
    const cc::Array<cc::Complex> cell = col(r);
    out.insert(out.end(), cell.begin(), cell.end());
  }
  return out;
}

long set_flagged_data(const std::string& path, std::complex<float> value) {
  cc::MeasurementSet ms(absolute(path), cc::Table::Update);
  cc::MSMainColumns mc(ms);
  long count = 0;
  for (cc::rownr_t r = 0; r < ms.nrow(); ++r) {
    cc::Array<cc::Complex> data = mc.data()(r);
    const cc::Array<bool> flag = mc.flag()(r);
    const bool row_flagged = mc.flagRow()(r);
    auto d = data.begin();
    for (auto f = flag.begin(); f != flag.end(); ++f, ++d)
      if (*f || row_flagged) *d = value, ++count;
    mc.data().put(r, data);
  }
  return count;
}

}  // namespace uvflow::test
