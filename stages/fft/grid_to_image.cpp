#include "stages/fft/grid_to_image.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/shared/fftw.hpp"
#include "stages/shared/sky_wcs.hpp"

namespace uvflow::fft_grid_to_image {

void check_grid(const Grid& g, Location where) {
  const int N = g.geom.grid_size, n = g.geom.image_size;
  if (N <= 0 || N % 2 || n <= 0 || n % 2 || n > N)
    throw std::runtime_error("fft.grid_to_image: grid of " + std::to_string(N) + " cells for an image of " +
                             std::to_string(n) + " pixels: both must be even and the image no larger");
  if (g.cells.size() != std::size_t(N) * N || g.totals.size() != 3)
    throw std::runtime_error("fft.grid_to_image: grid holds " + std::to_string(g.cells.size()) +
                             " cells, its geometry says " + std::to_string(std::size_t(N) * N));
  if (g.location() != where || g.cells.location() != where || g.totals.location() != where)
    throw std::runtime_error(std::string("fft.grid_to_image: this backend needs the grid in ") + to_string(where) +
                             " memory");
  if (!g.obs) throw std::runtime_error("fft.grid_to_image: the grid carries no observation (sky coordinates)");
}

void check_norm(double norm) {
  if (!(norm > 0) || !std::isfinite(norm))
    throw std::runtime_error("fft.grid_to_image: grid norm is " + std::to_string(norm) + ": no visibility was gridded");
}

SkyWcs sky_of(const Grid& g) { return sky_wcs(*g.obs, g.geom.cell_rad); }

namespace {

class GridToImage : public DeclaredStage<decl> {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned(image.name); }

  void process(Context& ctx) override {
    auto in = ctx.in(grid);
    check_grid(*in, Location::host);
    const GridGeometry& g = in->geom;
    const int N = g.grid_size, n = g.image_size;
    const double norm = in->norm();
    check_norm(norm);

    // The input is shared: scale and shift into FFTW's buffer, noting which rows hold data.
    auto buf = fftw::alloc(std::size_t(N) * N);
    const cfloat* cells = in->cells.host_data();
    const float inv = float(1.0 / norm);
    std::vector<char> has_data(N);
    tbb::parallel_for(0, N, [&](int v) {
      const cfloat* src = cells + std::size_t(v) * N;
      cfloat* dst = buf.get() + std::size_t(v) * N;
      const float s = (v % 2) ? -inv : inv;
      bool any = false;
      for (int u = 0; u < N; u += 2) {
        dst[u] = src[u] * s;
        dst[u + 1] = src[u + 1] * -s;
        any |= (src[u] != cfloat(0)) | (src[u + 1] != cfloat(0));
      }
      has_data[v] = any;
    });
    const int v_lo = int(std::find(has_data.begin(), has_data.end(), 1) - has_data.begin());
    const int v_hi = N - 1 - int(std::find(has_data.rbegin(), has_data.rend(), 1) - has_data.rbegin());

    // Rows outside the gridded band stay zero, and only the cropped columns are transformed along
    // v. FFTW_ESTIMATE: the transform runs once per run.
    const int off = (N - n) / 2;
    fftw::Bands rows;
    if (v_lo <= v_hi) rows.push_back({v_lo, v_hi + 1});
    fftw::PrunedFft(buf.get(), N, FFTW_FORWARD, std::move(rows), {{off, off + n}}, FFTW_ESTIMATE).run();

    auto img = std::make_shared<Image>();
    img->nx = img->ny = n;
    img->pixels = Array<float>::host(std::size_t(n) * n, pinned_);
    float* out = img->pixels.data();
    // (-1)^((x+off) + (y+off)) = (-1)^(x+y).
    tbb::parallel_for(0, n, [&](int y) {
      const cfloat* src = buf.get() + std::size_t(y + off) * N + off;
      float* dst = out + std::size_t(y) * n;
      const float s = (y % 2) ? -1.0f : 1.0f;
      for (int x = 0; x < n; x += 2) {
        dst[x] = src[x].real() * s;
        dst[x + 1] = src[x + 1].real() * -s;
      }
    });

    img->wcs = sky_of(*in);
    ctx.emit(image, img);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

// The estimate (choose: auto): N^2 log2 N^2 for the grid's N^2 cells, at 1e9 per second per core on
// the VM (2460^2 in 43-46 ms, 18000^2 in 3.9-7.1 s on 2 cores, most of it the passes that fill the
// transform's buffer and crop the image) and 6.5e11 on the H100 (18000^2 in 14 ms).
StageSpec spec() {
  return decl.spec({cpu_backend<GridToImage>(), UVFLOW_CUDA_BACKEND(make_cuda)},
                   [](const Params&, const PortShapes& in, const EstimateContext& c) {
                     auto g = in.find(grid.name);
                     if (g == in.end() || !g->second.grid) throw InputError("input 'grid': its size is not known");
                     const double cells = double(g->second.grid->grid_size) * g->second.grid->grid_size;
                     return Estimate{.seconds = seconds_at(c, cells * std::log2(cells), 1e9, 6.5e11),
                                     .basis = std::to_string(g->second.grid->grid_size) + "^2 cells"};
                   });
}

}  // namespace uvflow::fft_grid_to_image
