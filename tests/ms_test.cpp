// Measurement Sets in and out: io.write_ms against an independent casacore reader, io.read_ms
// against hand-made sets (written row by row with casacore) and a straightforward per-row
// reference of its selection rules, the simulator -> MS -> reader round trip visibility by
// visibility, every input error with its exact message, flags that never reach a grid (NaN and
// 1e30 in flagged data give the image of zeros), WSClean's dirty image of the same MS where
// WSClean is installed, output directories committed only on success, bounded memory while
// reading, and the simulator's multi-channel data, times and antenna positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <random>
#include <set>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/vis.hpp"
#include "stages/builtin.hpp"
#include "stages/io/read_ms.hpp"
#include "stages/io/simulate.hpp"
#include "stages/io/write_ms.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/ms_fixture.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_stages.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

constexpr double kC = 299792458.0;
constexpr double kDeg = std::numbers::pi / 180;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------- helpers

// A visibility stream, flattened.
struct Stream {
  std::shared_ptr<const Observation> obs;
  std::size_t blocks = 0;
  std::vector<float> uu, vv, ww, weight;
  std::vector<cfloat> vis;
  std::vector<std::int32_t> antenna1, antenna2, channel;
  std::vector<double> time;
  std::vector<std::shared_ptr<const VisBlock>> raw;
  std::size_t size() const { return vis.size(); }
};

Stream collect(StageHarness& h) {
  Stream s;
  s.obs = h.output<VisSetInfo>("info")->obs;
  for (auto& p : h.outputs("vis")) {
    auto b = std::dynamic_pointer_cast<const VisBlock>(p);
    s.raw.push_back(b);
    s.blocks++;
    auto add = [](auto& v, const auto& a) { v.insert(v.end(), a.begin(), a.end()); };
    add(s.uu, b->uu);
    add(s.vv, b->vv);
    add(s.ww, b->ww);
    add(s.weight, b->weight);
    add(s.vis, b->vis);
    add(s.antenna1, b->antenna1);
    add(s.antenna2, b->antenna2);
    add(s.channel, b->channel);
    add(s.time, b->time);
  }
  return s;
}

using ParamMap = std::map<std::string, ParamValue>;

Stream simulate(const ParamMap& params) {
  StageHarness h(io_simulate::spec(), "cpu", params);
  h.run_source();
  return collect(h);
}

Stream read_ms(const std::string& path, ParamMap params = {}) {
  params["path"] = path;
  StageHarness h(io_read_ms::spec(), "cpu", params);
  h.run_source();
  h.finish();
  return collect(h);
}

// Writes the simulated stream with io.write_ms (through the harness, as a run would).
void write_ms(const Stream& sim, const std::string& path, ParamMap params = {}) {
  params["path"] = path;
  StageHarness h(io_write_ms::spec(), "cpu", params);
  auto info = std::make_shared<VisSetInfo>();
  info->obs = sim.obs;
  h.set_input("info", info);
  for (auto& b : sim.raw) h.process({{"vis", b}});
  h.finish();
  h.commit_outputs();
}

std::vector<Record> sky(std::initializer_list<std::array<double, 3>> sources) {
  std::vector<Record> r;
  for (auto& s : sources) r.push_back({{"l_deg", s[0]}, {"m_deg", s[1]}, {"flux_jy", s[2]}});
  return r;
}

