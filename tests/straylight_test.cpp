// The StrayLight stages. image.psf_convolve: every method against a plain double-precision
// Listing 4.1 (tests/support/edge_wrap) for PSFs of 1 to 255 pixels on 5271 x 813, 813 x 5271 and
// 17 x 13 frames, on fixed and fresh random inputs. io.read_fits, io.simulate_frames, image.psf,
// image.column_gain on their own. Every input error: the exception and its text from the stage,
// and a pipeline run of the same case that fails with the input exit code and leaves no file.
#include <fitsio.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/builtin.hpp"
#include "stages/image/column_gain.hpp"
#include "stages/image/psf.hpp"
#include "stages/image/psf_convolve.hpp"
#include "stages/io/read_fits.hpp"
#include "stages/io/simulate_frames.hpp"
#include "tests/support/edge_wrap.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/source_dir.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;

namespace {

using test::as_double;
using test::blank;
using test::expect_input_error;
using test::ImagePtr;
using test::model_psf;
using test::plane;
using test::simulated;
using test::uniform;
constexpr double kTolerance = test::kConvolveTolerance;

// No wisdom file: the tests leave nothing behind (plans are still shared within the process).
std::map<std::string, ParamValue> convolve_params(const std::string& method) {
  return {{"method", method}, {"wisdom", std::string()}};
}

ImagePtr convolve(const ImagePtr& frame, const ImagePtr& psf, const std::string& method) {
  StageHarness h(image_psf_convolve::spec(), "cpu", convolve_params(method));
  h.set_input("psf", psf);
  h.process({{"frame", frame}});
  return h.output<Image>("frame");
}

// FITS files for the readers: float planes, or a table where an image is expected.
void write_fits(const std::filesystem::path& path, const std::vector<long>& axes, const std::vector<float>& v) {
  fitsfile* f = nullptr;
  int status = 0;
  fits_create_file(&f, ("!" + path.string()).c_str(), &status);
  fits_create_img(f, FLOAT_IMG, int(axes.size()), const_cast<long*>(axes.data()), &status);
  std::vector<long> first(axes.size(), 1);
  fits_write_pix(f, TFLOAT, first.data(), long(v.size()), const_cast<float*>(v.data()), &status);
  fits_close_file(f, &status);
  ASSERT_EQ(status, 0) << path;
}

void write_image(const std::filesystem::path& path, const Image& im) {
  write_fits(path, {im.nx, im.ny}, {im.pixels.begin(), im.pixels.end()});
}

void write_table(const std::filesystem::path& path) {
  fitsfile* f = nullptr;
  int status = 0;
  fits_create_file(&f, ("!" + path.string()).c_str(), &status);
  fits_create_img(f, FLOAT_IMG, 0, nullptr, &status);
  char name[] = "FLUX", form[] = "1E";
  char* ttype[] = {name};
  char* tform[] = {form};
  fits_create_tbl(f, BINARY_TBL, 3, 1, ttype, tform, nullptr, "FRAMES", &status);
  fits_close_file(f, &status);
  ASSERT_EQ(status, 0) << path;
}

// ---------------------------------------------------------------- convolution accuracy

class ConvolveMatchesListing41 : public ::testing::TestWithParam<std::tuple<test::ConvolveCase, bool>> {};

TEST_P(ConvolveMatchesListing41, EveryMethod) {
  const auto [c, random] = GetParam();
  test::expect_every_method(c, random, "cpu", convolve,
                            image_psf_convolve::choose_cpu(c.nx, c.ny, c.kx, c.ky) == image_psf_convolve::Method::direct);
}

INSTANTIATE_TEST_SUITE_P(Sizes, ConvolveMatchesListing41,
                         ::testing::Combine(::testing::ValuesIn(test::convolve_cases()), ::testing::Bool()),
                         [](const auto& info) { return test::case_name(std::get<0>(info.param), std::get<1>(info.param)); });

TEST(PsfConvolve, AutoPicksDirectForSmallPsfsAndFftForLarge) {
  using image_psf_convolve::Method;
  EXPECT_EQ(image_psf_convolve::choose_cpu(813, 5271, 9, 9), Method::direct);
  EXPECT_EQ(image_psf_convolve::choose_cpu(5271, 813, 9, 9), Method::direct);
  EXPECT_EQ(image_psf_convolve::choose_cpu(813, 5271, 15, 15), Method::fft);
  EXPECT_EQ(image_psf_convolve::choose_cpu(813, 5271, 63, 63), Method::fft);
  EXPECT_EQ(image_psf_convolve::choose_cpu(813, 5271, 255, 255), Method::fft);
  EXPECT_EQ(image_psf_convolve::choose_cpu(13, 17, 13, 17), Method::direct);
}

TEST(PsfConvolve, OnePsfSpectrumServesTheWholeStream) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ImagePtr psf = uniform(9, 7, rng, 0, 1);
  for (const char* method : {"direct", "fft"}) {
    StageHarness h(image_psf_convolve::spec(), "cpu", convolve_params(method));
    h.set_input("psf", psf);
    std::vector<ImagePtr> frames;
    for (int i = 0; i < 3; ++i) {
      auto f = uniform(40, 30, rng, -1, 1);
      f->index = i;
      frames.push_back(f);
      h.process({{"frame", f}});
    }
    for (int i = 0; i < 3; ++i) {
      auto out = h.output<Image>("frame", i);
      EXPECT_EQ(out->index, i) << method;
      EXPECT_LT(test::relative_frobenius(as_double(*out), test::edge_wrap(plane(*frames[i]), plane(*psf))), kTolerance)
          << method << " frame " << i;
    }
  }
}

