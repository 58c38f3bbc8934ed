// uvflow against WSClean 3 on simulated Measurement Sets (pipelines/simulate_to_ms.yaml: the tiny
// SKA1-Low preset, 4 channels, a few point sources, random flags): pipelines/ms_dirty_image.yaml
// and `wsclean -niter 0` image the same MS with the same size, scale and weighting (natural,
// uniform, Briggs), once with WSClean's most accurate setting (-use-wgridder -no-small-inversion:
// without its default "small inversion", which images at the Nyquist resolution and upsamples,
// WSClean's wgridder agrees with a direct DFT to 1e-5 on these data; with it, it is up to 1 % off
// 2 degrees out) and once with its defaults (w-stacking gridder). Checked: every source peaks on
// the same pixel as in the wgridder image, within 0.5 % of its value; uvflow's image is closer to
// the wgridder image than WSClean's default image is (relative RMS difference over the inner
// 80 %); the FITS WCS keys are WSClean's. And, visibility by visibility, uvw.weighting's imaging
// weights equal those WSClean stores with -store-imaging-weights (tests/wsclean_weights.py reads
// them). A fixed sky and a fresh random one. Needs wsclean and python3-casacore
// (scripts/install-deps.sh --tests installs both).
#include <fitsio.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/harness.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/io/read_ms.hpp"
#include "stages/uvw/weight_density.hpp"
#include "stages/uvw/weighting.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/image_vs_dft.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/source_dir.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/weighting_cases.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

constexpr int kNpix = 256;
constexpr double kCellArcsec = 100;  // a 7 degree field at 100 MHz: the w-term matters

// Debian's python3-casacore is installed for the system interpreter.
constexpr const char* kPython = "/usr/bin/python3";

struct Weighting {
  std::string mode;
  double robust = 0;
  std::string wsclean() const {  // WSClean's -weight arguments
    std::ostringstream s;
    s << mode;
    if (mode == "briggs") s << ' ' << robust;
    return s.str();
  }
};

// Runs a shell command; its output goes to `log`. Returns its exit status.
int shell(const std::string& cmd, const std::filesystem::path& log) {
  return std::system((cmd + " > '" + log.string() + "' 2>&1").c_str());
}

