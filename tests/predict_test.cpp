// Prediction into Measurement Sets: io.read_image (the model with its sky coordinates, against
// io.write_fits' header and headers edited keyword by keyword), vis.subtract (against the
// difference computed here), and io.write_ms writing a column of an existing set: the model of
// pipelines/predict.yaml against a direct DFT of the model's pixels, every other file of the set
// byte for byte the same, rows and channels matched (a channel selection, rows flagged), and every
// bad input an input error with the set left as it was.
#include <fitsio.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <complex>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <random>
#include <sstream>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/builtin.hpp"
#include "stages/io/read_image.hpp"
#include "stages/io/write_fits.hpp"
#include "stages/io/write_ms.hpp"
#include "stages/vis/subtract.hpp"
#include "tests/support/ms_fixture.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_stages.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

constexpr double kC = 299792458.0;
constexpr double kArcsec = std::numbers::pi / 180 / 3600;
using cdouble = std::complex<double>;

struct Src {
  int x, y;
  double flux;
};

// A model image of point sources on pixel centres, written by io.write_fits.
void write_model(const std::string& path, int n, double cell_rad, double ra, double dec, const std::vector<Src>& sky,
                 int nx = 0) {
  auto img = std::make_shared<Image>();
  img->nx = nx ? nx : n;
  img->ny = n;
  img->pixels = Array<float>::host(std::size_t(img->nx) * std::size_t(n));
  std::fill(img->pixels.begin(), img->pixels.end(), 0.0f);
  for (const Src& s : sky) img->pixels[std::size_t(s.y) * std::size_t(img->nx) + std::size_t(s.x)] += float(s.flux);
  img->wcs = SkyWcs{.ra_rad = ra, .dec_rad = dec, .cell_rad = cell_rad, .freq_hz = 1e8, .bunit = "JY/PIXEL"};
  StageHarness h(io_write_fits::spec(), "cpu", {{"path", path}});
  h.process({{"image", img}});
  h.commit_outputs();
}

void edit_key(const std::string& path, const char* key, double value) {
  fitsfile* f = nullptr;
  int status = 0;
  fits_open_file(&f, path.c_str(), READWRITE, &status);
  fits_update_key(f, TDOUBLE, key, &value, nullptr, &status);
  fits_close_file(f, &status);
  ASSERT_EQ(status, 0) << key;
}

void edit_key(const std::string& path, const char* key, const std::string& value) {
  fitsfile* f = nullptr;
  int status = 0;
  fits_open_file(&f, path.c_str(), READWRITE, &status);
  fits_update_key(f, TSTRING, key, const_cast<char*>(value.c_str()), nullptr, &status);
  fits_close_file(f, &status);
  ASSERT_EQ(status, 0) << key;
}