// choose_cuda is host code: it needs no device to test.
TEST(PsfConvolveAuto, CudaPicksDirectForSmallPsfsAndFftForLarge) {
  using image_psf_convolve::Method;
  EXPECT_EQ(image_psf_convolve::choose_cuda(813, 5271, 15, 15), Method::direct);
  EXPECT_EQ(image_psf_convolve::choose_cuda(813, 5271, 63, 63), Method::fft);
  EXPECT_EQ(image_psf_convolve::choose_cuda(813, 5271, 255, 255), Method::fft);
}

// ---------------------------------------------------------------- convolution input errors

TEST(PsfConvolveErrors, PsfLargerThanTheFrame) {
  for (auto [kx, ky] : {std::pair{14, 3}, std::pair{3, 18}}) {
    StageHarness h(image_psf_convolve::spec(), "cpu", convolve_params("auto"));
    h.set_input("psf", model_psf(kx, ky));
    expect_input_error([&] { h.process({{"frame", blank(13, 17)}}); }, test::psf_larger_than_13x17(kx, ky));
  }
}

TEST(PsfConvolveErrors, NanInfiniteAndAllZeroPsfs) {
  for (auto& [psf, text] : test::bad_psfs()) {
    StageHarness h(image_psf_convolve::spec(), "cpu", convolve_params("direct"));
    h.set_input("psf", psf);
    expect_input_error([&] { h.process({{"frame", blank(13, 17)}}); }, text);
  }
}

TEST(PsfConvolveErrors, NanAndInfiniteFramePixels) {
  auto nan = blank(13, 17), inf = blank(13, 17);
  nan->pixels[16 * 13 + 12] = NAN;
  inf->pixels[5 * 13 + 0] = -INFINITY;
  for (const char* method : {"direct", "fft"})
    for (auto& [frame, text] : {std::pair{nan, "frame 1 pixel (x 12, y 16) is NaN"},
                                std::pair{inf, "frame 1 pixel (x 0, y 5) is infinite"}}) {
      StageHarness h(image_psf_convolve::spec(), "cpu", convolve_params(method));
      h.set_input("psf", model_psf(3, 3));
      h.process({{"frame", blank(13, 17)}});
      expect_input_error([&] { h.process({{"frame", frame}}); }, text);
      EXPECT_EQ(h.outputs("frame").size(), 1u) << method;
    }
}