std::string tail(const std::filesystem::path& log) {
  std::ifstream f(log);
  std::stringstream s;
  s << f.rdbuf();
  const std::string all = s.str();
  return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

void run_pipeline(const std::string& file, const std::vector<std::string>& sets) {
  Registry reg;
  register_builtin_stages(reg);
  run_plan(load_plan(source_dir() / "pipelines" / file, sets, reg));
}

// A Measurement Set of `sky` with random flags, written by pipelines/simulate_to_ms.yaml.
std::filesystem::path make_ms(const TempDir& dir, const std::vector<PointSource>& sky, unsigned flag_seed) {
  const auto ms = dir / "sim.ms";
  run_pipeline("simulate_to_ms.yaml", {"vis.sky=" + sky_to_yaml(sky, kCellArcsec), "ms.path=" + ms.string(),
                                       "ms.flag_fraction=0.05", "ms.flag_row_fraction=0.02",
                                       "ms.flag_seed=" + std::to_string(flag_seed)});
  return ms;
}

// `sets`: more --set overrides (the method and its accuracy).
FitsImage uvflow_image(const TempDir& dir, const std::filesystem::path& ms, const Weighting& w,
                       const std::vector<std::string>& sets = {}) {
  const auto fits = dir / ("uvflow-" + w.mode + ".fits");
  std::ostringstream robust;
  robust << w.robust;
  std::vector<std::string> all = {"vars.ms=" + ms.string(), "vars.npix=" + std::to_string(kNpix),
                                  "vars.cell_arcsec=" + std::to_string(kCellArcsec), "vars.weighting=" + w.mode,
                                  "vars.robust=" + robust.str(), "fits.path=" + fits.string(),
                                  "run.report=" + (dir / "report.json").string(), "kernels.cache_dir=\"\""};
  all.insert(all.end(), sets.begin(), sets.end());
  run_pipeline("ms_dirty_image.yaml", all);
  return read_fits_image(fits);
}

// WSClean's dirty image with `options` ("-use-wgridder -no-small-inversion", or "" for WSClean's
// defaults: w-stacking).
std::filesystem::path wsclean_image(const TempDir& dir, const std::filesystem::path& ms, const Weighting& w,
                                    const std::string& options, const std::string& name) {
  const auto prefix = dir / (name + "-" + w.mode);
  const std::string cmd = "wsclean -j 2 -niter 0 -size " + std::to_string(kNpix) + " " + std::to_string(kNpix) +
                          " -scale " + std::to_string(kCellArcsec) + "asec -weight " + w.wsclean() + " " + options +
                          " -name '" + prefix.string() + "' '" + ms.string() + "'";
  const auto log = dir / (name + "-" + w.mode + ".log");
  EXPECT_EQ(shell(cmd, log), 0) << cmd << "\n" << tail(log);
  return prefix.string() + "-dirty.fits";
}

// ||a - ref|| / ||ref|| over the inner 80 % of the image (`margin` 0.1), or another part of it.
double relative_rms(const FitsImage& a, const FitsImage& ref, double margin = 0.1) {
  const int lo = int(kNpix * margin), hi = kNpix - lo;
  double d2 = 0, r2 = 0;
  for (int y = lo; y < hi; ++y)
    for (int x = lo; x < hi; ++x) {
      const double r = ref.pixels[std::size_t(y) * kNpix + x], d = a.pixels[std::size_t(y) * kNpix + x] - r;
      d2 += d * d;
      r2 += r * r;
    }
  return std::sqrt(d2 / r2);
}

// The brightest pixel within 3 pixels of (x, y).
std::pair<int, int> peak_near(const FitsImage& img, int x, int y) {
  std::pair<int, int> best{x, y};
  for (int yy = y - 3; yy <= y + 3; ++yy)
    for (int xx = x - 3; xx <= x + 3; ++xx)
      if (img.pixels[std::size_t(yy) * kNpix + xx] > img.pixels[std::size_t(best.second) * kNpix + best.first])
        best = {xx, yy};
  return best;
}

// The WCS keys of an image, as text (strings) or numbers.
std::map<std::string, std::string> wcs_keys(const std::filesystem::path& file) {
  std::map<std::string, std::string> keys;
  fitsfile* f = nullptr;
  int status = 0;
  fits_open_file(&f, file.string().c_str(), READONLY, &status);
  if (status) throw std::runtime_error("cannot open " + file.string());
  for (const char* k : {"NAXIS1", "NAXIS2", "NAXIS3", "NAXIS4", "BUNIT", "CTYPE1", "CTYPE2", "CTYPE3", "CTYPE4",
                        "CRPIX1", "CRPIX2", "CRPIX3", "CRPIX4", "CRVAL1", "CRVAL2", "CRVAL3", "CRVAL4", "CDELT1",
                        "CDELT2", "CDELT3", "CDELT4", "CUNIT1", "CUNIT2", "CUNIT3", "EQUINOX"}) {
    char value[FLEN_VALUE] = "", comment[FLEN_COMMENT];
    status = 0;
    fits_read_keyword(f, k, value, comment, &status);
    keys[k] = status ? "(missing)" : value;
  }
  status = 0;
  fits_close_file(f, &status);
  return keys;
}

void expect_same_wcs(const std::filesystem::path& ours, const std::filesystem::path& wsclean) {
  const auto a = wcs_keys(ours), b = wcs_keys(wsclean);
  for (auto& [k, v] : b) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (end != v.c_str() && *end == '\0') {  // a number: equal to 10 digits
      const double y = std::strtod(a.at(k).c_str(), nullptr);
      EXPECT_NEAR(y, x, 1e-10 * std::max(1.0, std::abs(x))) << k << ": uvflow " << a.at(k) << ", WSClean " << v;
    } else {
      EXPECT_EQ(a.at(k), v) << k;
    }
  }
}