// The InputError of reading `path` with io.read_image ("" if none), `obs` connected if given.
std::string read_image_error(const std::string& path, std::shared_ptr<Observation> obs = nullptr) {
  try {
    StageHarness h(io_read_image::spec(), "cpu", {{"path", path}});
    if (obs) {
      auto info = std::make_shared<VisSetInfo>();
      info->obs = obs;
      h.set_input("info", info);
      h.process();
    } else {
      h.run_source();
    }
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Every file of a folder tree with its bytes and modification time.
struct FileState {
  std::string bytes;
  std::filesystem::file_time_type mtime;
};
std::map<std::string, FileState> snapshot(const std::filesystem::path& dir) {
  std::map<std::string, FileState> out;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) {
      std::ifstream f(e.path(), std::ios::binary);
      std::ostringstream s;
      s << f.rdbuf();
      out[std::filesystem::relative(e.path(), dir).string()] = {s.str(), e.last_write_time()};
    }
  return out;
}

void expect_untouched(const std::map<std::string, FileState>& before, const std::filesystem::path& dir) {
  const auto after = snapshot(dir);
  for (auto& [name, st] : after) EXPECT_TRUE(before.count(name)) << name << " appeared";
  for (auto& [name, st] : before) {
    ASSERT_TRUE(after.count(name)) << name;
    EXPECT_TRUE(after.at(name).bytes == st.bytes) << name << " changed";
    EXPECT_TRUE(after.at(name).mtime == st.mtime) << name << " was written";
  }
}

struct Predict : ::testing::Test {
  Registry reg;
  TempDir dir;
  static constexpr int kN = 128;
  static constexpr double kCellArcsec = 100;
  void SetUp() override {
    register_builtin_stages(reg);
    register_test_stages(reg);
  }
  void run(const std::string& yaml, const std::vector<std::string>& sets = {}) {
    run_plan(load_plan(dir.write("p.yaml", yaml), sets, reg));
  }
  // The tiny preset in `channels` channels with `sky` (pixel offsets on the model's grid).
  std::string simulate_ms(const std::string& name, const std::vector<Src>& sky, int channels = 2) {
    std::string recs;
    for (const Src& s : sky)
      recs += (recs.empty() ? "" : ", ") + ("{l_deg: " + std::to_string(-(s.x - kN / 2) * kCellArcsec / 3600) +
                                            ", m_deg: " + std::to_string((s.y - kN / 2) * kCellArcsec / 3600) +
                                            ", flux_jy: " + std::to_string(s.flux) + "}");
    const std::string ms = (dir / name).string();
    run("schema: uvflow/1\nstages:\n  - {id: vis, type: io.simulate, params: {preset: tiny, channels: " +
        std::to_string(channels) + ", sky: [" + recs + "]}}\n  - {id: ms, type: io.write_ms, params: {path: " + ms +
        "}, in: {info: vis, vis: vis}}\n");
    return ms;
  }
  void predict(const std::string& ms, const std::string& model, const std::string& column = "MODEL_DATA") {
    run_plan(load_plan(std::filesystem::path(UVFLOW_TEST_SOURCE_DIR) / "pipelines/predict.yaml",
                       {"vars.ms=" + ms, "vars.model=" + model, "vars.npix=" + std::to_string(kN),
                        "vars.cell_arcsec=" + std::to_string(kCellArcsec), "vars.column=" + column,
                        "run.report=" + (dir / "report.json").string()},
                       reg));
  }
  // Sources on pixel centres within the inner 80 % of the field.
  static std::vector<Src> random_sky(std::uint64_t seed, int count) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pix(int(0.1 * kN), int(0.9 * kN) - 1);
    std::uniform_real_distribution<double> flux(0.1, 2);
    std::vector<Src> sky;
    for (int k = 0; k < count; ++k) sky.push_back({pix(rng), pix(rng), flux(rng)});
    return sky;
  }
};

// ---------------------------------------------------------------- io.read_image

TEST_F(Predict, ReadImageReadsWhatWriteFitsWrites) {
  const std::string path = (dir / "m.fits").string();
  const std::vector<Src> sky = {{3, 5, 1.5}, {60, 70, -0.25}, {127, 0, 2}};
  write_model(path, kN, kCellArcsec * kArcsec, 5.9, -0.45, sky);
  StageHarness h(io_read_image::spec(), "cpu", {{"path", path}});
  h.run_source();
  auto img = h.output<Image>("image");
  ASSERT_EQ(img->nx, kN);
  ASSERT_EQ(img->ny, kN);
  ASSERT_TRUE(img->wcs);
  EXPECT_NEAR(img->wcs->ra_rad, 5.9, 1e-13);
  EXPECT_NEAR(img->wcs->dec_rad, -0.45, 1e-13);
  EXPECT_NEAR(img->wcs->cell_rad, kCellArcsec * kArcsec, 1e-15 * kCellArcsec * kArcsec);
  EXPECT_EQ(img->wcs->bunit, "JY/PIXEL");
  double sum = 0;
  for (float p : img->pixels) sum += p;
  EXPECT_DOUBLE_EQ(sum, 1.5 - 0.25 + 2);
  for (const Src& s : sky) EXPECT_EQ(img->pixels[std::size_t(s.y) * kN + std::size_t(s.x)], float(s.flux));

  // The observation's phase centre: the same passes, a tenth of a pixel away does not.
  auto obs = std::make_shared<Observation>();
  obs->ra_rad = 5.9, obs->dec_rad = -0.45, obs->origin = "test";
  EXPECT_EQ(read_image_error(path, obs), "");
  obs->dec_rad += 0.1 * kCellArcsec * kArcsec;
  const std::string e = read_image_error(path, obs);
  EXPECT_NE(e.find("file " + path + ", HDU 1: CRVAL1, CRVAL2 put the image's phase centre"), std::string::npos) << e;
  EXPECT_NE(e.find(", 10 arcsec from the observation's"), std::string::npos) << e;
}