TEST(PsfConvolveErrors, FramesOfDifferentSizesInOneStream) {
  StageHarness h(image_psf_convolve::spec(), "cpu", convolve_params("fft"));
  h.set_input("psf", model_psf(3, 3));
  h.process({{"frame", blank(13, 17)}});
  expect_input_error([&] { h.process({{"frame", blank(12, 17)}}); },
                     "frame 1 is 12 x 17 pixels (width x height) but the first frame of the stream (frame 0) was "
                     "13 x 17");
}

// ---------------------------------------------------------------- io.read_fits

TEST(ReadFits, CubesImagesListsAndGlobsStreamEveryPlaneInOrder) {
  test::TempDir dir;
  std::vector<float> cube(4 * 3 * 2), image(4 * 3);
  for (size_t i = 0; i < cube.size(); ++i) cube[i] = float(i);
  for (size_t i = 0; i < image.size(); ++i) image[i] = 100.0f + float(i);
  write_fits(dir / "frames_a.fits", {4, 3, 2}, cube);
  write_fits(dir / "frames_b.fits", {4, 3}, image);
  auto check = [&](StageHarness& h) {
    ASSERT_EQ(h.stage().stream_length(), 3);
    h.run_source();
    for (int i = 0; i < 3; ++i) {
      auto f = h.output<Image>("frames", i);
      EXPECT_EQ(f->index, i);
      ASSERT_EQ(f->nx, 4);
      ASSERT_EQ(f->ny, 3);
      for (int p = 0; p < 12; ++p) EXPECT_EQ(f->pixels[p], i < 2 ? cube[i * 12 + p] : image[p]) << i << " " << p;
    }
  };
  StageHarness glob(io_read_fits::spec(), "cpu", {{"path", (dir / "frames_*.fits").string()}});
  check(glob);
  StageHarness list(io_read_fits::spec(), "cpu",
                    {{"paths", std::vector<std::string>{(dir / "frames_a.fits").string(), (dir / "frames_b.fits").string()}}});
  check(list);
}

TEST(ReadFits, ImageInTheFirstExtension) {
  test::TempDir dir;
  fitsfile* f = nullptr;
  int status = 0;
  fits_create_file(&f, (dir / "ext.fits").c_str(), &status);
  fits_create_img(f, FLOAT_IMG, 0, nullptr, &status);
  long axes[2] = {3, 2};
  fits_create_img(f, FLOAT_IMG, 2, axes, &status);
  float v[6] = {1, 2, 3, 4, 5, 6};
  long first[2] = {1, 1};
  fits_write_pix(f, TFLOAT, first, 6, v, &status);
  fits_close_file(f, &status);
  ASSERT_EQ(status, 0);
  StageHarness h(io_read_fits::spec(), "cpu", {{"path", (dir / "ext.fits").string()}});
  h.run_source();
  auto img = h.output<Image>("frames");
  EXPECT_EQ(img->nx, 3);
  EXPECT_EQ(img->pixels[5], 6.0f);
  expect_input_error([&] { StageHarness(io_read_fits::spec(), "cpu", {{"path", (dir / "ext.fits").string()}, {"hdu", std::int64_t(1)}}); },
                     "ext.fits, HDU 1: holds no image (NAXIS = 0)");
}