// The InputError message of preparing io.read_ms with these parameters ("" if none).
std::string read_error(const std::string& path, ParamMap params = {}) {
  params["path"] = path;
  try {
    StageHarness h(io_read_ms::spec(), "cpu", params);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Drops VisBlocks, counting visibilities: a pipeline consumer that keeps nothing.
std::atomic<std::int64_t> g_dropped{0};
class DropVis : public Stage {
 public:
  void process(Context& ctx) override { g_dropped += std::int64_t(ctx.in<VisBlock>("vis")->size()); }
};

struct Pipelines : ::testing::Test {
  Registry reg;
  TempDir dir;
  void SetUp() override {
    register_builtin_stages(reg);
    register_test_stages(reg);
    StageSpec s{"test.drop_vis", "drop visibility blocks"};
    s.inputs = {{"vis", kVisBlock, Arity::stream, Residency::host, "blocks"}};
    s.backends = {{"cpu", [] { return std::make_unique<DropVis>(); }}};
    reg.add(s);
  }
  Plan plan(const std::string& yaml, const std::vector<std::string>& sets = {}) {
    return load_plan(dir.write("p.yaml", yaml), sets, reg);
  }
  // A 128 x 128 dirty image of the MS (400 arcsec cells) through a CPU imaging chain, read back:
  // the tiled gridder's chain, or grid.serial, whose sums (so images) are the same bit for bit
  // from run to run.
  FitsImage image(const std::string& ms, const std::string& fits, bool serial = false) {
    const std::string grid = serial ? "  - {id: grid, type: grid.serial, in: {vis: vis, kernels: kernels}}\n"
                                    : "  - {id: sort, type: uvw.w_sort, in: {vis: vis, kernels: kernels}}\n"
                                      "  - {id: box, type: uvw.bounding_box, in: {vis: sort}}\n"
                                      "  - {id: count, type: tiles.count, params: {tile_u: 32, tile_v: 32}, in: {vis: sort, box: box}}\n"
                                      "  - {id: buckets, type: tiles.bucket_sort, in: {vis: sort, counts: count}}\n"
                                      "  - {id: grid, type: grid.tiled, in: {buckets: buckets, kernels: kernels}}\n";
    const std::string yaml = "schema: uvflow/1\nstages:\n"
                             "  - {id: vis, type: io.read_ms, params: {path: " + ms + "}}\n"
                             "  - {id: kernels, type: kernels.wproj, params: {image_size: 128, cell_arcsec: 400, "
                             "cache_dir: \"\"}, in: {info: vis}}\n" + grid +
                             "  - {id: image, type: fft.grid_to_image, in: {grid: grid}}\n"
                             "  - {id: corr, type: image.grid_correct, in: {image: image, kernels: kernels}}\n"
                             "  - {id: fits, type: io.write_fits, params: {path: " + fits + "}, in: {image: corr}}\n";
    run_plan(plan(yaml));
    return read_fits_image(fits);
  }
};

// ---------------------------------------------------------------- the reference reader

// What io.read_ms must emit for a hand-made MS, rule by rule, one row and channel at a time:
// Stokes parameters as WSClean forms them, weight 4 min(w_a, w_b) (a single correlation keeps
// its own), flagged (either correlation, or FLAG_ROW) and non-finite visibilities dropped.
struct Expect {
  float uu, vv, ww, weight;
  cfloat vis;
  int a1, a2, channel;
  double time;
};

std::vector<Expect> reference(const TestMs& t, int field, const std::vector<int>& channels, const std::string& stokes,
                              bool drop_non_finite = true) {
  auto at = [&](const std::string& c) {
    return int(std::find(t.correlations.begin(), t.correlations.end(), c) - t.correlations.begin());
  };
  const int n = int(t.correlations.size());
  const cfloat i(0, 1);
  struct Term { int a, b; cfloat ca, cb; };
  Term term{at(stokes), -1, 1, 0};
  const bool linear = at("XX") < n || at("XY") < n;
  if (stokes == "I") term = linear ? Term{at("XX"), at("YY"), 0.5f, 0.5f} : Term{at("RR"), at("LL"), 0.5f, 0.5f};
  if (stokes == "Q") term = linear ? Term{at("XX"), at("YY"), 0.5f, -0.5f} : Term{at("RL"), at("LR"), 0.5f, 0.5f};
  if (stokes == "U") term = linear ? Term{at("XY"), at("YX"), 0.5f, 0.5f} : Term{at("RL"), at("LR"), -0.5f * i, 0.5f * i};
  if (stokes == "V") term = linear ? Term{at("XY"), at("YX"), -0.5f * i, 0.5f * i} : Term{at("RR"), at("LL"), 0.5f, -0.5f};
  std::vector<Expect> out;
  for (const MsRow& r : t.rows) {
    if (r.field != field || r.flag_row) continue;
    for (std::size_t j = 0; j < channels.size(); ++j) {
      const int c = channels[j];
      auto cell = [&](int p) { return std::size_t(c * n + p); };
      auto usable = [&](int p) {
        const cfloat v = r.data[cell(p)];
        return !r.flag[cell(p)] && (!drop_non_finite || (std::isfinite(v.real()) && std::isfinite(v.imag())));
      };
      auto w = [&](int p) { return t.weight_spectrum ? r.weight_spectrum[cell(p)] : r.weight[std::size_t(p)]; };
      if (!usable(term.a) || (term.b >= 0 && !usable(term.b))) continue;
      const double s = t.chan_freq_hz[std::size_t(c)] / kC;
      Expect e;
      e.uu = float(r.uvw[0] * s);
      e.vv = float(r.uvw[1] * s);
      e.ww = float(r.uvw[2] * s);
      e.vis = term.b < 0 ? r.data[cell(term.a)] : term.ca * r.data[cell(term.a)] + term.cb * r.data[cell(term.b)];
      e.weight = term.b < 0 ? w(term.a) : 4 * std::min(w(term.a), w(term.b));
      e.a1 = r.antenna1;
      e.a2 = r.antenna2;
      e.channel = int(j);
      e.time = r.time;
      out.push_back(e);
    }
  }
  return out;
}

void expect_stream(const Stream& got, const std::vector<Expect>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    SCOPED_TRACE("visibility " + std::to_string(k));
    EXPECT_EQ(got.uu[k], want[k].uu);
    EXPECT_EQ(got.vv[k], want[k].vv);
    EXPECT_EQ(got.ww[k], want[k].ww);
    EXPECT_NEAR(got.vis[k].real(), want[k].vis.real(), 1e-6f * (1 + std::abs(want[k].vis)));
    EXPECT_NEAR(got.vis[k].imag(), want[k].vis.imag(), 1e-6f * (1 + std::abs(want[k].vis)));
    EXPECT_EQ(got.weight[k], want[k].weight);
    EXPECT_EQ(got.antenna1[k], want[k].a1);
    EXPECT_EQ(got.antenna2[k], want[k].a2);
    EXPECT_EQ(got.channel[k], want[k].channel);
    EXPECT_EQ(got.time[k], want[k].time);
  }
}

// The info statistics must be exactly those of the unflagged visibilities (`over`, what the
// blocks carry when no unflagged value is non-finite).
void expect_statistics(const Stream& s, const std::vector<Expect>& over) {
  double max_w = 0, min_w = 1e300, sum_w2 = 0, max_uv = 0;
  for (const Expect& e : over) {
    const double w = std::abs(double(e.ww));
    max_w = std::max(max_w, w);
    min_w = std::min(min_w, w);
    sum_w2 += w * w;
    max_uv = std::max({max_uv, std::abs(double(e.uu)), std::abs(double(e.vv))});
  }
  EXPECT_EQ(s.obs->total_visibilities, std::int64_t(over.size()));
  EXPECT_EQ(s.obs->total_blocks, std::int64_t(s.blocks));
  EXPECT_EQ(s.obs->max_abs_w, max_w);
  EXPECT_EQ(s.obs->min_abs_w, min_w);
  EXPECT_NEAR(s.obs->rms_abs_w, std::sqrt(sum_w2 / double(over.size())), 1e-12 * max_w);
  EXPECT_EQ(s.obs->max_abs_uv, max_uv);
}

void expect_statistics(const Stream& s) {
  std::vector<Expect> all;
  for (std::size_t k = 0; k < s.size(); ++k) all.push_back({s.uu[k], s.vv[k], s.ww[k]});
  expect_statistics(s, all);
}

// A hand-made MS: random data, weights and uvw; `flag_p` of the cells flagged.
TestMs random_ms(std::mt19937& rng, std::vector<std::string> corr, int nchan, int nrows, double flag_p, bool spectrum) {
  std::uniform_real_distribution<double> uni(0, 1);
  TestMs t;
  t.correlations = std::move(corr);
  t.chan_freq_hz.clear();
  for (int c = 0; c < nchan; ++c) t.chan_freq_hz.push_back(1.2e8 + 1e6 * c);
  t.fields = {{"A", 30 * kDeg, -20 * kDeg}, {"B", 45 * kDeg, -30 * kDeg}};
  t.weight_spectrum = spectrum;
  const int ncorr = int(t.correlations.size());
  for (int r = 0; r < nrows; ++r) {
    MsRow row;
    row.time = 5e9 + 10 * (r / 3);
    row.antenna1 = int(rng() % 3);
    row.antenna2 = row.antenna1 + 1;
    row.field = int(rng() % 2);
    for (double& x : row.uvw) x = 2000 * (uni(rng) - 0.5);
    row.flag_row = uni(rng) < flag_p / 2;
    for (int k = 0; k < nchan * ncorr; ++k) {
      row.data.push_back(cfloat(float(uni(rng) - 0.5), float(uni(rng) - 0.5)));
      row.flag.push_back(uni(rng) < flag_p);
      row.weight_spectrum.push_back(float(0.1 + uni(rng)));
    }
    for (int p = 0; p < ncorr; ++p) row.weight.push_back(float(0.1 + uni(rng)));
    // Non-finite values: dropped like flagged ones.
    if (uni(rng) < 0.2) row.data[rng() % row.data.size()] = cfloat(kNaN, 0);
    if (uni(rng) < 0.1) row.data[rng() % row.data.size()] = cfloat(0, std::numeric_limits<float>::infinity());
    if (!spectrum) row.weight_spectrum.clear();
    t.rows.push_back(std::move(row));
  }
  return t;
}

// ---------------------------------------------------------------- round trip through the simulator

void round_trip(const ParamMap& sim_params, const ParamMap& write_params, const ParamMap& read_params) {
  TempDir dir;
  const std::string path = (dir / "sim.ms").string();
  const Stream sim = simulate(sim_params);
  write_ms(sim, path, write_params);
  const std::size_t nchan = sim.obs->freq_hz.size();

  // What io.write_ms wrote, read independently.
  const TestMs ms = read_test_ms(path);
  const std::string corr = write_params.count("correlations") ? std::get<std::string>(write_params.at("correlations"))
                                                              : "linear4";
  const std::map<std::string, std::vector<std::string>> names = {{"linear4", {"XX", "XY", "YX", "YY"}},
                                                                 {"linear2", {"XX", "YY"}},
                                                                 {"circular4", {"RR", "RL", "LR", "LL"}},
                                                                 {"circular2", {"RR", "LL"}}};
  EXPECT_EQ(ms.correlations, names.at(corr));
  EXPECT_EQ(ms.chan_freq_hz, sim.obs->freq_hz);
  EXPECT_EQ(ms.chan_width_hz, sim.obs->channel_width_hz);
  ASSERT_EQ(ms.fields.size(), 1u);
  EXPECT_EQ(ms.fields[0].ra_rad, sim.obs->ra_rad);
  EXPECT_EQ(ms.fields[0].dec_rad, sim.obs->dec_rad);
  EXPECT_EQ(ms.telescope, sim.obs->telescope);
  ASSERT_EQ(ms.antennas.size(), sim.obs->antennas.size());
  for (std::size_t a = 0; a < ms.antennas.size(); ++a) {
    EXPECT_EQ(ms.antennas[a].name, sim.obs->antennas[a].name);
    EXPECT_EQ(ms.antennas[a].position[0], sim.obs->antennas[a].x);
    EXPECT_EQ(ms.antennas[a].position[2], sim.obs->antennas[a].z);
  }
  EXPECT_EQ(ms.interval_s, sim.obs->integration_s);
  const bool spectrum = !write_params.count("weight_spectrum") || std::get<bool>(write_params.at("weight_spectrum"));
  EXPECT_EQ(ms.weight_spectrum, spectrum);
  // One row per dump and baseline, holding every channel, in the simulator's order.
  ASSERT_EQ(ms.rows.size() * nchan, sim.size());
  const std::size_t ncorr = ms.correlations.size();
  std::size_t flagged = 0, rows_flagged = 0;
  std::vector<bool> dropped(sim.size());
  for (std::size_t r = 0; r < ms.rows.size(); ++r) {
    const MsRow& row = ms.rows[r];
    const std::size_t k0 = r * nchan;
    ASSERT_EQ(row.time, sim.time[k0]);
    ASSERT_EQ(row.antenna1, sim.antenna1[k0]);
    ASSERT_EQ(row.antenna2, sim.antenna2[k0]);
    const double metres = kC / sim.obs->freq_hz[0];
    EXPECT_EQ(row.uvw[0], sim.uu[k0] * metres);
    EXPECT_EQ(row.uvw[2], sim.ww[k0] * metres);
    rows_flagged += row.flag_row;
    for (std::size_t c = 0; c < nchan; ++c) {
      const std::size_t k = k0 + c;
      for (std::size_t p = 0; p < ncorr; ++p) {
        const bool parallel = ms.correlations[p][0] == ms.correlations[p][1];
        ASSERT_EQ(row.data[c * ncorr + p], parallel ? sim.vis[k] : cfloat(0));  // XX = YY = I
        ASSERT_EQ(row.flag[c * ncorr + p], row.flag[c * ncorr]);  // all correlations alike
        if (spectrum) {
          ASSERT_EQ(row.weight_spectrum[c * ncorr + p], sim.weight[k] / 4);
        }
      }
      if (row.flag_row) {
        ASSERT_TRUE(row.flag[c * ncorr]);
      }
      dropped[k] = row.flag[c * ncorr];
      flagged += dropped[k];
    }
  }
  // The random flags take the fractions asked for (5 sigma of the binomial; a flagged row flags
  // nchan visibilities together, which widens the spread by up to sqrt(nchan)).
  auto expect_fraction = [&](double got, double p, double n) {
    EXPECT_NEAR(got / n, p, 5 * std::sqrt(p * (1 - p) / n * double(nchan)) + 1e-9);
  };
  const double frac = write_params.count("flag_fraction") ? std::get<double>(write_params.at("flag_fraction")) : 0;
  const double row_frac = write_params.count("flag_row_fraction") ? std::get<double>(write_params.at("flag_row_fraction")) : 0;
  expect_fraction(double(rows_flagged), row_frac, double(ms.rows.size()));
  expect_fraction(double(flagged), row_frac + (1 - row_frac) * frac, double(sim.size()));

  // io.read_ms gives back every unflagged visibility of the simulator, in order.
  const Stream got = read_ms(path, read_params);
  std::size_t g = 0;
  for (std::size_t k = 0; k < sim.size(); ++k) {
    if (dropped[k]) continue;
    ASSERT_LT(g, got.size());
    SCOPED_TRACE("visibility " + std::to_string(k));
    ASSERT_EQ(got.time[g], sim.time[k]);
    ASSERT_EQ(got.antenna1[g], sim.antenna1[k]);
    ASSERT_EQ(got.antenna2[g], sim.antenna2[k]);
    ASSERT_EQ(got.channel[g], sim.channel[k]);
    ASSERT_EQ(got.vis[g], sim.vis[k]);
    ASSERT_EQ(got.weight[g], sim.weight[k]);
    // uvw went to metres at the row's first channel and back at this one: within 2 float ulps.
    for (auto [a, b] : {std::pair{got.uu[g], sim.uu[k]}, {got.vv[g], sim.vv[k]}, {got.ww[g], sim.ww[k]}})
      ASSERT_NEAR(a, b, 2.5e-7 * std::abs(b) + 1e-12);
    ++g;
  }
  EXPECT_EQ(g, got.size());
  expect_statistics(got);
  EXPECT_EQ(got.obs->freq_hz, sim.obs->freq_hz);
  EXPECT_EQ(got.obs->ref_freq_hz, sim.obs->ref_freq_hz);
  EXPECT_EQ(got.obs->ra_rad, sim.obs->ra_rad);
  EXPECT_EQ(got.obs->dec_rad, sim.obs->dec_rad);
  EXPECT_EQ(got.obs->telescope, "SKA1-Low");
  EXPECT_EQ(got.obs->date_obs, sim.obs->date_obs);
  EXPECT_EQ(got.obs->integration_s, sim.obs->integration_s);
  EXPECT_EQ(got.obs->channel_width_hz, sim.obs->channel_width_hz);
  EXPECT_EQ(got.obs->antennas.size(), sim.obs->antennas.size());
}

}  // namespace

