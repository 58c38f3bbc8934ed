// Measurement Sets for the tests, written and read with casacore directly (ms_fixture_ms.cpp,
// C++17 like the stages' casacore sides): hand-made sets with chosen correlations, fields,
// weights and flags, and an independent reader of what io.write_ms wrote.
#pragma once

#include <complex>
#include <string>
#include <vector>

namespace uvflow::test {

struct MsRow {
  double time = 0;  // MJD seconds
  int antenna1 = 0, antenna2 = 1, field = 0;
  double uvw[3] = {0, 0, 0};  // metres
  bool flag_row = false;
  std::vector<std::complex<float>> data;  // [channel][correlation]
  std::vector<char> flag;                 // [channel][correlation], 0 or 1
  std::vector<float> weight;              // [correlation]
  std::vector<float> weight_spectrum;     // [channel][correlation]; empty where the MS has none
};

struct MsField {
  std::string name;
  double ra_rad = 0, dec_rad = 0;
};

struct MsAntenna {
  std::string name;
  double position[3] = {0, 0, 0};
  double diameter_m = 0;
};

struct TestMs {
  std::vector<std::string> correlations{"XX", "YY"};
  std::vector<double> chan_freq_hz{1e8};
  double chan_width_hz = 1e6;
  std::vector<MsField> fields{{"F0", 0.5, -0.4}};
  std::vector<MsAntenna> antennas{{"A0"}, {"A1"}, {"A2"}, {"A3"}};
  std::string telescope = "TEST";
  bool weight_spectrum = false;  // write the rows' weight_spectrum
  std::vector<std::string> extra_data_columns;  // e.g. MODEL_DATA: copies of DATA
  double interval_s = 10;
  std::vector<MsRow> rows;
};

// A new Measurement Set at `path` (standard storage managers, no tiling).
void write_test_ms(const std::string& path, const TestMs& ms);

// Everything write_test_ms writes, read back from any Measurement Set with one spectral window.
TestMs read_test_ms(const std::string& path);

// A complex column of every row, [row][channel][correlation] (MODEL_DATA, CORRECTED_DATA, ...).
std::vector<std::complex<float>> read_column(const std::string& path, const std::string& column);

// Sets DATA of every flagged cell (FLAG, or FLAG_ROW) to `value`; returns how many.
long set_flagged_data(const std::string& path, std::complex<float> value);

}  // namespace uvflow::test