TEST(ReadFits, UnreadableFilesAndTablesAreInputErrorsNamingFileAndHdu) {
  test::TempDir dir;
  dir.write("junk.fits", "this is not a FITS file\n");
  write_table(dir / "table.fits");
  write_fits(dir / "line.fits", {5}, {1, 2, 3, 4, 5});
  expect_input_error([&] { StageHarness(io_read_fits::spec(), "cpu", {{"path", (dir / "junk.fits").string()}}); },
                     "file " + (dir / "junk.fits").string() + ": cannot open as FITS");
  expect_input_error([&] { StageHarness(io_read_fits::spec(), "cpu", {{"path", (dir / "missing.fits").string()}}); },
                     "file " + (dir / "missing.fits").string() + ": cannot open as FITS");
  expect_input_error([&] { StageHarness(io_read_fits::spec(), "cpu", {{"path", (dir / "table.fits").string()}}); },
                     "file " + (dir / "table.fits").string() + ", HDU 2: is a binary table, not an image");
  expect_input_error(
      [&] { StageHarness(io_read_fits::spec(), "cpu", {{"path", (dir / "table.fits").string()}, {"hdu", std::int64_t(3)}}); },
      "table.fits has no HDU 3 (it has 2)");
  expect_input_error([&] { StageHarness(io_read_fits::spec(), "cpu", {{"path", (dir / "line.fits").string()}}); },
                     "line.fits, HDU 1: is a 1-D array of 5 values, not an image");
  expect_input_error([&] { StageHarness(io_read_fits::spec(), "cpu", {{"path", (dir / "none_*.fits").string()}}); },
                     "no file matches the pattern");
  // A bad file anywhere in a list stops the stream before its first frame.
  write_fits(dir / "good.fits", {2, 2}, {1, 2, 3, 4});
  expect_input_error(
      [&] {
        StageHarness(io_read_fits::spec(), "cpu",
                     {{"paths", std::vector<std::string>{(dir / "good.fits").string(), (dir / "table.fits").string()}}});
      },
      "table.fits, HDU 2: is a binary table");
}

// ---------------------------------------------------------------- io.simulate_frames

TEST(SimulateFrames, FrameDependsOnlyOnSeedAndIndex) {
  auto a = simulated(64, 48, 4, 3), b = simulated(64, 48, 6, 3), c = simulated(64, 48, 4, 2),
       d = simulated(64, 48, 4, 3, 2);
  EXPECT_EQ(a->index, 3);
  EXPECT_TRUE(std::equal(a->pixels.begin(), a->pixels.end(), b->pixels.begin()));
  EXPECT_FALSE(std::equal(a->pixels.begin(), a->pixels.end(), c->pixels.begin()));
  EXPECT_FALSE(std::equal(a->pixels.begin(), a->pixels.end(), d->pixels.begin()));
}

TEST(SimulateFrames, DistinctFramesAreMadeOnceAndRepeated) {
  StageHarness h(io_simulate_frames::spec(), "cpu",
                 {{"width", std::int64_t(64)}, {"height", std::int64_t(48)}, {"count", std::int64_t(5)},
                  {"distinct", std::int64_t(2)}});
  h.run_source();
  auto f1 = h.output<Image>("frames", 1), f3 = h.output<Image>("frames", 3);
  EXPECT_EQ(f3->index, 3);
  EXPECT_EQ(f3->pixels.data(), f1->pixels.data()) << "frame 3 shares frame 1's pixels";
  auto fresh = simulated(64, 48, 5, 1);
  EXPECT_TRUE(std::equal(f1->pixels.begin(), f1->pixels.end(), fresh->pixels.begin()));
}

TEST(SimulateFrames, BackgroundNoiseAndSources) {
  StageHarness h(io_simulate_frames::spec(), "cpu",
                 {{"width", std::int64_t(813)}, {"height", std::int64_t(600)}, {"count", std::int64_t(1)},
                  {"sources", std::int64_t(0)}, {"background", 50.0}, {"noise", 3.0}});
  h.run_source();
  auto f = h.output<Image>("frames");
  ASSERT_EQ(f->pixels.size(), 813u * 600);
  // Without sources: the background within its +-20 % variation, and the noise about its sigma
  // (pixel-to-pixel differences remove the smooth background: their variance is 2 sigma^2).
  double mean = 0, diff2 = 0;
  for (int y = 0; y < 600; ++y)
    for (int x = 0; x < 813; ++x) {
      mean += f->pixels[y * 813 + x];
      if (x) diff2 += std::pow(f->pixels[y * 813 + x] - f->pixels[y * 813 + x - 1], 2);
    }
  mean /= 813.0 * 600;
  EXPECT_NEAR(mean, 50, 0.5);
  EXPECT_NEAR(std::sqrt(diff2 / (812.0 * 600) / 2), 3.0, 0.1);
  auto with = simulated(813, 600);
  EXPECT_GT(*std::max_element(with->pixels.begin(), with->pixels.end()), 500.0f) << "sources 5x the background";
}