TEST(WriteReadMs, SimulatorRoundTripsVisibilityByVisibility) {
  round_trip({{"preset", std::string("tiny")}, {"channels", std::int64_t(3)}, {"dumps_per_block", std::int64_t(3)},
              {"noise_jy", 0.2}, {"sky", sky({{1, 0.5, 1}, {-2, 1, 2}})}},
             {{"flag_fraction", 0.1}, {"flag_row_fraction", 0.05}, {"flag_seed", std::int64_t(7)}},
             {{"rows_per_block", std::int64_t(1000)}});
}

TEST(WriteReadMs, SimulatorRoundTripsOnFreshRandomSettings) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(0, 1);
  const char* corr[] = {"linear4", "linear2", "circular4", "circular2"};
  round_trip({{"preset", std::string("tiny")},
              {"stations", std::int64_t(10 + rng() % 30)},
              {"channels", std::int64_t(1 + rng() % 4)},
              {"channel_width_hz", 1e5 + 2e6 * uni(rng)},
              {"freq_hz", 60e6 + 200e6 * uni(rng)},
              {"dumps_per_block", std::int64_t(1 + rng() % 4)},
              {"seed", std::int64_t(rng() % 1000)},
              {"noise_jy", uni(rng)},
              {"sky", sky({{4 * uni(rng) - 2, 4 * uni(rng) - 2, 1 + uni(rng)}})}},
             {{"correlations", std::string(corr[rng() % 4])},
              {"weight_spectrum", bool(rng() % 2)},
              {"flag_fraction", 0.3 * uni(rng)},
              {"flag_row_fraction", 0.2 * uni(rng)},
              {"flag_seed", std::int64_t(rng() % 1000)}},
             {{"rows_per_block", std::int64_t(rng() % 3000)}});
}

