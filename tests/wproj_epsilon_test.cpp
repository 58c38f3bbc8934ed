// kernels.wproj's epsilon and automatic settings: the w-planes, oversampling and kernel FFT chosen
// for epsilon meet the requested accuracy (the largest error of a source's peak relative to its flux)
// against a direct DFT, for a narrow and a wide field with sources out to the image corners; left
// automatic they follow the field; the warning when given planes are too few names the parameters
// that help; the refusal when the FFT would exceed max_conv_size names the memory and the parameter.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "tests/support/image_vs_dft.hpp"
#include "tests/support/wproj_stack.hpp"

using namespace uvflow;
using namespace uvflow::test;

namespace {

// Sources in every quadrant, three of them 4 pixels from two edges (|n - 1| near its largest).
const std::vector<PointSource> kSky = {{0, 0, 1.5}, {60, 60, 1.0}, {-60, 59, 1.2}, {-25, 18, 0.8}, {58, -60, 1.0}};

std::string capture_log(const std::function<void()>& f) {
  std::ostringstream log;
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_st>(log)));
  try {
    f();
  } catch (...) {
    spdlog::set_default_logger(previous);
    throw;
  }
  spdlog::set_default_logger(previous);
  return log.str();
}

void check(double cell_arcsec, double epsilon, double padding) {
  ImagingSetup setup;
  setup.cell_arcsec = cell_arcsec;
  setup.sets = {"kernels.epsilon=" + std::to_string(epsilon), "kernels.padding=" + std::to_string(padding)};
  ImageVsDft r;
  const std::string log = capture_log([&] { r = image_vs_dft(setup, kSky); });
  const auto at = log.find("kernels.wproj: ");
  std::printf("[%g arcsec, padding %g, epsilon %g] worst peak error %.3g (RMS/peak %.3g, rel L2 %.3g); %s\n", cell_arcsec, padding, epsilon,
              r.worst_peak_error, r.rms_over_peak, r.rel_l2,
              at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at).c_str());
  EXPECT_LT(r.worst_peak_error, epsilon);
  EXPECT_EQ(log.find("truncated"), std::string::npos) << log;
  EXPECT_EQ(log.find("too few"), std::string::npos) << log;
}

}  // namespace

// 2 and 14-degree fields (|n - 1| up to 3.5e-4 and 1.6e-2); 1e-3 needs padding 2.
TEST(WprojEpsilon, NarrowFieldMeets1em2) { check(60, 1e-2, 1.2); }
TEST(WprojEpsilon, NarrowFieldMeets1em3) { check(60, 1e-3, 2); }
TEST(WprojEpsilon, WideFieldMeets1em2) { check(400, 1e-2, 1.2); }
TEST(WprojEpsilon, WideFieldMeets1em3) { check(400, 1e-3, 2); }

// The spheroidal's edge error and the lookup's grow as padding falls: 1e-3 at padding 1.2 is refused.
// Refused when the stage is configured, before any data.
TEST(WprojEpsilon, RefusesAnEpsilonThePaddingCannotReach) {
  try {
    StageHarness h(kernels_wproj::spec(), "cpu",
                   {{"image_size", std::int64_t(128)}, {"cell_arcsec", 400.0}, {"epsilon", 1e-3}, {"cache_dir", std::string()}});
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("epsilon 0.001 needs a kernel oversampling above 8 at padding 1.2; raise "
                                         "epsilon or padding"),
              std::string::npos)
        << e.what();
  }
}

// The log of kernels.wproj for a 128-pixel image of 400 arcsec cells (a 14-degree field) with |w| up
// to 200, w_planes and oversample as given (0: automatic).
std::string wproj_log(int w_planes, int oversample) {
  return capture_log([&] {
    StageHarness h(kernels_wproj::spec(), "cpu",
                   {{"image_size", std::int64_t(128)}, {"cell_arcsec", 400.0}, {"w_planes", std::int64_t(w_planes)},
                    {"oversample", std::int64_t(oversample)}, {"cache_dir", std::string()}, {"layouts", std::string("quarter")}});
    h.set_input("info", w_stats_info(200, 0, 100));
    h.process();
  });
}

// OSKAR's plane count given on a 14-degree field (26 for |w| up to 200): the w-planes, not the FFT
// size, set the error, and the warning says so. Left automatic, the planes are enough.
TEST(WprojEpsilon, TooFewPlanesWarnNamesPlanesAndEpsilon) {
  const std::string log = wproj_log(26, 4);
  EXPECT_NE(log.find("26 w-planes are too few for this field"), std::string::npos) << log;
  EXPECT_NE(log.find("leave w_planes 0 (automatic, chosen for this field), raise it"), std::string::npos) << log;
  EXPECT_NE(log.find("max_conv_size and padding do not help"), std::string::npos) << log;
  const std::string automatic = wproj_log(0, 4);
  EXPECT_EQ(automatic.find("too few"), std::string::npos) << automatic;
  EXPECT_EQ(automatic.find("truncated"), std::string::npos) << automatic;
  EXPECT_NE(automatic.find("(automatic, for about 0.001)"), std::string::npos) << automatic;
}