// ---------------------------------------------------------------- image.psf

TEST(Psf, ModelIsNormalisedCentredAndHasPowerLawWings) {
  StageHarness h(image_psf::spec(), "cpu",
                 {{"size_x", std::int64_t(201)}, {"size_y", std::int64_t(151)}, {"core_sigma", 2.0},
                  {"wing_amplitude", 1e-2}, {"wing_index", 2.5}});
  h.run_source();
  auto p = h.output<Image>("psf");
  ASSERT_EQ(p->nx, 201);
  ASSERT_EQ(p->ny, 151);
  double sum = 0;
  for (float v : p->pixels) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-5);
  auto at = [&](int x, int y) { return double(p->pixels[y * 201 + x]); };
  EXPECT_EQ(std::max_element(p->pixels.begin(), p->pixels.end()) - p->pixels.begin(), 75 * 201 + 100);
  EXPECT_DOUBLE_EQ(at(100 + 7, 75), at(100 - 7, 75));
  EXPECT_DOUBLE_EQ(at(100, 75 + 7), at(100 + 7, 75));
  // Far from the core (r >> sigma) the wings fall as r^-2.5.
  EXPECT_NEAR(std::log(at(100 + 40, 75) / at(100 + 80, 75)) / std::log(2.0), 2.5, 0.01);
}

TEST(Psf, FileIsReadAndCheckedBeforeTheRun) {
  test::TempDir dir;
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto psf = uniform(7, 5, rng, 0, 1);
  write_image(dir / "psf.fits", *psf);
  StageHarness h(image_psf::spec(), "cpu",
                 {{"source", std::string("file")}, {"path", (dir / "psf.fits").string()}, {"normalise", false}});
  h.run_source();
  auto got = h.output<Image>("psf");
  EXPECT_TRUE(std::equal(got->pixels.begin(), got->pixels.end(), psf->pixels.begin()));

  auto bad = blank(7, 5);
  write_image(dir / "zero.fits", *bad);
  bad->pixels[9] = NAN;
  write_image(dir / "nan.fits", *bad);
  expect_input_error([&] { StageHarness(image_psf::spec(), "cpu", {{"source", std::string("file")}, {"path", (dir / "nan.fits").string()}}); },
                     "nan.fits, HDU 1: PSF pixel (x 2, y 1) is NaN");
  expect_input_error([&] { StageHarness(image_psf::spec(), "cpu", {{"source", std::string("file")}, {"path", (dir / "zero.fits").string()}}); },
                     "zero.fits, HDU 1: PSF is all zero");
  EXPECT_THROW(StageHarness(image_psf::spec(), "cpu", {{"source", std::string("file")}}), ParamError);
}

// ---------------------------------------------------------------- image.column_gain

TEST(ColumnGain, MultipliesEachColumnByItsGain) {
  test::TempDir dir;
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto frame = uniform(37, 11, rng, -5, 5);
  frame->index = 4;
  auto gains = uniform(37, 1, rng, 0.5, 1.5);
  write_image(dir / "gains.fits", *gains);
  write_fits(dir / "gains1d.fits", {37}, {gains->pixels.begin(), gains->pixels.end()});
  auto expect = [&](StageHarness& h, const std::function<double(int)>& gain) {
    h.process({{"frame", frame}});
    auto out = h.output<Image>("frame");
    EXPECT_EQ(out->index, 4);
    for (int y = 0; y < 11; ++y)
      for (int x = 0; x < 37; ++x)
        EXPECT_FLOAT_EQ(out->pixels[y * 37 + x], float(frame->pixels[y * 37 + x] * gain(x))) << x << " " << y;
  };
  for (const char* file : {"gains.fits", "gains1d.fits"}) {
    StageHarness h(image_column_gain::spec(), "cpu", {{"source", std::string("file")}, {"path", (dir / file).string()}});
    expect(h, [&](int x) { return double(gains->pixels[x]); });
  }
  StageHarness flat(image_column_gain::spec(), "cpu", {{"gain", 1.25}});
  expect(flat, [](int) { return 1.25; });
  StageHarness linear(image_column_gain::spec(), "cpu", {{"source", std::string("linear")}, {"gain", 2.0}, {"slope", 0.01}});
  expect(linear, [](int x) { return 2.0 + 0.01 * (x - 18); });
}

