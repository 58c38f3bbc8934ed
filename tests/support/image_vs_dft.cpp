#include "tests/support/image_vs_dft.hpp"

#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>

#include "graph/executor.hpp"
#include "graph/pipeline.hpp"
#include "runtime/harness.hpp"
#include "stages/builtin.hpp"
#include "stages/io/simulate.hpp"
#include "tests/support/dft.hpp"
#include "tests/support/fits_read.hpp"
#include "tests/support/temp_dir.hpp"

namespace uvflow::test {

std::string sky_to_yaml(const std::vector<PointSource>& sky, double cell_arcsec) {
  const double cell_deg = cell_arcsec / 3600;
  std::ostringstream s;
  s.precision(17);
  s << "[";
  for (size_t i = 0; i < sky.size(); ++i)
    s << (i ? ", " : "") << "{l_deg: " << -sky[i].dx * cell_deg << ", m_deg: " << sky[i].dy * cell_deg
      << ", flux_jy: " << sky[i].flux << "}";
  return s.str() + "]";
}

namespace {

std::string gridder_stages(const std::string& g) {
  if (g == "serial") return "  - {id: grid, type: grid.serial, in: {vis: vis, kernels: kernels}}\n";
  if (g == "atomic") return "  - {id: grid, type: grid.atomic, in: {vis: vis, kernels: kernels}}\n";
  if (g != "tiled") throw std::invalid_argument("unknown gridder " + g);
  return R"(  - {id: sort, type: uvw.w_sort, in: {vis: vis, kernels: kernels}}
  - {id: box, type: uvw.bounding_box, in: {vis: sort}}
  - {id: count, type: tiles.count, params: {tile_u: 32, tile_v: 32}, in: {vis: sort, box: box}}
  - {id: buckets, type: tiles.bucket_sort, in: {vis: sort, counts: count}}
  - {id: grid, type: grid.tiled, in: {buckets: buckets, kernels: kernels}}
)";
}

}  // namespace

ImageVsDft image_vs_dft(const ImagingSetup& setup, const std::vector<PointSource>& sky) {
  const int n = setup.npix;
  const std::string yaml = "schema: uvflow/1\nstages:\n"
                           "  - {id: vis, type: io.simulate, params: {preset: " + setup.preset + "}}\n"
                           "  - {id: kernels, type: kernels.wproj, params: {image_size: " + std::to_string(n) +
                           ", cell_arcsec: " + std::to_string(setup.cell_arcsec) + ", cache_dir: \"\"}, in: {info: vis}}\n" +
                           gridder_stages(setup.gridder) +
                           "  - {id: image, type: fft.grid_to_image, in: {grid: grid}}\n"
                           "  - {id: corr, type: image.grid_correct, in: {image: image, kernels: kernels}}\n"
                           "  - {id: fits, type: io.write_fits, params: {path: dirty.fits}, in: {image: corr}}\n";
  TempDir dir;
  Registry reg;
  register_builtin_stages(reg);
  std::vector<std::string> sets = setup.sets;
  sets.push_back("vis.sky=" + sky_to_yaml(sky, setup.cell_arcsec));
  Plan plan = load_plan(dir.write("p.yaml", yaml), sets, reg);
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  try {
    run_plan(plan);
  } catch (...) {
    std::filesystem::current_path(cwd);
    throw;
  }
  std::filesystem::current_path(cwd);
  const FitsImage img = read_fits_image(dir / "dirty.fits");
  if (img.nx != n || img.ny != n) throw std::runtime_error("unexpected image size");

  // The same visibilities, made by the same stage alone (with the same overrides), imaged by a DFT.
  std::map<std::string, ParamValue> sim_params{{"preset", setup.preset}};
  std::vector<Record> recs;
  for (auto& s : sky)
    recs.push_back({{"l_deg", -s.dx * setup.cell_arcsec / 3600}, {"m_deg", s.dy * setup.cell_arcsec / 3600}, {"flux_jy", s.flux}});
  sim_params["sky"] = recs;
  StageHarness sim(io_simulate::spec(), "cpu", sim_params);
  sim.run_source();
  std::vector<std::shared_ptr<const VisBlock>> blocks;
  for (auto& p : sim.outputs("vis")) blocks.push_back(std::dynamic_pointer_cast<const VisBlock>(p));
  const auto dft = dft_dirty_image(blocks, n, setup.cell_arcsec / 3600 * std::numbers::pi / 180);

  ImageVsDft r;
  auto at = [&](int x, int y) { return std::size_t(y) * n + x; };
  double peak = 0;
  for (auto& s : sky) peak = std::max(peak, std::abs(dft[at(n / 2 + s.dx, n / 2 + s.dy)]));
  const int lo = n / 10, hi = n - n / 10;
  double inner2 = 0, diff2 = 0, ref2 = 0;
  long inner_n = 0;
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      const double d = img.pixels[at(x, y)] - dft[at(x, y)];
      diff2 += d * d;
      ref2 += dft[at(x, y)] * dft[at(x, y)];
      if (x >= lo && x < hi && y >= lo && y < hi) inner2 += d * d, ++inner_n;
    }
  r.rms_over_peak = std::sqrt(inner2 / double(inner_n)) / peak;
  r.rel_l2 = std::sqrt(diff2 / ref2);
  for (auto& s : sky) {
    const int x = n / 2 + s.dx, y = n / 2 + s.dy;
    r.worst_peak_error = std::max(r.worst_peak_error, std::abs(img.pixels[at(x, y)] - dft[at(x, y)]) / std::abs(dft[at(x, y)]));
    for (int yy = y - 2; yy <= y + 2; ++yy)
      for (int xx = x - 2; xx <= x + 2; ++xx)
        if (img.pixels[at(xx, yy)] > img.pixels[at(x, y)]) r.peaks_on_pixel = false;
  }
  return r;
}

}  // namespace uvflow::test