struct Comparison {
  double uvflow_rms = 0, wstacking_rms = 0, worst_peak_error = 0;
};

// Images `ms` with uvflow and WSClean's two gridders and checks the agreement on `sky`. With
// `near_ties`, a source's peak may be on another pixel than in WSClean's image if WSClean's image
// ranks that pixel within 0.5 % of its peak: on a random sky the sidelobes of the other sources can
// put a peak between two pixels whose values differ by less than the 0.5 % allowed, and then
// either pixel is the peak. Peak values must agree within `peak_bound`.
Comparison compare(const TempDir& dir, const std::filesystem::path& ms, const std::vector<PointSource>& sky,
                   const Weighting& w, bool near_ties, double peak_bound) {
  SCOPED_TRACE("weighting " + w.wsclean());
  const FitsImage ours = uvflow_image(dir, ms, w);
  const auto wg_file = wsclean_image(dir, ms, w, "-use-wgridder -no-small-inversion", "wgridder");
  const auto ws_file = wsclean_image(dir, ms, w, "", "wstacking");
  const FitsImage wg = read_fits_image(wg_file), ws = read_fits_image(ws_file);
  // For the record: WSClean's wgridder with its default small inversion.
  const FitsImage wg_small = read_fits_image(wsclean_image(dir, ms, w, "-use-wgridder", "wgridder-small"));
  EXPECT_EQ(ours.nx, kNpix);
  EXPECT_EQ(wg.nx, kNpix);
  Comparison c;
  c.uvflow_rms = relative_rms(ours, wg);
  c.wstacking_rms = relative_rms(ws, wg);
  for (auto& s : sky) {
    const int x = kNpix / 2 + s.dx, y = kNpix / 2 + s.dy;
    const auto p = peak_near(wg, x, y), q = peak_near(ours, x, y);
    const double want = wg.pixels[std::size_t(p.second) * kNpix + p.first];
    if (q != p) {
      const double wsclean_there = wg.pixels[std::size_t(q.second) * kNpix + q.first];
      EXPECT_TRUE(near_ties && wsclean_there > want * (1 - 0.005))
          << "source at (" << x << ", " << y << ") peaks at (" << q.first << ", " << q.second << "), in WSClean's image at ("
          << p.first << ", " << p.second << ")";
      std::printf("[%s] source at (%d, %d): peak at (%d, %d), WSClean's at (%d, %d) where it is %.3f %% brighter\n",
                  w.wsclean().c_str(), x, y, q.first, q.second, p.first, p.second, 100 * (want / wsclean_there - 1));
    }
    const double error = std::abs(ours.pixels[std::size_t(p.second) * kNpix + p.first] / want - 1);
    EXPECT_LT(error, peak_bound) << "source at (" << x << ", " << y << "): WSClean " << want;
    c.worst_peak_error = std::max(c.worst_peak_error, error);
  }
  EXPECT_LT(c.uvflow_rms, c.wstacking_rms);
  expect_same_wcs(dir / ("uvflow-" + w.mode + ".fits"), wg_file);
  std::printf("[%s] worst peak error vs wgridder %.3f %%; relative RMS over the inner 80 %%: uvflow vs wgridder %.4f, "
              "w-stacking vs wgridder %.4f (wgridder with small inversion vs without: %.4f)\n",
              w.wsclean().c_str(), 100 * c.worst_peak_error, c.uvflow_rms, c.wstacking_rms, relative_rms(wg_small, wg));
  return c;
}