TEST(ColumnGain, GainVectorMustMatchTheFrameWidth) {
  test::TempDir dir;
  write_fits(dir / "g.fits", {36}, std::vector<float>(36, 1.0f));
  write_fits(dir / "g2.fits", {36, 2}, std::vector<float>(72, 1.0f));
  StageHarness h(image_column_gain::spec(), "cpu", {{"source", std::string("file")}, {"path", (dir / "g.fits").string()}});
  auto frame = blank(37, 11);
  frame->index = 2;
  expect_input_error([&] { h.process({{"frame", frame}}); },
                     "frame 2 is 37 pixels wide but file " + (dir / "g.fits").string() + ", HDU 1 holds 36 column gains");
  expect_input_error(
      [&] { StageHarness(image_column_gain::spec(), "cpu", {{"source", std::string("file")}, {"path", (dir / "g2.fits").string()}}); },
      "expected a 1-D array or a 1 x W image of gains, found 36 x 2");
}

TEST(ColumnGain, FrameWhosePixelsAreNotNxTimesNyIsRefused) {
  StageHarness h(image_column_gain::spec(), "cpu", {{"gain", 1.25}});
  auto frame = blank(37, 11);
  frame->index = 3;
  frame->nx = 40;
  expect_input_error([&] { h.process({{"frame", frame}}); }, "frame 3 has 407 pixels, not nx * ny = 40 x 11");
}

// ---------------------------------------------------------------- pipelines

struct Pipelines : ::testing::Test {
  Registry reg;
  test::TempDir dir;
  void SetUp() override { register_builtin_stages(reg); }
  // Runs `yaml` in the temporary folder; expects it to fail on an input error naming `text`, with
  // no file left under out/.
  void expect_fails_cleanly(const std::string& yaml, const std::string& text) {
    Plan p = load_plan(dir.write("p.yaml", yaml), {}, reg);
    std::filesystem::current_path(dir.path());
    try {
      run_plan(p);
      ADD_FAILURE() << "the run succeeded; expected an input error saying '" << text << "'";
    } catch (const StageError& e) {
      EXPECT_EQ(e.code(), ExitCode::input) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what();
    }
    if (std::filesystem::exists(dir / "out")) {
      for (auto& f : std::filesystem::recursive_directory_iterator(dir / "out"))
        EXPECT_FALSE(f.is_regular_file()) << "left behind: " << f.path();
    }
  }
};

std::string convolve_pipeline(const std::string& frames, const std::string& psf) {
  return "schema: uvflow/1\nstages:\n  - {id: frames, " + frames + "}\n  - {id: psf, " + psf +
         "}\n"
         "  - {id: convolve, type: image.psf_convolve, in: {frame: frames, psf: psf}}\n"
         "  - {id: fits, type: io.write_fits, params: {path: 'out/f_{index}.fits'}, in: {image: convolve}}\n";
}

const std::string kSmallFrames = "type: io.simulate_frames, params: {width: 13, height: 17, count: 3}";

TEST_F(Pipelines, PsfLargerThanTheFrame) {
  expect_fails_cleanly(convolve_pipeline(kSmallFrames, "type: image.psf, params: {size_x: 15, size_y: 15}"),
                       "is larger than frame 0 (13 x 17)");
}