TEST_F(Predict, ReadImageNamesTheFileAndKeywordOfEveryHeaderItCannotUse) {
  const std::string good = (dir / "good.fits").string();
  write_model(good, 64, 10 * kArcsec, 1, 0.5, {{1, 1, 1}});
  auto edited = [&](auto edit) {
    const std::string p = (dir / "bad.fits").string();
    std::filesystem::copy_file(good, p, std::filesystem::copy_options::overwrite_existing);
    edit(p);
    return read_image_error(p);
  };
  const std::string where = "file " + (dir / "bad.fits").string() + ", HDU 1: ";
  EXPECT_EQ(edited([&](const std::string& p) { edit_key(p, "CTYPE1", std::string("RA---TAN")); }),
            where + "CTYPE1 is 'RA---TAN', expected 'RA---SIN'");
  EXPECT_EQ(edited([&](const std::string& p) { edit_key(p, "CTYPE2", std::string("GLAT-SIN")); }),
            where + "CTYPE2 is 'GLAT-SIN', expected 'DEC--SIN'");
  EXPECT_EQ(edited([&](const std::string& p) { edit_key(p, "CRPIX1", 32.0); }),
            where + "CRPIX1 is 32, expected 33 (the phase centre at pixel N/2 + 1 of 64)");
  EXPECT_EQ(edited([&](const std::string& p) { edit_key(p, "CRPIX2", 33.5); }),
            where + "CRPIX2 is 33.5, expected 33 (the phase centre at pixel N/2 + 1 of 64)");
  EXPECT_EQ(edited([&](const std::string& p) { edit_key(p, "CDELT1", 10.0 / 3600); }),
            where + "CDELT1 is 0.00277777777778, expected -CDELT2 = -0.00277777777778 (square pixels, RA increasing "
                    "to the left)");
  EXPECT_EQ(edited([&](const std::string& p) { edit_key(p, "CROTA2", 5.0); }),
            where + "CROTA2 is 5: a rotated image cannot be a model");
  EXPECT_EQ(edited([&](const std::string& p) { edit_key(p, "CUNIT1", std::string("rad")); }),
            where + "CUNIT1 is 'rad', expected 'deg'");
  EXPECT_EQ(edited([&](const std::string& p) {
              fitsfile* f = nullptr;
              int status = 0;
              fits_open_file(&f, p.c_str(), READWRITE, &status);
              fits_delete_key(f, "CDELT2", &status);
              fits_close_file(f, &status);
            }),
            where + "CDELT2 is missing");
  EXPECT_EQ(edited([&](const std::string& p) {
              fitsfile* f = nullptr;
              int status = 0;
              float nan = NAN;
              long first[4] = {7, 9, 1, 1};
              fits_open_file(&f, p.c_str(), READWRITE, &status);
              fits_write_pix(f, TFLOAT, first, 1, &nan, &status);
              fits_close_file(f, &status);
            }),
            where + "pixel (7, 9) (FITS, 1-based) is undefined (NaN): a model needs a finite value in every pixel");
  const std::string wide = (dir / "wide.fits").string();
  write_model(wide, 32, 10 * kArcsec, 1, 0.5, {}, 64);
  EXPECT_EQ(read_image_error(wide), "file " + wide + ", HDU 1: NAXIS1, NAXIS2 are 64 and 32: a model image must be square");
  EXPECT_EQ(read_image_error(good), "");
}

// ---------------------------------------------------------------- vis.subtract

TEST(Subtract, ResidualIsDataMinusModelWithEveryOtherArrayKept) {
  for (std::uint64_t seed : seeds(5)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g;
    const std::size_t n = 1000 + rng() % 5000;
    auto data = std::make_shared<VisBlock>();
    data->index = 7;
    data->uu = Array<float>::host(n), data->vv = Array<float>::host(n), data->ww = Array<float>::host(n);
    data->weight = Array<float>::host(n), data->vis = Array<cfloat>::host(n);
    for (std::size_t k = 0; k < n; ++k) data->vis[k] = {g(rng), g(rng)};
    for (std::size_t k = 0; k < n; ++k) data->uu[k] = g(rng), data->vv[k] = g(rng), data->ww[k] = g(rng), data->weight[k] = 1;
    auto model = std::make_shared<VisBlock>(*data);
    model->vis = Array<cfloat>::host(n);
    for (std::size_t k = 0; k < n; ++k) model->vis[k] = {g(rng), g(rng)};
    StageHarness h(vis_subtract::spec(), "cpu");
    h.process({{"data", data}, {"model", model}});
    auto r = h.output<VisBlock>("vis");
    ASSERT_EQ(r->size(), n);
    EXPECT_EQ(r->uu.data(), data->uu.data());  // shared, not copied
    EXPECT_EQ(r->weight.data(), data->weight.data());
    for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(r->vis[k], data->vis[k] - model->vis[k]) << k;

    auto moved = std::make_shared<VisBlock>(*model);
    moved->ww = Array<float>::host(n);
    std::copy(data->ww.begin(), data->ww.end(), moved->ww.begin());
    moved->ww[n / 2] += 1;
    StageHarness h2(vis_subtract::spec(), "cpu");
    try {
      h2.process({{"data", data}, {"model", moved}});
      ADD_FAILURE() << "expected an InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("vis.subtract: block 7: visibility " + std::to_string(n / 2) + " has ww"),
                std::string::npos)
          << e.what();
    }
  }
}