// The weight of every visibility io.read_ms streams from `ms`, in its order, before and after
// uvw.weighting.
struct Weights {
  std::vector<float> in, out;
};
Weights uvflow_weights(const std::filesystem::path& ms, const Weighting& w) {
  auto read = [&] {
    StageHarness h(io_read_ms::spec(), "cpu", {{"path", ms.string()}});
    h.run_source();
    std::vector<std::shared_ptr<const Payload>> blocks = h.outputs("vis");
    return blocks;
  };
  StageHarness density(uvw_weight_density::spec(), "cpu");
  density.set_input("kernels", geometry_only_kernels(kNpix, kCellArcsec));
  for (auto& b : read()) density.process({{"vis", b}});
  density.finish();
  StageHarness weighting(uvw_weighting::spec(), "cpu", {{"mode", w.mode}, {"robust", w.robust}});
  weighting.set_input("density", density.output<WeightDensity>("density"));
  Weights out;
  const auto blocks = read();
  for (auto& b : blocks) weighting.process({{"vis", b}});
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto& in = static_cast<const VisBlock&>(*blocks[i]);
    out.in.insert(out.in.end(), in.weight.begin(), in.weight.end());
    auto v = weighting.output<VisBlock>("vis", i);
    out.out.insert(out.out.end(), v->weight.begin(), v->weight.end());
  }
  return out;
}

std::vector<PointSource> random_sky(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pos(-95, 95);
  std::uniform_real_distribution<double> flux(0.5, 2.0);
  std::vector<PointSource> sky;
  while (sky.size() < 5) {
    PointSource s{pos(rng), pos(rng), flux(rng)};
    bool close = false;
    for (auto& o : sky) close |= std::abs(o.dx - s.dx) < 10 && std::abs(o.dy - s.dy) < 10;
    if (!close) sky.push_back(s);
  }
  return sky;
}

const std::vector<PointSource> kFixedSky = {{0, 0, 2.0}, {-20, 12, 1.0}, {60, -35, 0.5}, {90, 80, 1.5}, {-100, -95, 1.0}};

class WscleanComparison : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v wsclean > /dev/null 2>&1") != 0)
      FAIL() << "wsclean is not installed: scripts/install-deps.sh --tests installs it";
  }
  TempDir dir_;
};

}  // namespace

// The issue asks 0.5 %; the fixed sky is held to 0.1 % (measured 0.020-0.045 %), which it only
// meets with kernels oversampled 16 times and the kernel table's own grid correction (at 8 with
// Schwab's formula: 0.12-0.19 %, its sources near the edge moved by the formula).
TEST_F(WscleanComparison, FixedSkyNaturalUniformBriggs) {
  SCOPED_TRACE("sky " + sky_to_yaml(kFixedSky, kCellArcsec));
  const auto ms = make_ms(dir_, kFixedSky, 1);
  for (const Weighting& w : {Weighting{"natural"}, Weighting{"uniform"}, Weighting{"briggs", 0}})
    compare(dir_, ms, kFixedSky, w, false, 0.001);
}

TEST_F(WscleanComparison, RandomSkyAndFlags) {
  const auto seed = unsigned(fresh_seed());  // a fresh sky each run; UVFLOW_TEST_SEED replays one
  const auto sky = random_sky(seed);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", sky " + sky_to_yaml(sky, kCellArcsec));
  const auto ms = make_ms(dir_, sky, seed);
  std::mt19937 rng(seed + 1);
  const double robust = std::round(std::uniform_real_distribution<double>(-10, 10)(rng)) / 10;
  // Seed 1214170669 once gave 0.529 % (a 0.55 Jy source 86 pixels out, uniform weighting) when the
  // pipeline oversampled its kernels 8 times: the error of gridding at the nearest kernel sample,
  // spread over the image from the brighter sources. At 16 it gives 0.092 %.
  for (const Weighting& w : {Weighting{"uniform"}, Weighting{"briggs", robust}})
    compare(dir_, ms, sky, w, true, 0.005);
}