// A Measurement Set that does not fit: casacore's message reaches the user naming the user's path,
// not the run's temporary copy, and the temporaries are removed.
TEST(WriteMs, FullDiskNamesTheUsersPath) {
  test::TempDir dir;
  test::FullDisk disk(dir / "small");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  const std::string path = (disk.at / "big.ms").string();
  const Stream sim = simulate({{"preset", std::string("tiny")}, {"channels", std::int64_t(4)}});
  std::string error;
  try {
    write_ms(sim, path);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_FALSE(error.empty()) << "a Measurement Set larger than 64 KiB was written";
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_EQ(error.find(".tmp"), std::string::npos) << error;
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_TRUE(std::filesystem::is_empty(disk.at)) << "the temporaries are removed";
}

// ---------------------------------------------------------------- hand-made Measurement Sets

TEST(ReadMs, LinearAndCircularCorrelationsMakeStokesAsWSCleanDoes) {
  TempDir dir;
  std::mt19937 rng(11);
  struct Case {
    std::vector<std::string> corr;
    std::vector<std::string> stokes;
  };
  const std::vector<Case> cases = {
      {{"XX", "XY", "YX", "YY"}, {"I", "Q", "U", "V", "XX", "XY", "YX", "YY"}},
      {{"XX", "YY"}, {"I", "Q", "XX", "YY"}},
      {{"YY", "XX"}, {"I", "Q"}},  // table order reversed: the reader swaps
      {{"RR", "RL", "LR", "LL"}, {"I", "Q", "U", "V", "RR", "RL", "LR", "LL"}},
      {{"LL", "RR"}, {"I", "V", "LL", "RR"}},
  };
  for (std::size_t k = 0; k < cases.size(); ++k)
    for (bool spectrum : {false, true}) {
      const std::string path = (dir / ("case" + std::to_string(k) + (spectrum ? "s" : "w") + ".ms")).string();
      const TestMs t = random_ms(rng, cases[k].corr, 3, 30, 0.2, spectrum);
      write_test_ms(path, t);
      for (const std::string& stokes : cases[k].stokes)
        for (int field : {0, 1}) {
          SCOPED_TRACE(path + " stokes " + stokes + " field " + std::to_string(field));
          const Stream got = read_ms(path, {{"stokes", stokes}, {"field", std::int64_t(field)}, {"rows_per_block", std::int64_t(7)}});
          expect_stream(got, reference(t, field, {0, 1, 2}, stokes));
          expect_statistics(got, reference(t, field, {0, 1, 2}, stokes, false));
          EXPECT_EQ(got.obs->ra_rad, t.fields[std::size_t(field)].ra_rad);
          EXPECT_EQ(got.obs->dec_rad, t.fields[std::size_t(field)].dec_rad);
          EXPECT_EQ(got.obs->telescope, "TEST");
        }
    }
}

TEST(ReadMs, ChannelSelectionScalesUvwPerChannel) {
  TempDir dir;
  std::mt19937 rng(5);
  const std::string path = (dir / "chan.ms").string();
  const TestMs t = random_ms(rng, {"XX", "YY"}, 6, 25, 0.1, true);
  write_test_ms(path, t);
  const Stream got = read_ms(path, {{"channels", std::string("1, 3-4")}, {"field", std::int64_t(1)}});
  expect_stream(got, reference(t, 1, {1, 3, 4}, "I"));
  expect_statistics(got, reference(t, 1, {1, 3, 4}, "I", false));
  EXPECT_EQ(got.obs->freq_hz, (std::vector<double>{t.chan_freq_hz[1], t.chan_freq_hz[3], t.chan_freq_hz[4]}));
  EXPECT_EQ(got.obs->ref_freq_hz, (t.chan_freq_hz[1] + t.chan_freq_hz[4]) / 2);
}

TEST(ReadMs, WhatItReadsWritesBackAsTheSameVisibilities) {
  // Flagged channels are missing from the blocks: io.write_ms writes them flagged, io.read_ms
  // drops them again.
  TempDir dir;
  std::mt19937 rng(3);
  const std::string in = (dir / "in.ms").string(), out = (dir / "out.ms").string();
  const TestMs t = random_ms(rng, {"XX", "XY", "YX", "YY"}, 5, 40, 0.2, true);
  write_test_ms(in, t);
  const ParamMap params{{"field", std::int64_t(1)}, {"channels", std::string("0,2-4")}};
  const Stream first = read_ms(in, params);
  write_ms(first, out, {{"correlations", std::string("linear2")}});
  const Stream second = read_ms(out);
  ASSERT_EQ(second.size(), first.size());
  for (std::size_t k = 0; k < first.size(); ++k) {
    ASSERT_EQ(second.vis[k], first.vis[k]);
    ASSERT_EQ(second.weight[k], first.weight[k]);
    ASSERT_EQ(second.channel[k], first.channel[k]);
    ASSERT_EQ(second.time[k], first.time[k]);
    ASSERT_EQ(second.antenna2[k], first.antenna2[k]);
    ASSERT_NEAR(second.uu[k], first.uu[k], 2.5e-7 * std::abs(first.uu[k]) + 1e-12);
  }
  EXPECT_EQ(second.obs->freq_hz, first.obs->freq_hz);
  EXPECT_EQ(second.obs->ra_rad, t.fields[1].ra_rad);
  EXPECT_EQ(second.obs->antennas.size(), t.antennas.size());
}

TEST(ReadMs, FlagRowAndFlagsDropWhatTheyFlag) {
  TempDir dir;
  const std::string path = (dir / "flags.ms").string();
  TestMs t;
  t.chan_freq_hz = {1e8, 1.1e8};
  auto row = [](double u, bool flag_row, std::vector<char> flag) {
    MsRow r;
    r.time = 5e9;
    r.uvw[0] = u;
    r.flag_row = flag_row;
    r.data = {{1, 0}, {3, 0}, {5, 0}, {7, 0}};  // [channel][XX, YY]
    r.flag = std::move(flag);
    r.weight = {2, 0.5};
    return r;
  };
  t.rows = {row(100, false, {0, 0, 0, 0}), row(200, true, {0, 0, 0, 0}), row(300, false, {0, 1, 0, 0}),
            row(400, false, {1, 1, 1, 1})};
  write_test_ms(path, t);
  const Stream i = read_ms(path);
  // Row 0 both channels; row 1 FLAG_ROW; row 2 channel 0 has YY flagged; row 3 all flagged.
  ASSERT_EQ(i.size(), 3u);
  EXPECT_EQ(i.vis, (std::vector<cfloat>{{2, 0}, {6, 0}, {6, 0}}));
  EXPECT_EQ(i.weight, (std::vector<float>{2, 2, 2}));  // 4 min(2, 0.5)
  EXPECT_EQ(i.uu[2], float(300 * 1.1e8 / kC));
  EXPECT_EQ(i.channel, (std::vector<std::int32_t>{0, 1, 1}));
  const Stream xx = read_ms(path, {{"stokes", std::string("XX")}});
  EXPECT_EQ(xx.vis, (std::vector<cfloat>{{1, 0}, {5, 0}, {1, 0}, {5, 0}}));  // YY's flag does not matter
  EXPECT_EQ(xx.weight, (std::vector<float>{2, 2, 2, 2}));
}

// The pass over UVW and the flags is made once per selection of an MS (choose: auto prepares the
// reader once per option and the run once more): a second reader of the same MS takes the first's
// observation; a rewritten MS, or another selection of it, is scanned again.
TEST(ReadMs, TheScanIsMadeOnceAndAgainWhenTheMsChanges) {
  TempDir dir;
  const std::string path = (dir / "scan.ms").string();
  TestMs t;
  auto row = [](double u) {
    MsRow r;
    r.time = 5e9;
    r.uvw[0] = u;
    r.data = {{1, 0}, {3, 0}};
    r.flag = {0, 0};
    r.weight = {1, 1};
    return r;
  };
  t.rows = {row(100), row(200)};
  write_test_ms(path, t);
  const Stream a = read_ms(path), b = read_ms(path);
  EXPECT_EQ(a.obs, b.obs);  // the same Observation: the second did not scan
  EXPECT_EQ(b.size(), 2u);
  const Stream xx = read_ms(path, {{"stokes", std::string("XX")}});
  EXPECT_NE(xx.obs, a.obs);
  std::filesystem::remove_all(path);
  t.rows.push_back(row(300));
  write_test_ms(path, t);
  const Stream c = read_ms(path);
  EXPECT_NE(c.obs, a.obs);
  EXPECT_EQ(c.obs->total_visibilities, 3);
  EXPECT_EQ(c.size(), 3u);
}

TEST(ReadMs, FreshRandomMeasurementSetsMatchTheReference) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> setups = {
      {{"XX", "XY", "YX", "YY"}, {"I", "Q", "U", "V", "XX", "XY", "YX", "YY"}},
      {{"XX", "YY"}, {"I", "Q", "XX", "YY"}},
      {{"YY", "XX"}, {"I", "Q", "YY"}},
      {{"RR", "RL", "LR", "LL"}, {"I", "Q", "U", "V", "RR", "LL"}},
      {{"RR", "LL"}, {"I", "V", "RR", "LL"}}};
  for (int trial = 0; trial < 6; ++trial) {
    const auto& [corr, stokes_list] = setups[rng() % setups.size()];
    const int nchan = 1 + int(rng() % 5);
    const std::string path = (dir / ("r" + std::to_string(trial) + ".ms")).string();
    const TestMs t = random_ms(rng, corr, nchan, 1 + int(rng() % 60), 0.3 * double(rng() % 100) / 100, rng() % 2);
    write_test_ms(path, t);
    std::vector<int> channels;
    std::string text;
    for (int c = 0; c < nchan; ++c)
      if (rng() % 2) channels.push_back(c), text += (text.empty() ? "" : ",") + std::to_string(c);
    if (channels.empty()) channels = {0}, text = "0";
    const std::string stokes = stokes_list[rng() % stokes_list.size()];
    const int field = int(rng() % 2);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": stokes " + stokes + ", channels " + text);
    const ParamMap params{{"stokes", stokes}, {"field", std::int64_t(field)}, {"channels", text},
                          {"rows_per_block", std::int64_t(rng() % 9)}};
    const auto want = reference(t, field, channels, stokes);
    if (reference(t, field, channels, stokes, false).empty()) {
      EXPECT_NE(read_error(path, params).find("nothing to read"), std::string::npos);
      continue;
    }
    const Stream got = read_ms(path, params);
    expect_stream(got, want);
    expect_statistics(got, reference(t, field, channels, stokes, false));
  }
}