// ---------------------------------------------------------------- io.write_ms into a column

// pipelines/predict.yaml into a copy of a simulated set: MODEL_DATA against the DFT of the
// model's pixels; every file of the set but table.dat and table.lock the same bytes (the column
// is added in files of its own).
TEST_F(Predict, PredictPipelineWritesModelDataThatMatchesADirectDft) {
  for (std::uint64_t seed : seeds(11)) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (UVFLOW_TEST_SEED replays it)");
    const std::string ms = simulate_ms("p" + std::to_string(seed) + ".ms", {{64, 64, 1}});
    const TestMs before = read_test_ms(ms);
    const auto files = snapshot(ms);
    const std::vector<Src> sky = random_sky(seed, 6);
    const std::string model = (dir / "model.fits").string();
    const double cell = kCellArcsec * kArcsec;
    write_model(model, kN, cell, before.fields[0].ra_rad, before.fields[0].dec_rad, sky);
    predict(ms, model);

    const TestMs after = read_test_ms(ms);
    const std::vector<std::complex<float>> got = read_column(ms, "MODEL_DATA");
    const std::size_t nchan = after.chan_freq_hz.size(), ncorr = after.correlations.size();
    ASSERT_EQ(ncorr, 4u);
    ASSERT_EQ(got.size(), after.rows.size() * nchan * ncorr);
    double err = 0, norm = 0;
    for (std::size_t r = 0; r < after.rows.size(); ++r)
      for (std::size_t c = 0; c < nchan; ++c) {
        const double* uvw = after.rows[r].uvw;
        const double per_m = after.chan_freq_hz[c] / kC;
        cdouble dft = 0;
        for (const Src& s : sky) {
          const double l = (kN / 2 - s.x) * cell, m = (s.y - kN / 2) * cell, n = std::sqrt(1 - l * l - m * m);
          dft += s.flux * std::exp(cdouble(0, 2 * std::numbers::pi * per_m * (uvw[0] * l + uvw[1] * m + uvw[2] * (n - 1))));
        }
        const std::complex<float>* cellv = &got[(r * nchan + c) * ncorr];
        ASSERT_EQ(cellv[0], cellv[3]) << "XX and YY, row " << r;
        ASSERT_EQ(cellv[1], std::complex<float>(0)) << "XY, row " << r;
        ASSERT_EQ(cellv[2], std::complex<float>(0)) << "YX, row " << r;
        err += std::norm(cdouble(cellv[0]) - dft);
        norm += std::norm(dft);
      }
    const double rel = std::sqrt(err / norm);
    RecordProperty("relative_rms", std::to_string(rel));
    std::printf("MODEL_DATA against the DFT: relative RMS %.3g\n", rel);
    // The bound. Measured 6.1e-4 to 8.4e-4 over 10 fresh seeds with predict.yaml's padding 2
    // and 512 w-planes (with padding 1.5 and 128 planes: 0.9e-3 to 1.9e-3).
    EXPECT_LT(rel, 2e-3);
    EXPECT_GT(norm, 0);

    // Everything else: the same bytes, so the same rows.
    for (auto& [name, st] : files) {
      if (name == "table.dat" || name == "table.lock") continue;
      std::ifstream f(std::filesystem::path(ms) / name, std::ios::binary);
      std::ostringstream s;
      s << f.rdbuf();
      EXPECT_TRUE(s.str() == st.bytes) << name << " changed";
    }
    ASSERT_EQ(after.rows.size(), before.rows.size());
    for (std::size_t r = 0; r < before.rows.size(); ++r) ASSERT_EQ(after.rows[r].data, before.rows[r].data) << r;
  }
  for (auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.ends_with(".ms") || name == "model.fits" || name == "p.yaml" || name == "report.json")
        << "left behind: " << name;
  }
}