TEST_F(Pipelines, NanAndAllZeroPsfFiles) {
  auto bad = blank(5, 5);
  write_image(dir / "zero.fits", *bad);
  bad->pixels[0] = NAN;
  write_image(dir / "nan.fits", *bad);
  expect_fails_cleanly(convolve_pipeline(kSmallFrames, "type: image.psf, params: {source: file, path: nan.fits}"),
                       "nan.fits, HDU 1: PSF pixel (x 0, y 0) is NaN");
  expect_fails_cleanly(convolve_pipeline(kSmallFrames, "type: image.psf, params: {source: file, path: zero.fits}"),
                       "zero.fits, HDU 1: PSF is all zero");
}

TEST_F(Pipelines, FramesOfDifferentSizes) {
  write_image(dir / "a.fits", *blank(13, 17));
  write_image(dir / "b.fits", *blank(12, 17));
  expect_fails_cleanly(convolve_pipeline("type: io.read_fits, params: {paths: [a.fits, a.fits, b.fits]}",
                                         "type: image.psf, params: {size_x: 3, size_y: 3}"),
                       "frame 2 is 12 x 17 pixels (width x height) but the first frame of the stream (frame 0) was 13 x 17");
}

TEST_F(Pipelines, UnreadableFileAndTableHdu) {
  dir.write("junk.fits", "not FITS");
  write_table(dir / "table.fits");
  const std::string psf = "type: image.psf, params: {size_x: 3, size_y: 3}";
  expect_fails_cleanly(convolve_pipeline("type: io.read_fits, params: {path: junk.fits}", psf),
                       "file junk.fits: cannot open as FITS");
  expect_fails_cleanly(convolve_pipeline("type: io.read_fits, params: {path: table.fits}", psf),
                       "file table.fits, HDU 2: is a binary table, not an image");
  // `uvflow check` finds it too, without running anything.
  std::filesystem::current_path(dir.path());
  Plan p = load_plan(dir.write("t.yaml", convolve_pipeline("type: io.read_fits, params: {path: table.fits}", psf)), {}, reg);
  try {
    dry_run_prepare(p);
    ADD_FAILURE() << "check passed a table";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HDU 2: is a binary table"), std::string::npos) << e.what();
  }
}

// The shipped pipeline, shrunk by overrides: every frame written equals the reference applied to
// the simulated frame times the column gains.
TEST_F(Pipelines, StraylightPipelineWritesCorrectedConvolvedFrames) {
  const auto file = test::source_dir() / "pipelines/straylight.yaml";
  Plan p = load_plan(file, {"frames.count=3", "frames.width=40", "frames.height=30", "psf.size_x=9", "psf.size_y=7"}, reg);
  std::filesystem::current_path(dir.path());
  run_plan(p);
  StageHarness read(io_read_fits::spec(), "cpu", {{"path", (dir / "out/straylight/frame_*.fits").string()}});
  ASSERT_EQ(read.stage().stream_length(), 3);
  read.run_source();
  auto params = [&](const std::string& id) {
    auto st = std::find_if(p.stages.begin(), p.stages.end(), [&](const StageInstance& s) { return s.id == id; });
    return std::map<std::string, ParamValue>(st->params.values().begin(), st->params.values().end());
  };
  StageHarness make_psf(image_psf::spec(), "cpu", params("psf"));
  make_psf.run_source();
  auto psf = make_psf.output<Image>("psf");
  const auto gain_params = params("gain");
  const double gain = std::get<double>(gain_params.at("gain")), slope = std::get<double>(gain_params.at("slope"));
  for (int i = 0; i < 3; ++i) {
    auto in = simulated(40, 30, 3, i);
    auto corrected = blank(40, 30);
    for (int y = 0; y < 30; ++y)
      for (int x = 0; x < 40; ++x)
        corrected->pixels[y * 40 + x] = in->pixels[y * 40 + x] * float(gain + slope * (x - 19.5));
    auto out = read.output<Image>("frames", i);
    EXPECT_LT(test::relative_frobenius(as_double(*out), test::edge_wrap(plane(*corrected), plane(*psf))), kTolerance)
        << "frame " << i;
  }
}

}  // namespace