// ---------------------------------------------------------------- errors

TEST(ReadMs, EveryInputErrorSaysWhatAndWhere) {
  TempDir dir;
  const std::string good = (dir / "good.ms").string(), plain = (dir / "plain").string();
  TestMs t;
  t.fields = {{"A", 30 * kDeg, -20 * kDeg}, {"B", 45 * kDeg, -30 * kDeg}};
  MsRow r;
  r.time = 5e9;
  r.data = {{1, 0}, {1, 0}};
  r.flag = {0, 0};
  r.weight = {1, 1};
  t.rows = {r};
  write_test_ms(good, t);
  std::filesystem::create_directories(plain);
  const std::string columns =
      "UVW, FLAG, FLAG_CATEGORY, WEIGHT, SIGMA, ANTENNA1, ANTENNA2, ARRAY_ID, DATA_DESC_ID, EXPOSURE, FEED1, FEED2, "
      "FIELD_ID, FLAG_ROW, INTERVAL, OBSERVATION_ID, PROCESSOR_ID, SCAN_NUMBER, STATE_ID, TIME, TIME_CENTROID, DATA";
  const std::string fields = "0 'A' (RA 30.000000, Dec -20.000000 deg), 1 'B' (RA 45.000000, Dec -30.000000 deg)";

  EXPECT_EQ(read_error((dir / "missing.ms").string()),
            (dir / "missing.ms").string() + " is not a Measurement Set: no readable casacore table there");
  EXPECT_EQ(read_error(plain), plain + " is not a Measurement Set: no readable casacore table there");
  EXPECT_EQ(read_error(good, {{"field", std::int64_t(0)}, {"data_column", std::string("CORRECTED_DATA")}}),
            good + ": the main table has no column CORRECTED_DATA (data_column); its columns are " + columns);
  EXPECT_EQ(read_error(good), good + ": FIELD has 2 fields; choose one with the field parameter: " + fields);
  EXPECT_EQ(read_error(good, {{"field", std::int64_t(2)}}), good + ": there is no field 2; FIELD has " + fields);
  EXPECT_EQ(read_error(good, {{"field", std::int64_t(0)}, {"channels", std::string("0,1")}}),
            good + ": there is no channel 1 (channels: '0,1'); SPECTRAL_WINDOW has 1 channels, 0-0");
  EXPECT_EQ(read_error(good, {{"field", std::int64_t(0)}, {"stokes", std::string("RR")}}),
            good + ": stokes RR needs correlations RR; POLARIZATION CORR_TYPE has XX, YY");
  EXPECT_EQ(read_error(good, {{"field", std::int64_t(0)}, {"stokes", std::string("U")}}),
            good + ": stokes U needs correlations XY and YX, or RL and LR; POLARIZATION CORR_TYPE has XX, YY");
  // The one row is in field 0: field 1 has nothing.
  EXPECT_EQ(read_error(good, {{"field", std::int64_t(1)}}),
            good + ": nothing to read: FLAG and FLAG_ROW leave no visibility in field 1, channels all, stokes I (1 rows)");
  EXPECT_EQ(read_error(good, {{"field", std::int64_t(0)}}), "");

  const std::string cross = (dir / "cross.ms").string(), flagged = (dir / "flagged.ms").string();
  TestMs c = t;
  c.fields.resize(1);
  c.correlations = {"XY", "YX"};
  write_test_ms(cross, c);
  EXPECT_EQ(read_error(cross),
            cross + ": stokes I needs correlations XX and YY, or RR and LL; POLARIZATION CORR_TYPE has XY, YX");
  TestMs f = t;
  f.fields.resize(1);
  f.rows[0].flag = {0, 1};
  write_test_ms(flagged, f);
  EXPECT_EQ(read_error(flagged),
            flagged + ": nothing to read: FLAG and FLAG_ROW leave no visibility in field 0, channels all, stokes I (1 rows)");
  EXPECT_EQ(read_error(flagged, {{"stokes", std::string("XX")}}), "");

  // Rows are validated in the prepare pass, and the first bad row is named.
  TestMs v = t;
  v.fields.resize(1);
  v.rows = {r, r, r};
  v.rows[1].antenna2 = 9;
  v.rows[2].uvw[1] = std::numeric_limits<double>::quiet_NaN();
  const std::string antennas = (dir / "antennas.ms").string(), uvw = (dir / "uvw.ms").string();
  write_test_ms(antennas, v);
  EXPECT_EQ(read_error(antennas), antennas + ": main table row 1: ANTENNA1, ANTENNA2 are 0, 9; ANTENNA has 4 rows");
  v.rows[1].antenna2 = 1;
  write_test_ms(uvw, v);
  EXPECT_EQ(read_error(uvw), uvw + ": main table row 2: UVW is not finite in an unflagged row");
  v.rows[2].flag_row = true;  // flagged: its UVW does not matter
  std::filesystem::remove_all(uvw);
  write_test_ms(uvw, v);
  EXPECT_EQ(read_error(uvw), "");

  EXPECT_THROW(StageHarness(io_read_ms::spec(), "cpu", {{"path", good}, {"channels", std::string("3-1")}}), ParamError);
  EXPECT_THROW(StageHarness(io_read_ms::spec(), "cpu", {{"path", good}, {"channels", std::string("x")}}), ParamError);
}

