// io.simulate against independent computations: uvw from explicit rotation matrices and the sky
// direction's own basis, elevations recovered from the simulated w, visibilities from the
// point-source formula with std::exp, and the direct-DFT image of one source (which checks the
// DFT reference of tests/support/dft.hpp and the sign convention together).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <fstream>
#include <numbers>
#include <numeric>
#include <random>

#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "stages/io/simulate.hpp"
#include "tests/support/dft.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kDeg = kPi / 180;
constexpr double kLat = -26.82472208 * kDeg;
constexpr double kC = 299792458.0;

using Vec3 = std::array<double, 3>;
using Mat3 = std::array<Vec3, 3>;  // rows

Vec3 mul(const Mat3& m, const Vec3& v) {
  Vec3 r{};
  for (int i = 0; i < 3; ++i) r[i] = m[i][0] * v[0] + m[i][1] * v[1] + m[i][2] * v[2];
  return r;
}
Mat3 mul(const Mat3& a, const Mat3& b) {
  Mat3 r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
  return r;
}
Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
Vec3 normalised(const Vec3& a) {
  const double n = std::sqrt(dot(a, a));
  return {a[0] / n, a[1] / n, a[2] / n};
}
Mat3 rot_y(double t) { return {{{std::cos(t), 0, std::sin(t)}, {0, 1, 0}, {-std::sin(t), 0, std::cos(t)}}}; }
Mat3 rot_z(double t) { return {{{std::cos(t), -std::sin(t), 0}, {std::sin(t), std::cos(t), 0}, {0, 0, 1}}}; }

// Equatorial frame of the site (x: meridian on the equator, y: east, z: pole) to East-North-Up:
// rotate about the east axis by the latitude (x -> up), then relabel the axes.
Mat3 equatorial_to_enu() {
  const Mat3 relabel = {{{0, 1, 0}, {0, 0, 1}, {1, 0, 0}}};  // (x, y, z) -> (y, z, x)
  return mul(relabel, rot_y(kLat));
}

// Unit vector to the phase centre in ENU at hour angle h.
Vec3 direction_enu(double h, double dec) {
  return mul(equatorial_to_enu(), mul(rot_z(-h), Vec3{std::cos(dec), 0, std::sin(dec)}));
}

// uvw of an ENU baseline (metres) from the sky basis at the phase centre: w along the direction,
// u along pole x direction (east on the sky), v completing the right-handed set (north).
Vec3 uvw_of(const Vec3& baseline_enu, double h, double dec, double wavelength) {
  const Vec3 s = direction_enu(h, dec);
  const Vec3 pole = mul(equatorial_to_enu(), Vec3{0, 0, 1});
  const Vec3 eu = normalised(cross(pole, s)), ev = cross(s, eu);
  return {dot(baseline_enu, eu) / wavelength, dot(baseline_enu, ev) / wavelength, dot(baseline_enu, s) / wavelength};
}

// The hour angle at which the phase centre reaches `el`, by bisection of the elevation from
// direction_enu (monotonic on the rising half [-pi, 0] and on the setting half [0, pi]).
double hour_angle_by_bisection(double el, double dec, bool rising) {
  double lo = rising ? -kPi : 0, hi = rising ? 0 : kPi;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    const bool above = std::asin(direction_enu(mid, dec)[2]) > el;
    (above == rising ? hi : lo) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<Vec3> read_enu(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::vector<Vec3> out;
  Vec3 s;
  while (f >> s[0] >> s[1] >> s[2]) out.push_back(s);
  return out;
}

std::filesystem::path repo_layout() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "data/ska1_low_v5_512st_enu.txt";
}

std::vector<Vec3> nearest(const std::vector<Vec3>& all, std::size_t n) {
  std::vector<std::size_t> idx(all.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) {
    return all[a][0] * all[a][0] + all[a][1] * all[a][1] < all[b][0] * all[b][0] + all[b][1] * all[b][1];
  });
  idx.resize(n);
  std::sort(idx.begin(), idx.end());
  std::vector<Vec3> out;
  for (auto i : idx) out.push_back(all[i]);
  return out;
}

