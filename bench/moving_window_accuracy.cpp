// grid.moving_window's approximation on the EL56-82 data, as Table 3 of the OxfordSKA memo
// (001_55d00877663aa4fc.txt, Part II): the grid's relative Frobenius error ||G_b - G_1|| / ||G_1||
// for b dumps per w-block against b = 1 (exact), on the cpu backend.
// bench/results/moving_window_accuracy.md.
//   build/bench/moving_window_accuracy [stations, 0 = the preset's 512] [image_size 15000] [cell_arcsec 1.45]
// Data: io.simulate preset el56-82 (240 dumps, in one block so that every time_block up to 240
// divides it), its default sky shape (a 16 x 16 grid of 1 Jy sources, as the memo's data set) at
// 0.35 deg spacing so that the grid spans the 6-degree field; kernels.wproj oversample 4 with
// OSKAR's plane rule (the seeds' data sets: 601 planes, supports up to 72), bench/el56-82_serial.yaml's
// image settings. Also, as the memo's Figure 8 does in the image, the change of each of the 256
// sources' peaks (fft.grid_to_image, image.grid_correct; the peak pixel of time_block 1's image
// within 4 pixels of where the source lies): the largest and the mean change, in % of the
// sources' 1 Jy (not of the pixel value, which the sidelobes of 255 other sources shift).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runtime/harness.hpp"
#include "stages/fft/grid_to_image.hpp"
#include "stages/grid/moving_window.hpp"
#include "stages/image/grid_correct.hpp"
#include "stages/io/simulate.hpp"
#include "stages/kernels/wproj.hpp"
#include "tests/support/grid_cases.hpp"

using namespace uvflow;

namespace {

constexpr double kSpacingDeg = 0.35, kFluxJy = 1.0;  // the default sky's spacing and flux

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::shared_ptr<const Grid> grid_with(const std::shared_ptr<const KernelStack>& ks,
                                      const std::vector<std::shared_ptr<const Payload>>& blocks, int time_block) {
  StageHarness h(grid_moving_window::spec(), "cpu", {{"time_block", std::int64_t(time_block)}});
  h.set_input("kernels", ks);
  for (auto& b : blocks) h.process({{"vis", b}});
  h.finish();
  return h.output<Grid>("grid");
}

std::shared_ptr<const Image> image_of(const std::shared_ptr<const Grid>& g, const std::shared_ptr<const KernelStack>& ks) {
  StageHarness fft(fft_grid_to_image::spec(), "cpu");
  fft.set_input("grid", g);
  fft.process();
  StageHarness corr(image_grid_correct::spec(), "cpu");
  corr.set_input("image", fft.output<Image>("image"));
  corr.set_input("kernels", ks);
  corr.process();
  return corr.output<Image>("image");
}

// The peak pixel of each source of the default 16 x 16 sky (l, m = +-(i + 1/2) spacing; symmetric,
// so the image's orientation does not matter), as the brightest pixel of `img` near its position.
std::vector<std::size_t> source_peaks(const Image& img, double spacing_deg, double cell_arcsec) {
  std::vector<std::size_t> peaks;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      const double x = img.nx / 2 + (i - 7.5) * spacing_deg * 3600 / cell_arcsec;
      const double y = img.ny / 2 + (j - 7.5) * spacing_deg * 3600 / cell_arcsec;
      std::size_t best = 0;
      float value = -1e30f;
      for (int dy = -4; dy <= 4; ++dy)
        for (int dx = -4; dx <= 4; ++dx) {
          const long px = std::lround(x) + dx, py = std::lround(y) + dy;
          if (px < 0 || py < 0 || px >= img.nx || py >= img.ny) continue;
          const std::size_t k = std::size_t(py) * img.nx + std::size_t(px);
          if (img.pixels[k] > value) value = img.pixels[k], best = k;
        }
      peaks.push_back(best);
    }
  return peaks;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t stations = argc > 1 ? std::atoll(argv[1]) : 0;
  const std::int64_t image_size = argc > 2 ? std::atoll(argv[2]) : 15000;
  const double cell_arcsec = argc > 3 ? std::atof(argv[3]) : 1.45;
  auto t0 = std::chrono::steady_clock::now();
  StageHarness sim(io_simulate::spec(), "cpu",
                   {{"preset", std::string("el56-82")},
                    {"stations", stations},
                    {"dumps_per_block", std::int64_t(240)},
                    {"sky_spacing_deg", kSpacingDeg}});
  sim.run_source();
  const auto blocks = sim.outputs("vis");
  std::size_t n = 0;
  for (auto& b : blocks) n += std::dynamic_pointer_cast<const VisBlock>(b)->size();
  std::printf("simulated %zu visibilities in %zu block(s), %.1f s\n", n, blocks.size(), seconds_since(t0));

  t0 = std::chrono::steady_clock::now();
  StageHarness kh(kernels_wproj::spec(), "cpu",
                  {{"image_size", image_size},
                   {"cell_arcsec", cell_arcsec},
                   {"oversample", std::int64_t(4)},
                   {"plane_rule", std::string("oskar")}});
  kh.set_input("info", sim.outputs("info").at(0));
  kh.process();
  auto ks = kh.output<KernelStack>("kernels");
  std::printf("kernels: grid %d, %d planes, max support %d, max |w| %.0f, %.1f s\n", ks->geom.grid_size, ks->planes,
              ks->max_support, ks->max_w, seconds_since(t0));

  t0 = std::chrono::steady_clock::now();
  const auto exact = grid_with(ks, blocks, 1);
  std::printf("time_block 1: gridded %lld, skipped %lld, norm %.6e, %.1f s\n", (long long)exact->gridded(),
              (long long)exact->skipped(), exact->norm(), seconds_since(t0));
  const auto exact_image = image_of(exact, ks);
  const auto peaks = source_peaks(*exact_image, kSpacingDeg, cell_arcsec);
  double lowest = 1e30, highest = -1e30;
  for (std::size_t k : peaks) lowest = std::min(lowest, double(exact_image->pixels[k])), highest = std::max(highest, double(exact_image->pixels[k]));
  std::printf("time_block 1: the 256 source peaks lie between %.3f and %.3f Jy\n", lowest, highest);
  std::printf("\n| time_block | w-blocks | relative Frobenius error | largest change at a source peak | mean change | grid s |\n"
              "|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int b : {2, 4, 8, 10, 12, 16, 20, 30, 60}) {
    t0 = std::chrono::steady_clock::now();
    const auto g = grid_with(ks, blocks, b);
    const double s = seconds_since(t0);
    const auto img = image_of(g, ks);
    double largest = 0, mean = 0;
    for (std::size_t k : peaks) {
      const double change = std::fabs(double(img->pixels[k]) - exact_image->pixels[k]) / kFluxJy;
      largest = std::max(largest, change);
      mean += change / double(peaks.size());
    }
    std::printf("| %d | %d | %.6f | %.4f %% | %.4f %% | %.1f |\n", b, (240 + b - 1) / b, test::relative_frobenius(*g, exact->cells),
                100 * largest, 100 * mean, s);
    std::fflush(stdout);
  }
}
