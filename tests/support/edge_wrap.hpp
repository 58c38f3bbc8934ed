// The StrayLight report's Listing 4.1 (convolution with IDL's EDGE_WRAP), written plainly in
// double precision: the reference every image.psf_convolve method and backend is tested against.
// It shares no code with the stages. Also the inputs and cases the cpu and cuda tests share.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/payloads/image.hpp"

namespace uvflow::test {

// A plane of float pixels [y][x], x fastest.
struct Plane {
  int nx = 0, ny = 0;
  const float* px = nullptr;
  float at(int x, int y) const { return px[static_cast<long>(y) * nx + x]; }
};

// The whole output of Listing 4.1, out[y][x] at [y * nx + x]; rows are computed in parallel.
std::vector<double> edge_wrap(Plane in, Plane psf);

// ||a - b|| / ||b|| over all elements (b: the reference).
double relative_frobenius(const std::vector<double>& a, const std::vector<double>& b);

// ---------------------------------------------------------------- inputs

using ImagePtr = std::shared_ptr<const Image>;

Plane plane(const Image& im);
std::vector<double> as_double(const Image& im);
std::shared_ptr<Image> blank(int nx, int ny);  // host, zero
std::shared_ptr<Image> uniform(int nx, int ny, std::mt19937& rng, float lo, float hi);
// Frame `index` of io.simulate_frames (cpu) with these sizes and seed.
ImagePtr simulated(int nx, int ny, int count = 1, int index = 0, int seed = 1);
ImagePtr model_psf(int kx, int ky);  // image.psf's default model at this size

// The bad PSFs every backend of image.psf_convolve must refuse (NaN, infinite, all zero), each with
// the message it must give, and the message for a PSF larger than a 13 x 17 frame 0.
std::vector<std::pair<ImagePtr, std::string>> bad_psfs();
std::string psf_larger_than_13x17(int kx, int ky);

// Runs `f`, expecting an InputError whose message contains `text`.
void expect_input_error(const std::function<void()>& f, const std::string& text);

// ---------------------------------------------------------------- the accuracy cases of issue 4

struct ConvolveCase {
  int ny, nx;  // frame rows x columns
  int ky, kx;  // PSF rows x columns
};
void PrintTo(const ConvolveCase& c, std::ostream* os);

// PSFs of 1, 2, 15, 31, 64 and 255 on 5271 x 813 and 813 x 5271 frames, and on 17 x 13 frames PSFs
// odd and even, square and not, beyond half the frame and of the frame's own size.
std::vector<ConvolveCase> convolve_cases();
std::string case_name(const ConvolveCase& c, bool random);

constexpr double kConvolveTolerance = 1e-5;  // relative Frobenius norm, the seeds' accuracy metric

// The case's inputs: fixed (a simulated frame and the model PSF) or random (zero-mean pixels, no
// background to hide errors behind, and a positive PSF).
std::pair<ImagePtr, ImagePtr> case_inputs(const ConvolveCase& c, bool random, std::mt19937& rng);

using Outputs = std::vector<std::pair<std::string, ImagePtr>>;  // method name, host output

// Expects every output to match Listing 4.1 on (frame, psf), computed whole in double, to
// kConvolveTolerance.
void expect_listing41(const Image& frame, const Image& psf, const Outputs& outputs);

// One accuracy case for one backend: `convolve(frame, psf, method)` for direct, fft and auto on the
// case's fixed or fresh random inputs (the seed is printed), each matching Listing 4.1, and auto
// bit for bit the method its cost model names.
using Convolve = std::function<ImagePtr(const ImagePtr& frame, const ImagePtr& psf, const std::string& method)>;
void expect_every_method(const ConvolveCase& c, bool random, const std::string& backend, const Convolve& convolve,
                         bool auto_picks_direct);

}  // namespace uvflow::test
