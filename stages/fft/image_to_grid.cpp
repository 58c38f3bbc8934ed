#include "stages/fft/image_to_grid.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <cmath>

#include "runtime/error.hpp"
#include "runtime/units.hpp"
#include "stages/shared/fftw.hpp"

namespace uvflow::fft_image_to_grid {

void check_model(const Image& img, const KernelStack& ks) {
  const GridGeometry& g = ks.geom;
  if (!img.consistent() || img.nx != img.ny || img.nx != g.image_size)
    throw InputError("fft.image_to_grid: the model image is " + std::to_string(img.nx) + " x " + std::to_string(img.ny) +
                     " pixels, the kernels are for " + std::to_string(g.image_size) + " x " +
                     std::to_string(g.image_size));
  if (g.grid_size <= 0 || g.grid_size % 2 || g.image_size % 2 || g.image_size > g.grid_size)
    throw InputError("fft.image_to_grid: grid of " + std::to_string(g.grid_size) + " cells for an image of " +
                     std::to_string(g.image_size) + " pixels: both must be even and the image no larger");
  if (img.wcs && std::fabs(img.wcs->cell_rad - g.cell_rad) > 1e-6 * g.cell_rad)
    throw InputError("fft.image_to_grid: the model image's pixels are " +
                     std::to_string(img.wcs->cell_rad * kRadToDeg * 3600) + " arcsec, the kernels' " +
                     std::to_string(g.cell_rad * kRadToDeg * 3600) + " arcsec");
}

namespace {

class ImageToGrid : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto img = ctx.in(image);
    auto ks = ctx.in(kernels);
    check_model(*img, *ks);
    const int N = ks->geom.grid_size, n = img->nx, off = (N - n) / 2;

    // The image times (-1)^(x+y), its centre moved to element 0, transformed, times (-1)^(u+v):
    // the last factors shift the transform's input by N/2 along both axes, so the grid is the plain
    // transform of the signed image placed at h = off + N/2 (mod N). Its columns come straight from
    // the image and the rest of the grid is zeroed row by row as it is transformed: no pass to
    // clear the grid, embed the image or flip signs. FFTW_ESTIMATE: one use.
    const int h = (off + N / 2) % N;
    auto out = std::make_shared<Grid>();
    out->geom = ks->geom;
    out->cells = Array<cfloat>::host(std::size_t(N) * N);
    out->totals = Array<double>::host(3);
    std::fill(out->totals.begin(), out->totals.end(), 0.0);
    const float* pixels = img->pixels.host_data();
    const fftw::Bands cols = fftw::wrapped(h, h + n - 1, N);
    fftw::PrunedFft(out->cells.data(), N, N, FFTW_BACKWARD, {{0, N}}, cols, FFTW_ESTIMATE)
        .run([&](int c0, int nc, cfloat* values) {
          const int x0 = (c0 - h + N) % N, gap = (h + n) % N;  // rows [gap, h) hold no pixel
          for (int c = 0; c < nc; ++c) std::fill(values + std::size_t(c) * N + gap, values + std::size_t(c) * N + h, cfloat(0));
          for (int y = 0, r = h; y < n; ++y, r = r + 1 == N ? 0 : r + 1) {
            const float* src = pixels + std::size_t(y) * n + x0;
            for (int c = 0; c < nc; ++c) values[std::size_t(c) * N + r] = (x0 + c + y) % 2 ? -src[c] : src[c];
          }
        });
    ctx.emit(grid, out);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<ImageToGrid>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::fft_image_to_grid