TEST_F(Pipelines, InputErrorsStopTheRunWithExitCode4AndNothingWritten) {
  const std::string ms = (dir / "cross.ms").string();
  TestMs c;
  c.correlations = {"XY", "YX"};
  MsRow r;
  r.data = {{1, 0}, {1, 0}};
  r.flag = {0, 0};
  r.weight = {1, 1};
  c.rows = {r};
  write_test_ms(ms, c);
  const std::string fits = (dir / "dirty.fits").string();
  try {
    image(ms, fits);
    FAIL() << "expected a StageError";
  } catch (const StageError& e) {
    EXPECT_EQ(e.code(), ExitCode::input);
    EXPECT_EQ(e.stage(), "vis");
    EXPECT_EQ(e.reason(), "prepare: " + ms + ": stokes I needs correlations XX and YY, or RR and LL; "
                          "POLARIZATION CORR_TYPE has XY, YX");
  }
  EXPECT_FALSE(std::filesystem::exists(fits));
  // `uvflow check` (dry-run prepare) reports it too, without reading any data.
  const Plan p = plan("schema: uvflow/1\nstages:\n  - {id: vis, type: io.read_ms, params: {path: " + ms +
                      "}}\n  - {id: drop, type: test.drop_vis, in: {vis: vis}}\n");
  try {
    dry_run_prepare(p);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].message, "stage 'vis' (io.read_ms): " + ms +
                                              ": stokes I needs correlations XX and YY, or RR and LL; "
                                              "POLARIZATION CORR_TYPE has XY, YX");
  }
}

// ---------------------------------------------------------------- flags never reach a grid

TEST_F(Pipelines, FlaggedNaNAnd1e30LeaveTheImageOfZeros) {
  const Stream sim = simulate({{"preset", std::string("tiny")}, {"channels", std::int64_t(2)},
                               {"sky", sky({{2, 1, 1}, {-3, -2, 1.5}})}});
  const std::string base = (dir / "base.ms").string();
  write_ms(sim, base, {{"flag_fraction", 0.3}, {"flag_row_fraction", 0.1}, {"flag_seed", std::int64_t(3)}});
  std::vector<FitsImage> images;
  long flagged = 0;
  for (cfloat value : {cfloat(0, 0), cfloat(kNaN, kNaN), cfloat(1e30f, -1e30f), cfloat(kNaN, 1e30f)}) {
    const std::string copy = (dir / ("v" + std::to_string(images.size()) + ".ms")).string();
    std::filesystem::copy(base, copy, std::filesystem::copy_options::recursive);
    flagged = set_flagged_data(copy, value);
    images.push_back(image(copy, (dir / ("v" + std::to_string(images.size()) + ".fits")).string(), true));
  }
  EXPECT_GT(flagged, 0.3 * double(sim.size()) * 4);  // every correlation of the flagged visibilities
  float peak = 0;
  for (float x : images[0].pixels) peak = std::max(peak, x);
  EXPECT_GT(peak, 1.0f);  // the image holds the sources
  for (std::size_t k = 1; k < images.size(); ++k) {
    ASSERT_EQ(images[k].pixels.size(), images[0].pixels.size());
    for (std::size_t i = 0; i < images[k].pixels.size(); ++i) {
      ASSERT_TRUE(std::isfinite(images[k].pixels[i])) << "image " << k << " pixel " << i;
      ASSERT_EQ(images[k].pixels[i], images[0].pixels[i]) << "image " << k << " pixel " << i;
    }
  }
}