struct Sim {
  std::shared_ptr<const Observation> obs;
  std::vector<std::shared_ptr<const VisBlock>> blocks;
  std::vector<float> uu, vv, ww, weight;
  std::vector<cfloat> vis;
};

Sim simulate(std::map<std::string, ParamValue> params) {
  StageHarness h(io_simulate::spec(), "cpu", std::move(params));
  h.run_source();
  Sim s;
  auto infos = h.outputs("info");
  EXPECT_EQ(infos.size(), 1u);
  s.obs = h.output<VisSetInfo>("info")->obs;
  for (auto& p : h.outputs("vis")) {
    auto b = std::dynamic_pointer_cast<const VisBlock>(p);
    EXPECT_EQ(b->index, std::int64_t(s.blocks.size()));
    EXPECT_EQ(b->obs, s.obs);
    s.blocks.push_back(b);
    s.uu.insert(s.uu.end(), b->uu.begin(), b->uu.end());
    s.vv.insert(s.vv.end(), b->vv.begin(), b->vv.end());
    s.ww.insert(s.ww.end(), b->ww.begin(), b->ww.end());
    s.weight.insert(s.weight.end(), b->weight.begin(), b->weight.end());
    s.vis.insert(s.vis.end(), b->vis.begin(), b->vis.end());
  }
  return s;
}

struct Source {
  double l, m, flux;  // radians (direction cosines), Jy
};

std::vector<Record> sky_param(const std::vector<Source>& sky) {
  std::vector<Record> r;
  for (auto& s : sky) r.push_back({{"l_deg", s.l / kDeg}, {"m_deg", s.m / kDeg}, {"flux_jy", s.flux}});
  return r;
}

std::complex<double> model(const std::vector<Source>& sky, double u, double v, double w) {
  std::complex<double> sum = 0;
  for (auto& s : sky) {
    const double n = std::sqrt(1 - s.l * s.l - s.m * s.m);
    sum += s.flux * std::exp(std::complex<double>(0, 2 * kPi * (u * s.l + v * s.m + w * (n - 1))));
  }
  return sum;
}

// Checks every visibility of dumps `dumps` against uvw_of for the stations' baselines.
void expect_uvw(const Sim& sim, const std::vector<Vec3>& stations, const std::vector<int>& dumps, int total_dumps,
                double dec, double el_start, double el_end, double freq_hz) {
  const bool rising = el_start < el_end;
  const double h0 = hour_angle_by_bisection(el_start, dec, rising);
  const double h1 = hour_angle_by_bisection(el_end, dec, rising);
  const std::size_t nbl = stations.size() * (stations.size() - 1) / 2;
  ASSERT_EQ(sim.uu.size(), nbl * total_dumps);
  double worst = 0, longest = 0;
  for (int d : dumps) {
    const double h = total_dumps == 1 ? h0 : h0 + (h1 - h0) * d / (total_dumps - 1);
    std::size_t k = std::size_t(d) * nbl;
    for (std::size_t a1 = 0; a1 < stations.size(); ++a1)
      for (std::size_t a2 = a1 + 1; a2 < stations.size(); ++a2, ++k) {
        const Vec3 b{stations[a2][0] - stations[a1][0], stations[a2][1] - stations[a1][1],
                     stations[a2][2] - stations[a1][2]};
        const Vec3 ref = uvw_of(b, h, dec, kC / freq_hz);
        worst = std::max({worst, std::abs(sim.uu[k] - ref[0]), std::abs(sim.vv[k] - ref[1]),
                          std::abs(sim.ww[k] - ref[2])});
        longest = std::max(longest, std::sqrt(dot(ref, ref)));
      }
  }
  // float storage: half an ulp of the longest baseline, plus the bisection's hour-angle error
  EXPECT_LE(worst, 1e-6 * longest + 1e-9) << "longest baseline " << longest << " wavelengths";
}