// The automatic settings on a 14-degree field with |w| up to 200: w_planes from the phase error at
// the image corners (2 pi delta_w |n - 1| within sqrt(0.4e-3 / 0.05), delta_w the largest w error,
// half the last gap), oversample the smallest that meets the lookup's share of 1e-3 (14 at padding
// 1.2, 8 at padding 2), and an FFT that holds the widest kernel.
TEST(WprojEpsilon, AutomaticSettingsFollowTheField) {
  for (double padding : {1.2, 2.0}) {
    const double w = 200, cell = 400 * kArcsecToRad;
    StageHarness h(kernels_wproj::spec(), "cpu",
                   {{"image_size", std::int64_t(128)}, {"cell_arcsec", 400.0}, {"padding", padding},
                    {"cache_dir", std::string()}, {"layouts", std::string("quarter")}});
    h.set_input("info", w_stats_info(w, 0, w / 2));
    h.process();
    const auto ks = h.output<KernelStack>("kernels");
    const double l = 64 * std::sin(cell), n1 = 1 - std::sqrt(1 - 2 * l * l);
    const double allowed = std::sqrt(0.4e-3 / 0.05) / (2 * M_PI * n1);
    auto w_error = [&](int planes) {  // the largest w error with this many planes
      const double w_scale = (planes - 1.0) * (planes - 1) / ks->max_w;
      return (std::sqrt(w * w_scale) + 0.5) / w_scale;
    };
    std::printf("padding %g: %d planes (w error %.3g, allowed %.3g), oversample %d, FFT %d\n", padding, ks->planes,
                w_error(ks->planes), allowed, ks->oversample, ks->conv_size);
    EXPECT_LE(w_error(ks->planes), allowed * 1.01) << "enough planes";
    EXPECT_GT(w_error(ks->planes - 2), allowed) << "not more than needed";
    EXPECT_EQ(ks->oversample, padding == 2.0 ? 8 : 14);
    EXPECT_EQ(ks->truncated_planes, 0);
    const int widest = *std::max_element(ks->support.begin(), ks->support.end());
    EXPECT_GT(widest, (ks->conv_size / 2 - 2 - ks->oversample / 2) / ks->oversample / 2) << "FFT not far larger";
  }
}

// What kernels.wproj says when it refuses `params` for |w| up to 3000 (rms 1500); "" if it did not.
static std::string refusal(std::map<std::string, ParamValue> params) {
  StageHarness h(kernels_wproj::spec(), "cpu", std::move(params));
  h.set_input("info", w_stats_info(3000, 0, 1500));
  try {
    h.process();
  } catch (const InputError& e) {
    std::printf("%s\n", e.what());
    return e.what();
  }
  return "";
}

// A 2048-pixel image of 16 arcsec cells (a 9-degree field) at padding 2 with |w| up to 3000 at epsilon 1e-3
// needs kernels wider than a 2000-point FFT holds: refused before anything is computed.
TEST(WprojEpsilon, RefusesAnFftAboveMaxConvSizeNamingMemoryAndParameter) {
  const std::string m = refusal({{"image_size", std::int64_t(2048)}, {"cell_arcsec", 16.0}, {"padding", 2.0},
                                 {"epsilon", 1e-3}, {"cache_dir", std::string()}});
  EXPECT_NE(m.find("kernels.wproj: epsilon 0.001 needs kernel FFTs of "), std::string::npos) << m;
  EXPECT_NE(m.find("of kernels for "), std::string::npos) << m;
  EXPECT_NE(m.find("max_conv_size is 2000: raise max_conv_size to "), std::string::npos) << m;
}

// The same field at the automatic settings: refused the same way, naming the oversample as what else helps.
TEST(WprojEpsilon, AutomaticSettingsRefuseAnFftAboveMaxConvSize) {
  const std::string m =
      refusal({{"image_size", std::int64_t(2048)}, {"cell_arcsec", 16.0}, {"padding", 2.0}, {"cache_dir", std::string()}});
  EXPECT_NE(m.find("kernels.wproj: the automatic settings need kernel FFTs of "), std::string::npos) << m;
  EXPECT_NE(m.find("of kernels for "), std::string::npos) << m;
  EXPECT_NE(m.find("max_conv_size is 2000: raise max_conv_size to "), std::string::npos) << m;
  EXPECT_NE(m.find(", or set a smaller oversample"), std::string::npos) << m;
}

// The FFT holds the widest kernel without truncation, and is not far larger than it needs: a
// 14-degree field at padding 2 with |w| up to 300 and 1000 (widest supports 38 and about 100 cells).
TEST(WprojEpsilon, SizesTheFftForTheWidestKernel) {
  for (double max_w : {300.0, 1000.0}) {
    StageHarness h(kernels_wproj::spec(), "cpu",
                   {{"image_size", std::int64_t(256)}, {"cell_arcsec", 200.0}, {"padding", 2.0}, {"epsilon", 1e-2},
                    {"cache_dir", std::string()}, {"layouts", std::string("quarter")}});
    h.set_input("info", w_stats_info(max_w, 0, max_w / 2));
    h.process();
    const auto ks = h.output<KernelStack>("kernels");
    const int widest = *std::max_element(ks->support.begin(), ks->support.end());
    const int room = (ks->conv_size / 2 - 2 - ks->oversample / 2) / ks->oversample;
    std::printf("|w| %g: %d planes, oversample %d, FFT %d: widest support %d, room for %d\n", max_w, ks->planes,
                ks->oversample, ks->conv_size, widest, room);
    EXPECT_EQ(ks->truncated_planes, 0);
    EXPECT_LE(widest, room);
    EXPECT_GT(widest, room / 2);
  }
}