// io.read_ms -> io.write_ms column MODEL_DATA on a hand-made set whose MODEL_DATA exists (in the
// storage manager DATA and every other column share): each visibility goes back to its row and
// channel (one channel of three selected, rows out of time order, flagged cells skipped and keeping
// their old value); no other column changes.
TEST_F(Predict, ColumnWritesMatchRowsByTimeAndAntennasAndChannelsByFrequency) {
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<float> g;
  TestMs t;
  t.chan_freq_hz = {1.0e8, 1.1e8, 1.2e8};
  t.extra_data_columns = {"MODEL_DATA"};
  const double times[] = {30, 10, 20};
  for (double time : times)
    for (int a1 = 0; a1 < 4; ++a1)
      for (int a2 = a1 + 1; a2 < 4; ++a2) {
        MsRow r;
        r.time = 4.9e9 + time;
        r.antenna1 = a1, r.antenna2 = a2;
        r.uvw[0] = g(rng) * 100, r.uvw[1] = g(rng) * 100, r.uvw[2] = g(rng) * 10;
        for (int k = 0; k < 6; ++k) r.data.push_back({g(rng), g(rng)}), r.flag.push_back(0);
        r.weight = {1, 1};
        t.rows.push_back(r);
      }
  t.rows[4].flag[2] = 1;  // channel 1, XX: the visibility is dropped
  const std::string ms = (dir / "h.ms").string();
  write_test_ms(ms, t);
  const std::vector<std::complex<float>> old_model = read_column(ms, "MODEL_DATA");
  run("schema: uvflow/1\nstages:\n  - {id: vis, type: io.read_ms, params: {path: " + ms +
      ", channels: \"1\", rows_per_block: 4}}\n  - {id: ms, type: io.write_ms, params: {path: " + ms +
      ", column: MODEL_DATA}, in: {info: vis, vis: vis}}\n");
  const TestMs after = read_test_ms(ms);
  const std::vector<std::complex<float>> model = read_column(ms, "MODEL_DATA");
  ASSERT_EQ(model.size(), t.rows.size() * 6);
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    EXPECT_EQ(after.rows[r].data, t.rows[r].data) << r;
    EXPECT_EQ(after.rows[r].flag, t.rows[r].flag) << r;
    EXPECT_EQ(after.rows[r].time, t.rows[r].time) << r;
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t p = 0; p < 2; ++p) {
        const std::size_t i = r * 6 + c * 2 + p;
        const bool written = c == 1 && r != 4;
        const std::complex<float> stokes_i = 0.5f * (t.rows[r].data[2] + t.rows[r].data[3]);
        EXPECT_EQ(model[i], written ? stokes_i : old_model[i]) << "row " << r << " channel " << c << " corr " << p;
      }
  }
}