// The phase centre's elevation and east component recovered from the w of one dump: least
// squares on w = b . s over the baselines (s_up from |s| = 1, iterated: the layout is nearly flat).
std::pair<double, double> elevation_from_w(const Sim& sim, const std::vector<Vec3>& stations, int dump,
                                           double freq_hz) {
  const double wavelength = kC / freq_hz;
  const std::size_t nbl = stations.size() * (stations.size() - 1) / 2;
  double up = 0, east = 0, north = 0;
  for (int iter = 0; iter < 3; ++iter) {
    double aee = 0, aen = 0, ann = 0, be = 0, bn = 0;
    std::size_t k = std::size_t(dump) * nbl;
    for (std::size_t a1 = 0; a1 < stations.size(); ++a1)
      for (std::size_t a2 = a1 + 1; a2 < stations.size(); ++a2, ++k) {
        const double e = stations[a2][0] - stations[a1][0], n = stations[a2][1] - stations[a1][1];
        const double rhs = sim.ww[k] * wavelength - (stations[a2][2] - stations[a1][2]) * up;
        aee += e * e;
        aen += e * n;
        ann += n * n;
        be += e * rhs;
        bn += n * rhs;
      }
    const double det = aee * ann - aen * aen;
    east = (be * ann - bn * aen) / det;
    north = (aee * bn - aen * be) / det;
    up = std::sqrt(std::max(0.0, 1 - east * east - north * north));
  }
  return {std::asin(up), east};
}

std::map<std::string, ParamValue> one_source(std::map<std::string, ParamValue> p) {
  p["sky"] = sky_param({{0.01, 0.02, 1.0}});
  return p;
}

}  // namespace

TEST(Simulate, BaselinesArePairsOfTheNearestStationsInFileOrder) {
  TempDir dir;
  // Station 2 is far out, so stations = 4 keeps 0, 1, 3, 4 (the file order).
  const auto layout = dir.write("layout.txt",
                                "# east north up\n"
                                "100 0 0.5\n"
                                "0, -250, -1   # commas and comments\n"
                                "30000 20000 -90\n"
                                "\n"
                                "-400 300 2\n"
                                "10 900 0\n");
  const std::vector<Vec3> chosen = {{100, 0, 0.5}, {0, -250, -1}, {-400, 300, 2}, {10, 900, 0}};
  const double dec = -30 * kDeg, el0 = 40 * kDeg, el1 = 60 * kDeg, freq = 150e6;
  Sim sim = simulate({{"layout", layout.string()},
                      {"stations", std::int64_t(4)},
                      {"dumps", std::int64_t(3)},
                      {"dumps_per_block", std::int64_t(2)},
                      {"freq_hz", freq},
                      {"dec_deg", dec / kDeg},
                      {"el_start_deg", el0 / kDeg},
                      {"el_end_deg", el1 / kDeg},
                      {"sky", sky_param({{0, 0, 1}})}});
  ASSERT_EQ(sim.blocks.size(), 2u);
  EXPECT_EQ(sim.blocks[0]->size(), 12u);  // 6 baselines x 2 dumps
  EXPECT_EQ(sim.blocks[1]->size(), 6u);
  EXPECT_TRUE(sim.blocks[0]->coords.empty());
  EXPECT_EQ(sim.blocks[0]->skipped, 0);
  for (float w : sim.weight) EXPECT_EQ(w, 1.0f);
  // A source at the phase centre: V = 1 everywhere.
  for (auto v : sim.vis) EXPECT_NEAR(std::abs(v - cfloat(1)), 0, 1e-6);
  expect_uvw(sim, chosen, {0, 1, 2}, 3, dec, el0, el1, freq);
}

