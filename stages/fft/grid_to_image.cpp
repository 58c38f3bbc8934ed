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

    // The rows that hold data: the others are neither read nor transformed.
    const cfloat* cells = in->cells.host_data();
    std::vector<char> has_data(N);
    tbb::parallel_for(0, N, [&](int v) {
      const cfloat* row = cells + std::size_t(v) * N;
      has_data[v] = std::any_of(row, row + N, [](cfloat c) { return c != cfloat(0); });
    });
    const int v_lo = int(std::find(has_data.begin(), has_data.end(), 1) - has_data.begin());
    const int v_hi = N - 1 - int(std::find(has_data.rbegin(), has_data.rend(), 1) - has_data.rbegin());
    fftw::Bands rows;
    if (v_lo <= v_hi) rows.push_back({v_lo, v_hi + 1});

    // The factors (-1)^(u+v) shift the transform by N/2 along both axes, so pixel (x, y) is
    // (-1)^(x+y) Re(F[y + h][x + h]) / norm, F the plain transform of the grid and h = off + N/2
    // (mod N): the grid is transformed as it is, and the image taken from the columns as they come
    // out, with no pass to fill a buffer or to crop (as the cuda backend does). FFTW_ESTIMATE: the
    // transform runs once per run.
    const int off = (N - n) / 2, h = (off + N / 2) % N;
    const fftw::Bands cols = fftw::wrapped(h, h + n - 1, N);
    auto buf = fftw::alloc(std::size_t(N) * N);  // only the rows with data are written
    auto img = std::make_shared<Image>();
    img->nx = img->ny = n;
    img->pixels = Array<float>::host(std::size_t(n) * n, pinned_);
    float* out = img->pixels.data();
    const float inv = float(1.0 / norm);
    const fftw::PrunedFft fft(buf.get(), N, N, FFTW_FORWARD, std::move(rows), cols, FFTW_ESTIMATE);
    fft.run(cells, [&](int c0, int nc, const cfloat* values) {
      const int x0 = (c0 - h + N) % N;
      for (int y = 0, r = h; y < n; ++y, r = r + 1 == N ? 0 : r + 1) {
        float* dst = out + std::size_t(y) * n + x0;
        const float s = (x0 + y) % 2 ? -inv : inv;
        for (int c = 0; c < nc; ++c) dst[c] = values[std::size_t(c) * N + r].real() * (c % 2 ? -s : s);
      }
    });

    img->wcs = sky_of(*in);
    ctx.emit(image, img);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

// The estimate (choose: auto): N^2 log2 N^2 for the grid's N^2 cells, at 2.2e9 per second per core
// on the VM (2460^2 in 30-31 ms, 18000^2 in 1.75-1.95 s on 2 cores) and 6.5e11 on the H100 (18000^2
// in 14 ms).
StageSpec spec() {
  return decl.spec({cpu_backend<GridToImage>(), UVFLOW_CUDA_BACKEND(make_cuda)},
                   [](const Params&, const PortShapes& in, const EstimateContext& c) {
                     auto g = in.find(grid.name);
                     if (g == in.end() || !g->second.grid) throw InputError("input 'grid': its size is not known");
                     const double cells = double(g->second.grid->grid_size) * g->second.grid->grid_size;
                     return Estimate{.seconds = seconds_at(c, cells * std::log2(cells), 2.2e9, 6.5e11),
                                     .basis = std::to_string(g->second.grid->grid_size) + "^2 cells"};
                   });
}

}  // namespace uvflow::fft_grid_to_image