// WSClean's imaging weights, stored with -store-imaging-weights (the weight of the visibility's
// cell), against uvw.weighting's (the visibility weight times that), one visibility at a time.
// uvflow computes uv in single precision, so a visibility within 1e-5 of a cell edge may land in
// the next cell: a few in 10^4 may differ.
TEST_F(WscleanComparison, ImagingWeightsEqualWscleans) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("flag seed " + std::to_string(seed));
  const auto ms = make_ms(dir_, kFixedSky, seed);
  for (const Weighting& w : {Weighting{"uniform"}, Weighting{"briggs", 0}, Weighting{"briggs", -1.5},
                             Weighting{"briggs", 1}}) {
    SCOPED_TRACE("weighting " + w.wsclean());
    const auto copy = dir_ / ("weights-" + w.wsclean() + ".ms");
    std::filesystem::copy(ms, copy, std::filesystem::copy_options::recursive);
    wsclean_image(dir_, copy, w, "-use-wgridder -store-imaging-weights", "weights");
    const auto dump = dir_ / "weights.bin", log = dir_ / "weights.log";
    ASSERT_EQ(shell(std::string(kPython) + " " + (source_dir() / "tests" / "wsclean_weights.py").string() + " '" +
                        copy.string() + "' '" + dump.string() + "'",
                    log),
              0)
        << tail(log);
    std::vector<double> theirs(std::filesystem::file_size(dump) / sizeof(double));
    std::ifstream(dump, std::ios::binary).read(reinterpret_cast<char*>(theirs.data()), std::streamsize(theirs.size() * sizeof(double)));
    const Weights ours = uvflow_weights(ms, w);
    ASSERT_EQ(ours.out.size(), theirs.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < theirs.size(); ++i) {
      const double want = ours.in[i] * theirs[i];
      differ += std::abs(ours.out[i] - want) > 1e-6 * std::abs(want);
    }
    std::printf("[%s] %zu visibilities, %zu with a weight differing from WSClean's\n", w.wsclean().c_str(), theirs.size(),
                differ);
    EXPECT_GT(theirs.size(), 50000u);
    EXPECT_LE(differ, theirs.size() / 2000);
  }
}

// The same pipeline switched to w-stacking by one --set (issue 14): at epsilon 1e-5 its image is
// the wgridder's to 1e-3 relative RMS over the whole image and every source peak to 0.05 %, for
// each weighting, on a fresh random sky.
TEST_F(WscleanComparison, WstackingByOneSetMatchesTheWgridder) {
  const auto seed = unsigned(fresh_seed());
  const auto sky = random_sky(seed);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", sky " + sky_to_yaml(sky, kCellArcsec));
  const auto ms = make_ms(dir_, sky, seed);
  for (const Weighting& w : {Weighting{"natural"}, Weighting{"uniform"}, Weighting{"briggs", 0.5}}) {
    SCOPED_TRACE("weighting " + w.wsclean());
    const FitsImage ours = uvflow_image(dir_, ms, w, {"vars.method=wstack", "vars.epsilon=1e-5"});
    const FitsImage wg = read_fits_image(wsclean_image(dir_, ms, w, "-use-wgridder -no-small-inversion", "wgridder"));
    const double rms = relative_rms(ours, wg, 0);
    EXPECT_LT(rms, 1e-3);
    double worst = 0;
    for (auto& src : sky) {
      const auto p = peak_near(wg, kNpix / 2 + src.dx, kNpix / 2 + src.dy);
      const std::size_t at = std::size_t(p.second) * kNpix + p.first;
      worst = std::max(worst, std::abs(double(ours.pixels[at]) / wg.pixels[at] - 1));
    }
    EXPECT_LT(worst, 5e-4);
    std::printf("[%s] w-stacking at epsilon 1e-5 vs the wgridder: relative RMS over the whole image %.2e, worst "
                "peak %.4f %%\n", w.wsclean().c_str(), rms, 100 * worst);
  }
}