TEST(Simulate, UvwMatchesRotationMatricesOnRandomGeometry) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(-1, 1);
  TempDir dir;
  std::vector<Vec3> stations(12);
  std::string text;
  for (auto& s : stations) {
    s = {5000 * uni(rng), 5000 * uni(rng), 50 * uni(rng)};
    char line[128];
    std::snprintf(line, sizeof line, "%.17g %.17g %.17g\n", s[0], s[1], s[2]);
    text += line;
  }
  const double dec = (-80 + 120 * (uni(rng) + 1) / 2) * kDeg;
  const double top = kPi / 2 - std::abs(kLat - dec);
  const double bottom = std::max(2 * kDeg, std::abs(kLat + dec) - kPi / 2 + kDeg);
  double el0 = bottom + (top - bottom) * (uni(rng) + 1) / 2, el1 = bottom + (top - bottom) * (uni(rng) + 1) / 2;
  const double freq = 50e6 + 250e6 * (uni(rng) + 1) / 2;
  const int dumps = 2 + int(rng() % 9);
  Sim sim = simulate({{"layout", dir.write("layout.txt", text).string()},
                      {"stations", std::int64_t(stations.size())},
                      {"dumps", std::int64_t(dumps)},
                      {"dumps_per_block", std::int64_t(1 + rng() % 4)},
                      {"freq_hz", freq},
                      {"dec_deg", dec / kDeg},
                      {"el_start_deg", el0 / kDeg},
                      {"el_end_deg", el1 / kDeg},
                      {"sky", sky_param({{0, 0, 1}})}});
  std::vector<int> all(dumps);
  std::iota(all.begin(), all.end(), 0);
  expect_uvw(sim, stations, all, dumps, dec, el0, el1, freq);
}

TEST(Simulate, TinyPresetObservesTheCoreOfTheV5Layout) {
  const auto layout = read_enu(repo_layout());
  ASSERT_EQ(layout.size(), 512u);
  Sim sim = simulate(one_source({{"preset", std::string("tiny")}}));
  EXPECT_EQ(sim.obs->total_visibilities, 2016 * 8);
  EXPECT_EQ(sim.obs->total_blocks, 2);
  ASSERT_EQ(sim.blocks.size(), 2u);
  EXPECT_EQ(sim.blocks[0]->size(), 2016u * 4);
  expect_uvw(sim, nearest(layout, 64), {0, 3, 4, 7}, 8, -19 * kDeg, 56 * kDeg, 82 * kDeg, 100e6);
}

TEST(Simulate, PresetElevationsAreRecoveredFromTheSimulatedW) {
  const auto core = nearest(read_enu(repo_layout()), 24);
  struct Case {
    const char* preset;
    double el0, el1;
  };
  for (auto c : {Case{"el30-56", 30, 56}, Case{"el56-82", 56, 82}, Case{"el82-70", 82, 70}}) {
    SCOPED_TRACE(c.preset);
    Sim sim = simulate(one_source(
        {{"preset", std::string(c.preset)}, {"stations", std::int64_t(24)}, {"dumps", std::int64_t(5)}}));
    auto [first, east_first] = elevation_from_w(sim, core, 0, 100e6);
    auto [last, east_last] = elevation_from_w(sim, core, 4, 100e6);
    EXPECT_NEAR(first / kDeg, c.el0, 1e-4);
    EXPECT_NEAR(last / kDeg, c.el1, 1e-4);
    // Rising: in the east (positive east component); setting: in the west.
    EXPECT_EQ(east_first > 0, c.el0 < c.el1);
    EXPECT_EQ(east_last > 0, c.el0 < c.el1);
  }
}

TEST(Simulate, RandomElevationRangesAreRecoveredFromTheSimulatedW) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(0, 1);
  const auto core = nearest(read_enu(repo_layout()), 20);
  const double dec = (-70 + 90 * uni(rng)) * kDeg;
  const double top = kPi / 2 - std::abs(kLat - dec), bottom = std::max(5 * kDeg, std::abs(kLat + dec) - kPi / 2);
  const double el0 = bottom + (top - bottom) * uni(rng), el1 = bottom + (top - bottom) * uni(rng);
  const double freq = 50e6 + 300e6 * uni(rng);
  Sim sim = simulate(one_source({{"stations", std::int64_t(20)},
                                 {"dumps", std::int64_t(3)},
                                 {"freq_hz", freq},
                                 {"dec_deg", dec / kDeg},
                                 {"el_start_deg", el0 / kDeg},
                                 {"el_end_deg", el1 / kDeg}}));
  auto [first, east_first] = elevation_from_w(sim, core, 0, freq);
  auto [last, east_last] = elevation_from_w(sim, core, 2, freq);
  EXPECT_NEAR(first / kDeg, el0 / kDeg, 1e-4);
  EXPECT_NEAR(last / kDeg, el1 / kDeg, 1e-4);
  if (std::abs(top - el0) > kDeg) {
    EXPECT_EQ(east_first > 0, el0 < el1);
  }
}

