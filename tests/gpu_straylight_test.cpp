// The StrayLight stages' cuda backends. image.psf_convolve: methods direct, fft and auto against
// the double-precision Listing 4.1 (tests/support/edge_wrap) on the cases of the cpu test (PSFs of
// 1 to 255 pixels on 5271 x 813 and 813 x 5271 frames, and up to the frame's size on 17 x 13
// frames), fixed and fresh random inputs (the seed is printed); a stream of frames longer than the
// ring of non-finite checks; every input error with the cpu backend's message. image.column_gain:
// cuda equals cpu exactly. pipelines/straylight_gpu.yaml, shrunk, against pipelines/straylight.yaml
// on the cpu, with the frames crossing the bus once each way; a NaN frame fails the GPU run
// cleanly. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/error.hpp"
#include "runtime/harness.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/image/column_gain.hpp"
#include "stages/image/psf_convolve.hpp"
#include "stages/io/read_fits.hpp"
#include "stages/io/write_fits.hpp"
#include "tests/support/edge_wrap.hpp"
#include "tests/support/seeds.hpp"
#include "tests/support/source_dir.hpp"
#include "tests/support/temp_dir.hpp"

using namespace uvflow;
using test::as_double;
using test::blank;
using test::expect_input_error;
using test::ImagePtr;
using test::model_psf;
using test::plane;
using test::uniform;

