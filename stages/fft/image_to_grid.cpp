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

    auto out = std::make_shared<Grid>(Grid::zeros_on_host(ks->geom, nullptr));
    cfloat* cells = out->cells.data();
    const float* pixels = img->pixels.host_data();
    // (-1)^((x+off) + (y+off)) = (-1)^(x+y): the shift of the image centre to element 0.
    tbb::parallel_for(0, n, [&](int y) {
      cfloat* dst = cells + std::size_t(y + off) * N + off;
      const float* src = pixels + std::size_t(y) * n;
      for (int x = 0; x < n; ++x) dst[x] = ((x + y) % 2) ? -src[x] : src[x];
    });
    // Along v only the image's columns hold data; then every row along u. FFTW_ESTIMATE: one use.
    fftw::PrunedFft(cells, N, FFTW_BACKWARD, {{0, N}}, {{off, off + n}}, FFTW_ESTIMATE).run();
    tbb::parallel_for(0, N, [&](int v) {
      cfloat* row = cells + std::size_t(v) * N;
      for (int u = (v + 1) % 2; u < N; u += 2) row[u] = -row[u];
    });
    ctx.emit(grid, out);
  }
};

}  // namespace

StageSpec spec() { return decl.spec({cpu_backend<ImageToGrid>(), UVFLOW_CUDA_BACKEND(make_cuda)}); }

}  // namespace uvflow::fft_image_to_grid