TEST(Simulate, UnreachableElevationIsAParamError) {
  auto param_of = [](std::map<std::string, ParamValue> p) {
    try {
      StageHarness h(io_simulate::spec(), "cpu", std::move(p));
    } catch (const ParamError& e) {
      return e.param();
    }
    return std::string("no error");
  };
  // dec -19 transits at 82.18 deg
  EXPECT_EQ(param_of({{"el_end_deg", 85.0}}), "el_end_deg");
  EXPECT_EQ(param_of({{"dec_deg", 60.0}, {"el_start_deg", 20.0}}), "el_start_deg");
  EXPECT_EQ(param_of({{"stations", std::int64_t(1)}}), "stations");
  EXPECT_EQ(param_of({{"sky", std::vector<Record>{{{"l_deg", 60.0}, {"m_deg", 60.0}, {"flux_jy", 1.0}}}}}), "sky");
  EXPECT_EQ(param_of({{"sky", std::vector<Record>{{{"l_deg", 0.1}, {"flux_jy", 1.0}}}}}), "sky");
}

TEST(Simulate, LayoutProblemsAreInputErrors) {
  TempDir dir;
  EXPECT_THROW(StageHarness(io_simulate::spec(), "cpu", {{"layout", (dir / "missing.txt").string()}}), InputError);
  const auto bad = dir.write("bad.txt", "1 2 3\n4 5 6\n7 8 x\n");
  try {
    StageHarness h(io_simulate::spec(), "cpu", {{"layout", bad.string()}, {"stations", std::int64_t(2)}});
    ADD_FAILURE() << "no error for a malformed layout";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:3:"), std::string::npos) << e.what();
  }
  const auto small = dir.write("small.txt", "1 2 3\n4 5 6\n7 8 9\n");
  EXPECT_THROW(StageHarness(io_simulate::spec(), "cpu", {{"layout", small.string()}, {"stations", std::int64_t(4)}}),
               InputError);
}

TEST(Simulate, VisibilitiesMatchThePointSourceFormula) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(-1, 1);
  std::vector<Source> random_sky(5);
  for (auto& s : random_sky) s = {3 * kDeg * uni(rng), 3 * kDeg * uni(rng), 2 * uni(rng)};
  const std::vector<std::vector<Source>> skies = {
      {{0.2 * kDeg, -0.1 * kDeg, 1.5}},
      {{-1 * kDeg, 0.5 * kDeg, 2}, {5 * kDeg, 5 * kDeg, -0.5}, {20 * kDeg, -30 * kDeg, 1}},  // wide: w matters
      random_sky};
  for (auto& sky : skies) {
    Sim sim = simulate({{"preset", std::string("tiny")}, {"sky", sky_param(sky)}});
    double total = 0;
    for (auto& s : sky) total += std::abs(s.flux);
    double worst = 0;
    for (std::size_t k = 0; k < sim.vis.size(); ++k) {
      const auto ref = model(sky, sim.uu[k], sim.vv[k], sim.ww[k]);
      worst = std::max(worst, std::abs(std::complex<double>(sim.vis[k]) - ref));
    }
    EXPECT_LE(worst, 3e-7 * total);  // float storage of the sum
  }
}

TEST(Simulate, DefaultSkyIsA16x16GridAroundThePhaseCentre) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const double random_spacing = 0.01 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng);
  for (double spacing : {0.05, random_spacing}) {
    SCOPED_TRACE("spacing " + std::to_string(spacing));
    std::map<std::string, ParamValue> p = {{"preset", std::string("tiny")}, {"dumps", std::int64_t(2)}};
    if (spacing != 0.05) p["sky_spacing_deg"] = spacing;  // 0.05 is the default
    Sim sim = simulate(p);
    std::vector<Source> grid;
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 16; ++x) grid.push_back({(x - 7.5) * spacing * kDeg, (y - 7.5) * spacing * kDeg, 1});
    EXPECT_NE(sim.obs->origin.find("256 sources"), std::string::npos) << sim.obs->origin;
    double worst = 0;
    for (std::size_t k = 0; k < sim.vis.size(); k += 7) {
      const auto ref = model(grid, sim.uu[k], sim.vv[k], sim.ww[k]);
      worst = std::max(worst, std::abs(std::complex<double>(sim.vis[k]) - ref));
    }
    EXPECT_LE(worst, 3e-7 * 256);
  }
}