// ---------------------------------------------------------------- WSClean reads what io.write_ms wrote

TEST_F(Pipelines, WSCleanImagesTheMeasurementSetLikeUvflow) {
  if (std::system("command -v wsclean > /dev/null 2>&1") != 0) GTEST_SKIP() << "wsclean is not installed";
  // Sources at whole pixels (400 arcsec cells): l_deg = -dx cells, m_deg = dy cells.
  const double cell = 400.0 / 3600;
  struct Src { int dx, dy; double flux; };
  const std::vector<Src> sources = {{-20, 12, 1.0}, {25, -30, 2.0}, {10, 35, 1.5}};
  std::vector<Record> recs;
  for (auto& s : sources) recs.push_back({{"l_deg", -s.dx * cell}, {"m_deg", s.dy * cell}, {"flux_jy", s.flux}});
  const Stream sim = simulate({{"preset", std::string("tiny")}, {"channels", std::int64_t(3)}, {"sky", recs}});
  const std::string ms = (dir / "ws.ms").string();
  write_ms(sim, ms, {{"flag_fraction", 0.05}, {"correlations", std::string("linear2")}});
  const FitsImage ours = image(ms, (dir / "uvflow.fits").string());
  const std::string cmd = "cd " + dir.path().string() +
                          " && wsclean -quiet -size 128 128 -scale 400asec -weight natural -name ws ws.ms > wsclean.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "see " << (dir / "wsclean.log");
  const FitsImage theirs = read_fits_image(dir / "ws-dirty.fits");
  ASSERT_EQ(theirs.pixels.size(), ours.pixels.size());
  for (auto& s : sources) {
    const std::size_t at = std::size_t(64 + s.dy) * 128 + std::size_t(64 + s.dx);
    EXPECT_NEAR(ours.pixels[at], theirs.pixels[at], 0.01 * s.flux) << "source at " << s.dx << ", " << s.dy;
    EXPECT_NEAR(theirs.pixels[at], s.flux, 0.05 * s.flux);
  }
  double diff2 = 0, peak = 0;
  for (std::size_t i = 0; i < ours.pixels.size(); ++i) {
    diff2 += double(ours.pixels[i] - theirs.pixels[i]) * (ours.pixels[i] - theirs.pixels[i]);
    peak = std::max(peak, double(theirs.pixels[i]));
  }
  EXPECT_LT(std::sqrt(diff2 / double(ours.pixels.size())), 5e-3 * peak);
}

// ---------------------------------------------------------------- output directories

