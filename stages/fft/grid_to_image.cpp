#include "stages/fft/grid_to_image.hpp"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/payloads/grid.hpp"
#include "runtime/payloads/image.hpp"
#include "stages/fft/fftw.hpp"

namespace uvflow {

void grid_to_image::check(const Grid& grid, Location where) {
  const GridGeometry& g = grid.geom;
  const int N = g.grid_size, n = g.image_size;
  if (N <= 0 || N % 2 || n <= 0 || n % 2 || n > N)
    throw std::runtime_error("fft.grid_to_image: grid of " + std::to_string(N) + " cells for an image of " +
                             std::to_string(n) + " pixels: both must be even and the image no larger");
  if (grid.cells.size() != std::size_t(N) * N || grid.totals.size() != 3)
    throw std::runtime_error("fft.grid_to_image: grid holds " + std::to_string(grid.cells.size()) +
                             " cells, its geometry says " + std::to_string(std::size_t(N) * N));
  if (grid.location() != where || grid.cells.location() != where || grid.totals.location() != where)
    throw std::runtime_error(std::string("fft.grid_to_image: this backend needs the grid in ") + to_string(where) +
                             " memory");
  if (!grid.obs) throw std::runtime_error("fft.grid_to_image: the grid carries no observation (sky coordinates)");
}

void grid_to_image::check_norm(double norm) {
  if (!(norm > 0) || !std::isfinite(norm))
    throw std::runtime_error("fft.grid_to_image: grid norm is " + std::to_string(norm) + ": no visibility was gridded");
}

SkyWcs grid_to_image::sky_of(const Grid& grid) {
  const Observation& obs = *grid.obs;
  SkyWcs w;
  w.ra_rad = obs.ra_rad;
  w.dec_rad = obs.dec_rad;
  w.cell_rad = grid.geom.cell_rad;
  w.freq_hz = obs.ref_freq_hz;
  // WSClean's CDELT3: the band the channels cover, edge to edge.
  if (!obs.freq_hz.empty() && obs.channel_width_hz > 0) {
    const auto [lo, hi] = std::minmax_element(obs.freq_hz.begin(), obs.freq_hz.end());
    w.bandwidth_hz = *hi - *lo + obs.channel_width_hz;
  }
  w.telescope = obs.telescope;
  w.date_obs = obs.date_obs;
  return w;
}

namespace {

class GridToImage : public Stage {
 public:
  void prepare(PrepareContext& pc) override { pinned_ = pc.pinned("image"); }

  void process(Context& ctx) override {
    auto grid = ctx.in<Grid>("grid");
    grid_to_image::check(*grid, Location::host);
    const GridGeometry& g = grid->geom;
    const int N = g.grid_size, n = g.image_size;
    const double norm = grid->norm();
    grid_to_image::check_norm(norm);

    // The input is shared: scale and shift into FFTW's buffer, noting which rows hold data.
    auto buf = fftw::alloc(std::size_t(N) * N);
    const cfloat* cells = grid->cells.host_data();
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

    // Pruned 2-D FFT: rows outside the gridded band stay zero, and only the cropped columns are
    // transformed along v. Planned once here (FFTW_ESTIMATE: the transform runs once per run).
    const int off = (N - n) / 2;
    const int rows = v_hi - v_lo + 1;
    if (rows > 0) {
      auto* r0 = fftw::as_fftw(buf.get() + std::size_t(v_lo) * N);
      auto row_plan = fftw::plan_or_throw(
          0,
          [&] {
            return fftwf_plan_many_dft(1, &N, rows, r0, nullptr, 1, N, r0, nullptr, 1, N, FFTW_FORWARD, FFTW_ESTIMATE);
          },
          "the image FFT along u");
      auto* c0 = fftw::as_fftw(buf.get() + off);
      auto col_plan = fftw::plan_or_throw(
          0,
          [&] {
            return fftwf_plan_many_dft(1, &N, n, c0, nullptr, N, 1, c0, nullptr, N, 1, FFTW_FORWARD, FFTW_ESTIMATE);
          },
          "the image FFT along v");
      fftwf_execute(row_plan.get());
      fftwf_execute(col_plan.get());
    }

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

    img->wcs = grid_to_image::sky_of(*grid);
    ctx.emit("image", img);
  }

 private:
  bool pinned_ = false;
};

}  // namespace

StageSpec fft_grid_to_image_spec() {
  StageSpec s;
  s.type = "fft.grid_to_image";
  s.summary = "dirty image from a uv grid: normalise, FFT with centring shifts, real part, central crop";
  s.doc =
      "Divides the grid by its norm, multiplies by (-1)^(x+y), takes the forward 2-D FFT (FFTW, single precision, "
      "multi-threaded on oneTBB), multiplies by (-1)^(x+y) again and keeps the real part of the central image_size "
      "square: image pixel x is grid column x + (grid_size - image_size)/2. With the gridding conventions of "
      "DESIGN.md a source at direction cosines (l, m) appears at pixel (N/2 - l/cell, N/2 + m/cell), RA increasing "
      "to the left as in FITS viewers and WSClean. Rows of the grid that hold no data and columns outside the crop "
      "are not transformed. The image carries the observation's phase centre, reference frequency, telescope and "
      "date, and the cell size, in JY/BEAM; apply image.grid_correct next. Tested pixel by pixel against a direct "
      "double-precision DFT of the grid, and for the position and sign of a single grid cell's fringe. The cuda "
      "backend does the same with cuFFT on the device-resident grid (a full transform: no pruning) and is tested "
      "against the cpu backend.";
  s.inputs = {{"grid", kGrid, Arity::once, Residency::backend, "the accumulated uv grid and its norm"}};
  s.outputs = {{"image", kImage, Arity::once, Residency::backend, "the dirty image, before grid correction"}};
  s.backends = {{"cpu", [] { return std::make_unique<GridToImage>(); }}};
  s.backends.push_back(UVFLOW_CUDA_BACKEND(make_grid_to_image_cuda));
  s.concurrency = Concurrency::serial;
  return s;
}

}  // namespace uvflow