TEST(Simulate, SameSeedGivesTheSameDataWhateverTheBlockSize) {
  auto run = [](std::int64_t per_block, std::int64_t seed, double noise) {
    return simulate({{"preset", std::string("tiny")},
                     {"dumps_per_block", per_block},
                     {"seed", seed},
                     {"noise_jy", noise},
                     {"sky", sky_param({{0.3 * kDeg, 0.1 * kDeg, 1}, {-0.2 * kDeg, 0.4 * kDeg, 2}})}});
  };
  const Sim a = run(4, 7, 0.5), b = run(1, 7, 0.5), c = run(3, 7, 0.5);
  EXPECT_EQ(b.blocks.size(), 8u);
  EXPECT_EQ(c.blocks.size(), 3u);
  for (const Sim* other : {&b, &c}) {
    EXPECT_EQ(a.uu, other->uu);
    EXPECT_EQ(a.vv, other->vv);
    EXPECT_EQ(a.ww, other->ww);
    EXPECT_EQ(a.vis, other->vis);
  }
  // The noise: another seed draws other values; its spread is noise_jy on each part.
  const Sim other_seed = run(4, 8, 0.5), clean = run(4, 7, 0);
  EXPECT_NE(a.vis, other_seed.vis);
  double sum = 0, sum2 = 0;
  for (std::size_t k = 0; k < a.vis.size(); ++k)
    for (double d : {a.vis[k].real() - clean.vis[k].real(), a.vis[k].imag() - clean.vis[k].imag()}) {
      sum += d;
      sum2 += d * d;
    }
  const double n = 2.0 * a.vis.size(), mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  EXPECT_NEAR(sd, 0.5, 0.5 * 0.05);
  EXPECT_NEAR(mean, 0, 5 * 0.5 / std::sqrt(n));
}

TEST(Simulate, DftOfOneSourcePeaksAtItsPixelWithItsFlux) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  constexpr int N = 32;
  struct Case {
    int dx, dy;  // pixels from the centre: x = N/2 - dx (east to the left), y = N/2 + dy
    double flux;
  };
  // At least 3 pixels off the centre, so the mirrored pixel lies outside the main lobe.
  auto offset = [&] {
    const int size = int(3 + rng() % 10);
    return rng() % 2 ? size : -size;
  };
  const std::vector<Case> cases = {{5, -3, 1.0},
                                   {offset(), offset(), 0.5 + std::uniform_real_distribution<double>(0, 3)(rng)}};
  for (auto c : cases) {
    SCOPED_TRACE("dx " + std::to_string(c.dx) + " dy " + std::to_string(c.dy));
    // tiny's baselines reach 127 wavelengths: a main lobe about 4 pixels wide at this cell
    const double cell = 0.1 * kDeg;
    Sim sim = simulate({{"preset", std::string("tiny")},
                        {"dumps", std::int64_t(4)},
                        {"sky", sky_param({{c.dx * cell, c.dy * cell, c.flux}})}});
    const auto image = dft_dirty_image(sim.blocks, N, cell);
    const auto peak = std::max_element(image.begin(), image.end()) - image.begin();
    EXPECT_EQ(peak % N, N / 2 - c.dx);
    EXPECT_EQ(peak / N, N / 2 + c.dy);
    EXPECT_NEAR(image[peak], c.flux, 1e-5 * c.flux);
    // The mirrored pixel (the other sign convention) holds only a sidelobe.
    EXPECT_LT(image[(N / 2 - c.dy) * N + N / 2 + c.dx], 0.5 * c.flux);
  }
}