TEST_F(Predict, BadInputIsAnInputErrorAndLeavesTheSetAsItWas) {
  const std::string ms = simulate_ms("bad.ms", {{64, 64, 1}}, 1);
  // A set of the same channel and antennas at other times.
  TestMs o;
  o.chan_freq_hz = read_test_ms(ms).chan_freq_hz;
  for (int a2 = 1; a2 < 4; ++a2) {
    MsRow r;
    r.time = 1e9, r.antenna1 = 0, r.antenna2 = a2, r.uvw[0] = 10.0 * a2;
    r.data = {{1, 0}, {1, 0}}, r.flag = {0, 0}, r.weight = {1, 1};
    o.rows.push_back(r);
  }
  const std::string other = (dir / "other.ms").string();
  write_test_ms(other, o);
  const auto files = snapshot(ms);
  auto error = [&](const std::string& yaml) -> std::string {
    try {
      run(yaml);
    } catch (const StageError& e) {
      EXPECT_EQ(e.code(), ExitCode::input) << e.what();
      return e.reason();
    }
    return "";
  };
  auto copy_to = [&](const std::string& from, const std::string& column, const std::string& extra = "") {
    return "schema: uvflow/1\nstages:\n  - {id: vis, type: io.read_ms, params: {path: " + from +
           "}}\n  - {id: ms, type: io.write_ms, params: {path: " + ms + ", column: " + column + extra +
           "}, in: {info: vis, vis: vis}}\n";
  };
  EXPECT_EQ(error(copy_to(ms, "CORRECTED_DATA")),
            "prepare: " + ms + ": the main table has no column CORRECTED_DATA; set add_column: true to add it (other "
                               "columns are left as they are)");
  EXPECT_EQ(error(copy_to(ms, "FLAG")),
            "prepare: " + ms + ": column FLAG holds Bool arrays, not complex arrays: it cannot hold visibilities");
  // other.ms has other times: its rows are not this set's.
  const std::string unmatched = error(copy_to(other, "MODEL_DATA", ", add_column: true"));
  EXPECT_NE(unmatched.find("io.write_ms: block 0: visibility 0 (antennas 0, 1, TIME 1000000000.000000)"),
            std::string::npos)
      << unmatched;
  EXPECT_NE(unmatched.find("has no row of that time and antenna pair in " + ms), std::string::npos) << unmatched;
  expect_untouched(files, ms);

  // Read-only (even for root: no write permission at all).
  const auto table_dat = std::filesystem::path(ms) / "table.dat";
  const auto mode = std::filesystem::status(table_dat).permissions();
  std::filesystem::permissions(table_dat, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                              std::filesystem::perms::others_read);
  EXPECT_EQ(error(copy_to(ms, "MODEL_DATA", ", add_column: true")),
            "prepare: " + ms + " is read-only (no write permission on " + table_dat.string() +
                "): cannot write column MODEL_DATA");
  std::filesystem::permissions(table_dat, mode);

  // A stage that fails elsewhere: the set is not replaced.
  EXPECT_THROW(run(copy_to(ms, "MODEL_DATA", ", add_column: true") +
                   "  - {id: src, type: test.source, params: {n: 20, delay_ms: 20}}\n"
                   "  - {id: boom, type: test.fail, params: {at: 10}, in: {in: src}}\n"),
               StageError);
  expect_untouched(files, ms);
  for (auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "bad.ms" || name == "other.ms" || name == "p.yaml") << "left behind: " << name;
  }
}

// Data - model in a pipeline: the residual of a sky the model holds exactly is the prediction's
// error, and CORRECTED_DATA = DATA - MODEL_DATA cell by cell.
TEST_F(Predict, SubtractPipelineLeavesTheResidualInCorrectedData) {
  const std::vector<Src> sky = random_sky(fresh_seed(), 5);
  const std::string ms = simulate_ms("s.ms", sky);
  const TestMs t = read_test_ms(ms);
  const std::string model = (dir / "model.fits").string();
  write_model(model, kN, kCellArcsec * kArcsec, t.fields[0].ra_rad, t.fields[0].dec_rad, sky);
  predict(ms, model);
  std::string yaml;
  {
    std::ifstream f(std::filesystem::path(UVFLOW_TEST_SOURCE_DIR) / "pipelines/predict.yaml");
    std::ostringstream s;
    s << f.rdbuf();
    yaml = s.str();
  }
  // predict.yaml with vis.subtract before the writer.
  const std::string writer = "    in: {info: vis, vis: predict}\n";
  ASSERT_NE(yaml.find(writer), std::string::npos);
  yaml.replace(yaml.find(writer), writer.size(),
               "    in: {info: vis, vis: residual}\n  - {id: residual, type: vis.subtract, in: {data: vis.vis, model: predict}}\n");
  run_plan(load_plan(dir.write("subtract.yaml", yaml),
                     {"vars.ms=" + ms, "vars.model=" + model, "vars.npix=" + std::to_string(kN),
                      "vars.cell_arcsec=" + std::to_string(kCellArcsec), "vars.column=CORRECTED_DATA",
                      "run.report=" + (dir / "report.json").string()},
                     reg));
  const auto m = read_column(ms, "MODEL_DATA"), c = read_column(ms, "CORRECTED_DATA");
  const TestMs after = read_test_ms(ms);
  double res = 0, data = 0;
  std::size_t i = 0;
  for (const MsRow& r : after.rows)
    for (std::size_t k = 0; k < r.data.size(); k += 4, i += 4) {
      const std::complex<float> stokes_i = 0.5f * (r.data[k] + r.data[k + 3]);
      EXPECT_NEAR(std::abs(c[i] - (stokes_i - m[i])), 0, 1e-6 * (1 + std::abs(stokes_i))) << i;
      res += std::norm(cdouble(c[i])), data += std::norm(cdouble(stokes_i));
    }
  const double rel = std::sqrt(res / data);
  std::printf("residual RMS / data RMS: %.3g\n", rel);
  EXPECT_LT(rel, 2e-3);  // the prediction's error: 5.0e-4 to 7.5e-4 over 5 fresh seeds at predict.yaml's settings
  EXPECT_GT(data, 0);
}

}  // namespace