TEST_F(Pipelines, SimulateToMsPipelineWritesAMeasurementSet) {
  const std::string ms = (dir / "out.ms").string();
  run_plan(load_plan(std::filesystem::path(UVFLOW_TEST_SOURCE_DIR) / "pipelines/simulate_to_ms.yaml",
                     {"ms.path=" + ms, "vis.preset=tiny"}, reg));
  const TestMs t = read_test_ms(ms);
  EXPECT_EQ(t.chan_freq_hz.size(), 4u);
  EXPECT_EQ(t.rows.size(), 2016u * 8);  // baselines x dumps, 4 channels a row
  for (auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_TRUE(e.path().filename() == "out.ms" || e.path().filename() == "p.yaml") << "left behind: " << e.path();
}

TEST_F(Pipelines, FailedRunLeavesNoMeasurementSet) {
  const std::string ms = (dir / "fail.ms").string();
  const Plan p = plan("schema: uvflow/1\nrun: {max_in_flight: 2}\nstages:\n"
                      "  - {id: vis, type: io.simulate, params: {preset: tiny, dumps_per_block: 1}}\n"
                      "  - {id: ms, type: io.write_ms, params: {path: " + ms + "}, in: {info: vis, vis: vis}}\n"
                      "  - {id: src, type: test.source, params: {n: 20, delay_ms: 20}}\n"
                      "  - {id: boom, type: test.fail, params: {at: 10}, in: {in: src}}\n");
  EXPECT_THROW(run_plan(p), StageError);
  for (auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename(), "p.yaml") << "left behind: " << e.path();
}

TEST_F(Pipelines, AnExistingPathIsReplacedOnlyWhenAskedAndOnlyIfItIsATable) {
  const std::string ms = (dir / "x.ms").string(), other = (dir / "notes").string();
  auto yaml = [&](const std::string& path, int dumps, bool overwrite) {
    return "schema: uvflow/1\nstages:\n  - {id: vis, type: io.simulate, params: {preset: tiny, dumps: " +
           std::to_string(dumps) + "}}\n  - {id: ms, type: io.write_ms, params: {path: " + path +
           ", overwrite: " + (overwrite ? "true" : "false") + "}, in: {info: vis, vis: vis}}\n";
  };
  auto error = [&](const std::string& text) -> std::string {
    try {
      run_plan(plan(text));
    } catch (const StageError& e) {
      EXPECT_EQ(e.code(), ExitCode::input);
      return e.reason();
    }
    return "";
  };
  run_plan(plan(yaml(ms, 2, false)));
  EXPECT_EQ(read_test_ms(ms).rows.size(), 2u * 2016);
  EXPECT_EQ(error(yaml(ms, 3, false)), "prepare: " + ms + " exists; remove it or set overwrite: true to replace it");
  EXPECT_EQ(error(yaml(ms, 3, true)), "");
  EXPECT_EQ(read_test_ms(ms).rows.size(), 3u * 2016);
  std::filesystem::create_directories(other);
  std::ofstream(other + "/keep.txt") << "mine";
  EXPECT_EQ(error(yaml(other, 1, true)),
            "prepare: " + other + " exists and is not a Measurement Set (no table.dat): refusing to replace it");
  EXPECT_TRUE(std::filesystem::exists(other + "/keep.txt"));
  for (auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_TRUE(e.path().filename() == "x.ms" || e.path().filename() == "notes" || e.path().filename() == "p.yaml")
        << "left behind: " << e.path();
}

// ---------------------------------------------------------------- bounded memory

namespace {

// Peak resident memory since the last reset, in bytes; -1 where it cannot be reset (the kernel's
// clear_refs "5" resets VmHWM, Linux 4.0 and later).
long peak_rss_since_reset(bool reset) {
  if (reset) {
    std::ofstream f("/proc/self/clear_refs");
    if (!(f << "5" << std::flush)) return -1;
    return 0;
  }
  std::ifstream s("/proc/self/status");
  std::string line;
  while (std::getline(s, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) * 1024;
  return -1;
}

}  // namespace

TEST_F(Pipelines, ReadingInSmallBlocksKeepsMemoryBounded) {
  const std::string ms = (dir / "small.ms").string();
  run_plan(plan("schema: uvflow/1\nstages:\n"
                "  - {id: vis, type: io.simulate, params: {preset: small, sky: [{l_deg: 1, m_deg: 1, flux_jy: 1}]}}\n"
                "  - {id: ms, type: io.write_ms, params: {path: " + ms + "}, in: {info: vis, vis: vis}}\n"));
  auto peak_while_reading = [&](std::int64_t rows) {
    g_dropped = 0;
    const Plan p = plan("schema: uvflow/1\nrun: {max_in_flight: 2}\nstages:\n  - {id: vis, type: io.read_ms, params: {path: " + ms +
                        ", rows_per_block: " + std::to_string(rows) + "}}\n  - {id: drop, type: test.drop_vis, in: {vis: vis}}\n");
    if (peak_rss_since_reset(true) < 0) return -1L;
    const long base = peak_rss_since_reset(false);
    run_plan(p);
    EXPECT_EQ(g_dropped.load(), 783360);
    return peak_rss_since_reset(false) - base;
  };
  const long small = peak_while_reading(4096);
  if (small < 0) GTEST_SKIP() << "cannot reset the peak RSS here (/proc/self/clear_refs)";
  const long whole = peak_while_reading(783360);
  std::printf("peak RSS growth reading 783,360 rows: %.1f MB in blocks of 4096 rows, %.1f MB in one block\n",
              small / 1e6, whole / 1e6);
  // One block of the whole set holds ~80 MB of columns and ~35 MB of visibilities.
  EXPECT_GT(whole, 60'000'000);
  EXPECT_LT(small, whole / 4);
}

// ---------------------------------------------------------------- the simulator's additions

TEST(SimulateForMs, ChannelsTimesAndAntennasAreConsistent) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(0, 1);
  const int nchan = 2 + int(rng() % 4);
  const double f0 = 70e6 + 150e6 * uni(rng), width = 1e5 + 1e6 * uni(rng), ra = 360 * uni(rng);
  const std::vector<Record> src = sky({{3 * uni(rng) - 1.5, 3 * uni(rng) - 1.5, 1}});
  const Stream one = simulate({{"preset", std::string("tiny")}, {"freq_hz", f0}, {"ra_deg", ra}, {"sky", src}});
  const Stream many = simulate({{"preset", std::string("tiny")}, {"freq_hz", f0}, {"ra_deg", ra}, {"sky", src},
                                {"channels", std::int64_t(nchan)}, {"channel_width_hz", width}});
  ASSERT_EQ(many.size(), one.size() * std::size_t(nchan));
  ASSERT_EQ(many.obs->freq_hz.size(), std::size_t(nchan));
  EXPECT_EQ(many.obs->ref_freq_hz, (f0 + (f0 + (nchan - 1) * width)) / 2);
  const double l = src[0].at("l_deg") * kDeg, m = src[0].at("m_deg") * kDeg, n1 = std::sqrt(1 - l * l - m * m) - 1;
  for (std::size_t k = 0; k < one.size(); ++k) {
    for (int c = 0; c < nchan; ++c) {
      const std::size_t j = k * std::size_t(nchan) + std::size_t(c);
      const double ratio = (f0 + c * width) / f0;
      ASSERT_EQ(many.channel[j], c);
      ASSERT_EQ(many.antenna1[j], one.antenna1[k]);
      ASSERT_EQ(many.time[j], one.time[k]);
      // Channel c's uvw are channel 0's scaled by the frequency ratio.
      ASSERT_NEAR(many.uu[j], one.uu[k] * ratio, 2e-7 * std::abs(one.uu[k] * ratio) + 1e-9);
      ASSERT_NEAR(many.ww[j], one.ww[k] * ratio, 2e-7 * std::abs(one.ww[k] * ratio) + 1e-9);
      // V = exp(2 pi i (u l + v m + w (n - 1))) at the stored uvw.
      const std::complex<double> v = std::exp(std::complex<double>(
          0, 2 * std::numbers::pi * (many.uu[j] * l + many.vv[j] * m + many.ww[j] * n1)));
      ASSERT_NEAR(many.vis[j].real(), v.real(), 2e-6);
      ASSERT_NEAR(many.vis[j].imag(), v.imag(), 2e-6);
    }
    // Channel 0 is the single-channel simulation, bit for bit.
    ASSERT_EQ(many.vis[k * std::size_t(nchan)], one.vis[k]);
    ASSERT_EQ(many.uu[k * std::size_t(nchan)], one.uu[k]);
  }
  // The times are those when the phase centre stands at the dumps' hour angles: recover the
  // elevation of the first dump (56 deg for tiny) from its time with GMST of IAU 2006 (via the
  // Earth rotation angle), independent of the simulator's IAU 1982 expression.
  const double t0 = one.time.front() / 86400;  // MJD
  const double du = t0 - 51544.5, tc = du / 36525;
  const double era = 2 * std::numbers::pi * std::fmod(0.7790572732640 + 1.00273781191135448 * du, 1.0);
  const double gmst = era + (0.014506 + tc * (4612.156534 + tc * 1.3915817)) / 3600 * kDeg;
  const double h = gmst + 116.7644482 * kDeg - ra * kDeg, lat = -26.82472208 * kDeg, dec = -19 * kDeg;
  const double el = std::asin(std::sin(lat) * std::sin(dec) + std::cos(lat) * std::cos(dec) * std::cos(h)) / kDeg;
  EXPECT_NEAR(el, 56, 0.01);
  EXPECT_LT(std::sin(h), 0);  // rising: east of the meridian
  EXPECT_EQ(one.obs->date_obs.substr(0, 11), "2030-01-01T");
  const auto dumps = std::set<double>(one.time.begin(), one.time.end());
  ASSERT_EQ(dumps.size(), 8u);
  EXPECT_NEAR(*std::next(dumps.begin()) - *dumps.begin(), one.obs->integration_s, 1e-6);
  // Antennas: a rigid move of the layout (distances kept) to the Earth's surface at the site.
  const auto& ant = one.obs->antennas;
  ASSERT_EQ(ant.size(), 64u);
  for (auto& a : ant) {
    const double r = std::sqrt(a.x * a.x + a.y * a.y + a.z * a.z);
    EXPECT_NEAR(r, 6374.0e3, 5e3);  // WGS84 radius at latitude -26.8 deg, plus 300 m
    EXPECT_NEAR(std::atan2(a.y, a.x) / kDeg, 116.7644482, 0.1);
    EXPECT_EQ(a.dish_diameter_m, 38);
  }
  // Baseline 0 (antennas 0 and 1) has the length of its uvw (metres, any orientation).
  const double bx = ant[1].x - ant[0].x, by = ant[1].y - ant[0].y, bz = ant[1].z - ant[0].z;
  const double wavelength = kC / f0;
  EXPECT_NEAR(std::sqrt(bx * bx + by * by + bz * bz),
              wavelength * std::sqrt(double(one.uu[0]) * one.uu[0] + double(one.vv[0]) * one.vv[0] +
                                     double(one.ww[0]) * one.ww[0]),
              1e-3);
  EXPECT_EQ(one.antenna1[0], 0);
  EXPECT_EQ(one.antenna2[0], 1);
}