namespace {

constexpr double kTolerance = test::kConvolveTolerance;

// The harnesses have their own streams: copies are made on this one and waited for.
const device::Stream& copy_stream() {
  static const device::Stream s = device::Stream::create();
  return s;
}

ImagePtr moved(const ImagePtr& p, Location to) {
  auto out = std::static_pointer_cast<const Image>(p->moved_to(to, copy_stream(), false));
  copy_stream().synchronize();
  return out;
}

ImagePtr on_host(const Image& im) { return moved(std::make_shared<Image>(im), Location::host); }

std::map<std::string, ParamValue> with_method(const std::string& method) { return {{"method", method}}; }

// Host frames through one cuda image.psf_convolve (uploaded first), finish() included (it raises
// the last frames' non-finite pixels); the outputs back on the host.
std::vector<ImagePtr> convolve_cuda(const std::vector<ImagePtr>& frames, const ImagePtr& psf, const std::string& method) {
  StageHarness h(image_psf_convolve::spec(), "cuda", with_method(method));
  h.set_input("psf", psf);
  for (auto& f : frames) h.process({{"frame", moved(f, Location::device)}});
  h.finish();
  std::vector<ImagePtr> out;
  for (auto& p : h.outputs("frame")) {
    auto im = std::static_pointer_cast<const Image>(p);
    EXPECT_EQ(im->pixels.location(), Location::device);
    out.push_back(on_host(*im));
  }
  return out;
}

ImagePtr convolve_cuda(const ImagePtr& frame, const ImagePtr& psf, const std::string& method) {
  return convolve_cuda(std::vector<ImagePtr>{frame}, psf, method).at(0);
}

bool no_device() { return device::count() == 0; }

// ---------------------------------------------------------------- convolution accuracy

class ConvolveCudaMatchesListing41 : public ::testing::TestWithParam<std::tuple<test::ConvolveCase, bool>> {
 protected:
  void SetUp() override {
    if (no_device()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(ConvolveCudaMatchesListing41, EveryMethod) {
  const auto [c, random] = GetParam();
  test::expect_every_method(c, random, "cuda",
                            [](const ImagePtr& f, const ImagePtr& p, const std::string& m) { return convolve_cuda(f, p, m); },
                            image_psf_convolve::choose_cuda(c.nx, c.ny, c.kx, c.ky) == image_psf_convolve::Method::direct);
}

INSTANTIATE_TEST_SUITE_P(Sizes, ConvolveCudaMatchesListing41,
                         ::testing::Combine(::testing::ValuesIn(test::convolve_cases()), ::testing::Bool()),
                         [](const auto& info) { return test::case_name(std::get<0>(info.param), std::get<1>(info.param)); });

class StraylightGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (no_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// More frames than the ring of non-finite checks (64 slots): one PSF upload or spectrum serves the
// stream, every frame keeps its index and matches the reference.
TEST_F(StraylightGpu, OnePsfServesALongStream) {
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  ImagePtr psf = uniform(9, 7, rng, 0, 1);
  std::vector<ImagePtr> frames;
  for (int i = 0; i < 70; ++i) {
    auto f = uniform(40, 30, rng, -1, 1);
    f->index = i;
    frames.push_back(f);
  }
  for (const char* method : {"direct", "fft"}) {
    const auto out = convolve_cuda(frames, psf, method);
    ASSERT_EQ(out.size(), frames.size()) << method;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      EXPECT_EQ(out[i]->index, std::int64_t(i)) << method;
      EXPECT_LT(test::relative_frobenius(as_double(*out[i]), test::edge_wrap(plane(*frames[i]), plane(*psf))), kTolerance)
          << method << " frame " << i;
    }
  }
}

// ---------------------------------------------------------------- convolution input errors

TEST_F(StraylightGpu, PsfLargerThanTheFrame) {
  for (auto [kx, ky] : {std::pair{14, 3}, std::pair{3, 18}}) {
    StageHarness h(image_psf_convolve::spec(), "cuda", with_method("auto"));
    h.set_input("psf", model_psf(kx, ky));
    auto frame = moved(blank(13, 17), Location::device);
    expect_input_error([&] { h.process({{"frame", frame}}); }, test::psf_larger_than_13x17(kx, ky));
  }
}

TEST_F(StraylightGpu, NanInfiniteAndAllZeroPsfs) {
  for (auto& [psf, text] : test::bad_psfs())
    for (const char* method : {"direct", "fft"}) {
      StageHarness h(image_psf_convolve::spec(), "cuda", with_method(method));
      h.set_input("psf", psf);
      auto frame = moved(blank(13, 17), Location::device);
      expect_input_error([&] { h.process({{"frame", frame}}); }, text);
    }
}

// Found on the device: raised at a later frame or at the end of the stream, with the cpu's text.
TEST_F(StraylightGpu, NanAndInfiniteFramePixels) {
  auto nan = blank(13, 17), inf = blank(13, 17);
  nan->pixels[16 * 13 + 12] = NAN;
  inf->pixels[5 * 13 + 0] = -INFINITY;
  for (const char* method : {"direct", "fft"})
    for (auto& [frame, text] : {std::pair{nan, "frame 1 pixel (x 12, y 16) is NaN"},
                                std::pair{inf, "frame 1 pixel (x 0, y 5) is infinite"}}) {
      SCOPED_TRACE(method);
      StageHarness h(image_psf_convolve::spec(), "cuda", with_method(method));
      h.set_input("psf", model_psf(3, 3));
      h.process({{"frame", moved(blank(13, 17), Location::device)}});
      h.process({{"frame", moved(frame, Location::device)}});
      expect_input_error(
          [&] {
            h.process({{"frame", moved(blank(13, 17), Location::device)}});
            h.finish();
          },
          text);
    }
  // The first non-finite pixel in row-major order is named.
  auto two = blank(13, 17);
  two->pixels[9 * 13 + 4] = INFINITY;
  two->pixels[3 * 13 + 11] = NAN;
  expect_input_error([&] { convolve_cuda(std::vector<ImagePtr>{two}, model_psf(3, 3), "direct"); },
                     "frame 0 pixel (x 11, y 3) is NaN");
}

TEST_F(StraylightGpu, FramesOfDifferentSizesInOneStream) {
  for (const char* method : {"direct", "fft"}) {
    StageHarness h(image_psf_convolve::spec(), "cuda", with_method(method));
    h.set_input("psf", model_psf(3, 3));
    h.process({{"frame", moved(blank(13, 17), Location::device)}});
    auto other = moved(blank(12, 17), Location::device);
    expect_input_error([&] { h.process({{"frame", other}}); },
                       "frame 1 is 12 x 17 pixels (width x height) but the first frame of the stream (frame 0) was "
                       "13 x 17");
  }
}

// ---------------------------------------------------------------- image.column_gain

// The same float products: bitwise equal, for every gain source; a width that differs from the
// file's is the cpu's input error.
TEST_F(StraylightGpu, ColumnGainCudaEqualsCpu) {
  test::TempDir dir;
  const unsigned seed = unsigned(test::fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  {
    StageHarness w(io_write_fits::spec(), "cpu", {{"path", (dir / "gains.fits").string()}});
    w.process({{"image", ImagePtr(uniform(813, 1, rng, 0.5, 1.5))}});
    w.commit_outputs();
  }
  auto frame = uniform(813, 527, rng, -5, 5);
  frame->index = 3;
  const std::map<std::string, ParamValue> sources[] = {
      {{"source", std::string("file")}, {"path", (dir / "gains.fits").string()}},
      {{"gain", 1.25}},
      {{"source", std::string("linear")}, {"gain", 2.0}, {"slope", 0.01}}};
  for (const auto& params : sources) {
    SCOPED_TRACE("source " + std::to_string(&params - sources));
    StageHarness cpu(image_column_gain::spec(), "cpu", params), cuda(image_column_gain::spec(), "cuda", params);
    cpu.process({{"frame", ImagePtr(frame)}});
    cuda.process({{"frame", moved(frame, Location::device)}});
    const ImagePtr want = cpu.output<Image>("frame"), got = on_host(*cuda.output<Image>("frame"));
    EXPECT_EQ(got->index, 3);
    ASSERT_EQ(got->pixels.size(), want->pixels.size());
    EXPECT_TRUE(std::equal(got->pixels.begin(), got->pixels.end(), want->pixels.begin()));
  }
  StageHarness cuda(image_column_gain::spec(), "cuda", sources[0]);
  auto narrow = moved(blank(812, 4), Location::device);
  expect_input_error([&] { cuda.process({{"frame", narrow}}); },
                     "frame 0 is 812 pixels wide but file " + (dir / "gains.fits").string() + ", HDU 1 holds 813 column gains");
}

// ---------------------------------------------------------------- pipelines

struct StraylightGpuPipelines : StraylightGpu {
  Registry reg;
  test::TempDir dir;
  void SetUp() override {
    StraylightGpu::SetUp();
    register_builtin_stages(reg);
    std::filesystem::current_path(dir.path());
  }
  std::vector<ImagePtr> read_frames(const std::string& glob) {
    StageHarness read(io_read_fits::spec(), "cpu", {{"path", (dir / glob).string()}});
    read.run_source();
    std::vector<ImagePtr> v;
    for (auto& p : read.outputs("frames")) v.push_back(std::static_pointer_cast<const Image>(p));
    return v;
  }
};

// The shipped GPU pipeline, shrunk by overrides, writes what the cpu pipeline writes (both match
// Listing 4.1 to 1e-5, tests/straylight_test.cpp); each frame crosses the bus once each way.
TEST_F(StraylightGpuPipelines, MatchesTheCpuPipelineAndCrossesTheBusOnceEachWay) {
  const std::vector<std::string> small = {"frames.count=5", "frames.width=40", "frames.height=30", "psf.size_x=9",
                                          "psf.size_y=7"};
  for (const char* method : {"direct", "fft"}) {
    SCOPED_TRACE(method);
    auto sets = small;
    sets.push_back(std::string("convolve.method=") + method);
    sets.push_back("run.report=");
    RunReport r = run_plan(load_plan(test::source_dir() / "pipelines/straylight_gpu.yaml", sets, reg));
    run_plan(load_plan(test::source_dir() / "pipelines/straylight.yaml", small, reg));
    const auto gpu = read_frames("out/straylight_gpu/frame_*.fits"), cpu = read_frames("out/straylight/frame_*.fits");
    ASSERT_EQ(gpu.size(), 5u);
    ASSERT_EQ(cpu.size(), 5u);
    for (int i = 0; i < 5; ++i)
      EXPECT_LT(test::relative_frobenius(as_double(*gpu[i]), as_double(*cpu[i])), 2 * kTolerance) << "frame " << i;

    const double frame_bytes = 40.0 * 30 * sizeof(float);
    int transfers = 0;
    double h2d = 0, d2h = 0;
    for (auto& m : r.stages) {
      if (m.type.rfind("transfer.", 0) == 0) ++transfers;
      h2d += m.work.bytes_h2d, d2h += m.work.bytes_d2h;
    }
    EXPECT_EQ(r.stage("gain").backend, "cuda");
    EXPECT_EQ(r.stage("convolve").backend, "cuda");
    EXPECT_EQ(transfers, 2) << "one upload before the gain, one download after the convolution";
    // The frames once each way, and the 9 x 7 PSF once, uploaded by the convolution itself.
    EXPECT_DOUBLE_EQ(h2d, 5 * frame_bytes + 9 * 7 * sizeof(float));
    EXPECT_DOUBLE_EQ(d2h, 5 * frame_bytes);
  }
}

TEST_F(StraylightGpuPipelines, NanFrameFailsTheRunAndWritesNothing) {
  auto good = blank(40, 30), bad = blank(40, 30);
  for (auto& p : good->pixels) p = 1.0f;
  bad->pixels[7 * 40 + 5] = NAN;
  for (auto [name, im] : {std::pair{"a.fits", good}, std::pair{"b.fits", bad}}) {
    StageHarness w(io_write_fits::spec(), "cpu", {{"path", (dir / name).string()}});
    w.process({{"image", ImagePtr(im)}});
    w.commit_outputs();
  }
  for (const char* method : {"direct", "fft"}) {
    SCOPED_TRACE(method);
    const std::string yaml =
        "schema: uvflow/1\nstages:\n"
        "  - {id: frames, type: io.read_fits, params: {paths: [a.fits, a.fits, b.fits, a.fits]}}\n"
        "  - {id: psf, type: image.psf, params: {size_x: 5, size_y: 5}}\n"
        "  - {id: convolve, type: image.psf_convolve, backend: cuda, params: {method: " +
        std::string(method) +
        "}, in: {frame: frames, psf: psf}}\n"
        "  - {id: fits, type: io.write_fits, params: {path: 'out/f_{index}.fits'}, in: {image: convolve}}\n";
    try {
      run_plan(load_plan(dir.write("p.yaml", yaml), {}, reg));
      ADD_FAILURE() << "the run succeeded";
    } catch (const StageError& e) {
      EXPECT_EQ(e.code(), ExitCode::input) << e.what();
      EXPECT_NE(std::string(e.what()).find("frame 2 pixel (x 5, y 7) is NaN"), std::string::npos) << e.what();
    }
    if (std::filesystem::exists(dir / "out")) {
      for (auto& f : std::filesystem::recursive_directory_iterator(dir / "out")) {
        EXPECT_FALSE(f.is_regular_file()) << "left behind: " << f.path();
      }
    }
  }
}

}  // namespace