TEST(Simulate, InfoStatisticsAreThoseOfTheBlocks) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uni(0, 1);
  const double dec = -60 + 50 * uni(rng);
  const double top = 90 - std::abs(kLat / kDeg - dec);
  const std::vector<std::map<std::string, ParamValue>> cases = {
      {{"preset", std::string("tiny")}},
      {{"preset", std::string("tiny")},
       {"stations", std::int64_t(40)},
       {"dumps", std::int64_t(3 + rng() % 8)},
       {"dumps_per_block", std::int64_t(1 + rng() % 3)},
       {"dec_deg", dec},
       {"el_start_deg", top * uni(rng)},
       {"el_end_deg", top * uni(rng)},
       {"freq_hz", 60e6 + 200e6 * uni(rng)},
       {"ra_deg", 360 * uni(rng)}}};
  for (auto p : cases) {
    p["sky"] = sky_param({{0.01, 0.01, 1}});
    Sim sim = simulate(p);
    const Observation& obs = *sim.obs;
    double max_w = 0, min_w = 1e300, sum_w2 = 0, max_uv = 0;
    for (std::size_t k = 0; k < sim.ww.size(); ++k) {
      const double w = std::abs(double(sim.ww[k]));
      max_w = std::max(max_w, w);
      min_w = std::min(min_w, w);
      sum_w2 += w * w;
      max_uv = std::max({max_uv, std::abs(double(sim.uu[k])), std::abs(double(sim.vv[k]))});
    }
    EXPECT_EQ(obs.total_visibilities, std::int64_t(sim.vis.size()));
    EXPECT_EQ(obs.total_blocks, std::int64_t(sim.blocks.size()));
    EXPECT_EQ(obs.max_abs_w, max_w);
    EXPECT_EQ(obs.min_abs_w, min_w);
    EXPECT_NEAR(obs.rms_abs_w, std::sqrt(sum_w2 / sim.ww.size()), 1e-12 * max_w);
    EXPECT_EQ(obs.max_abs_uv, max_uv);
    EXPECT_EQ(obs.telescope, "SKA1-Low");
    const double freq = p.count("freq_hz") ? std::get<double>(p["freq_hz"]) : 100e6;
    EXPECT_EQ(obs.freq_hz, std::vector<double>{freq});
    EXPECT_EQ(obs.ref_freq_hz, freq);
    EXPECT_NEAR(obs.dec_rad, (p.count("dec_deg") ? std::get<double>(p["dec_deg"]) : -19) * kDeg, 1e-15);
    EXPECT_NEAR(obs.ra_rad, (p.count("ra_deg") ? std::get<double>(p["ra_deg"]) : 0) * kDeg, 1e-15);
  }
}

TEST(Simulate, PresetsHaveTheShapesOfTheSeedsDataSets) {
  struct Case {
    const char* preset;
    std::int64_t visibilities;
  };
  std::map<std::string, double> max_w;
  for (auto c : {Case{"tiny", 16128}, Case{"small", 783360}, Case{"synthetic", 2152800},
                 Case{"el30-56", 31395840}, Case{"el56-82", 31395840}, Case{"el82-70", 31395840}}) {
    SCOPED_TRACE(c.preset);
    StageHarness h(io_simulate::spec(), "cpu", one_source({{"preset", std::string(c.preset)}}));
    h.start();
    h.process();  // the first block only
    auto obs = h.output<VisSetInfo>("info")->obs;
    EXPECT_EQ(obs->total_visibilities, c.visibilities);
    EXPECT_EQ(h.stage().stream_length(), obs->total_blocks);
    if (c.visibilities > 2'000'000) {  // the seeds' sizes stream in blocks of 0.5-2 M
      const auto first = h.output<VisBlock>("vis");
      EXPECT_GE(first->size(), 500'000u);
      EXPECT_LE(first->size(), 2'000'000u);
    }
    max_w[c.preset] = obs->max_abs_w;
  }
  // The w spread orders the seeds' w-plane counts 922 : 601 : 339 (planes grow with max |w|).
  EXPECT_NEAR(max_w["el56-82"] / max_w["el30-56"], 601.0 / 922, 0.05);
  EXPECT_NEAR(max_w["el82-70"] / max_w["el30-56"], 339.0 / 922, 0.05);
}
