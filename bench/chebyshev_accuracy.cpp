// Chebyshev-evaluated w-kernels (SDP Memo 73) on the EL56-82 data: for each number of terms and
// variable, the fit's worst error against the table (kernels.wproj chebyshev) and the grid's
// relative Frobenius difference ||G_cheb - G_table|| / ||G_table|| from grid.tiled variant
// chebyshev against variant uvflow (the table) on the same buckets, on one backend.
// bench/results/chebyshev.md; bench/chebyshev_h100.sh runs it on the H100 (cuda).
//   build/bench/chebyshev_accuracy [backend cpu|cuda] [dumps, 0 = the preset's 240] [terms 11,25,50] [variables r2,r]
// Data: io.simulate preset el56-82 (all 512 stations, so the w range and the kernels are the
// preset's: 654 planes by OSKAR's rule, supports up to 85), one source, in one block;
// kernels.wproj oversample 4, the 15000^2 image of 1.45" cells of bench/gpu_preset.yaml.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/harness.hpp"
#include "stages/grid/tiled.hpp"
#include "stages/io/simulate.hpp"
#include "stages/kernels/wproj.hpp"
#include "stages/shared/chebyshev.hpp"
#include "stages/tiles/bucket_sort.hpp"
#include "stages/tiles/count.hpp"
#include "stages/uvw/bounding_box.hpp"
#include "stages/uvw/w_sort.hpp"
#include "tests/support/grid_cases.hpp"

using namespace uvflow;

namespace {

using Payloads = std::vector<std::shared_ptr<const Payload>>;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');) out.push_back(x);
  return out;
}

struct Backend {
  std::string name;
  device::Stream stream;
  std::shared_ptr<const Payload> to(const std::shared_ptr<const Payload>& p) {
    if (name == "cpu") return p;
    auto out = p->moved_to(Location::device, stream, false);
    stream.synchronize();
    return out;
  }
  std::shared_ptr<const Grid> back(const std::shared_ptr<const Grid>& g) {
    if (g->cells.location() == Location::host) return g;
    auto out = std::static_pointer_cast<const Grid>(g->moved_to(Location::host, stream, false));
    stream.synchronize();
    return out;
  }
};

// grid.tiled with `variant` on the buckets; the grid on the host, and the wall time (device work
// included: the grid is read back).
std::shared_ptr<const Grid> grid_with(Backend& be, const std::shared_ptr<const Payload>& ks, const Payloads& buckets,
                                      const std::string& variant, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  StageHarness h(grid_tiled::spec(), be.name, {{"variant", variant}, {"central_box", std::int64_t(1)}});
  h.set_input("kernels", ks);
  for (auto& b : buckets) h.process({{"buckets", b}});
  h.finish();
  auto g = be.back(h.output<Grid>("grid"));
  *seconds = seconds_since(t0);
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  Backend be{argc > 1 ? argv[1] : "cpu", {}};
  const std::int64_t dumps = argc > 2 ? std::atoll(argv[2]) : 0;
  const auto terms = split(argc > 3 ? argv[3] : "11,25,50");
  const auto variables = split(argc > 4 ? argv[4] : "r2,r");
  if (be.name != "cpu" && be.name != "cuda") return std::fprintf(stderr, "backend: cpu or cuda\n"), 2;
  if (be.name == "cuda") {
    if (device::count() == 0) return std::fprintf(stderr, "no CUDA device\n"), 1;
    be.stream = device::Stream::create();
  }
  auto t0 = std::chrono::steady_clock::now();
  StageHarness sim(io_simulate::spec(), "cpu",
                   {{"preset", std::string("el56-82")}, {"dumps", dumps}, {"dumps_per_block", dumps > 0 ? dumps : 240},
                    {"sky", std::vector<Record>{{{"l_deg", 0.3}, {"m_deg", -0.2}, {"flux_jy", 1.0}}}}});
  sim.run_source();
  const auto blocks = sim.outputs("vis");
  std::size_t n = 0;
  for (auto& b : blocks) n += std::dynamic_pointer_cast<const VisBlock>(b)->size();
  std::printf("simulated %zu visibilities, %.1f s\n", n, seconds_since(t0));

  t0 = std::chrono::steady_clock::now();
  StageHarness kh(kernels_wproj::spec(), "cpu",
                  {{"image_size", std::int64_t(15000)},
                   {"cell_arcsec", 1.45},
                   {"oversample", std::int64_t(4)},
                   {"plane_rule", std::string("oskar")},
                   {"layouts", std::string(be.name == "cpu" ? "rows" : "gpu")}});
  kh.set_input("info", sim.outputs("info").at(0));
  kh.process();
  auto table = kh.output<KernelStack>("kernels");
  std::printf("kernels: grid %d, %d planes, max support %d, %.1f s\n", table->geom.grid_size, table->planes,
              table->max_support, seconds_since(t0));

  // The chain once, on the table's stack; every gridder reads its buckets.
  const auto dks = be.to(table);
  const std::int64_t tile = be.name == "cpu" ? 128 : 32, tile_v = be.name == "cpu" ? 128 : 16;
  StageHarness sort(uvw_w_sort::spec(), be.name), box(uvw_bounding_box::spec(), be.name),
      count(tiles_count::spec(), be.name, {{"tile_u", tile}, {"tile_v", tile_v}}), bucket(tiles_bucket_sort::spec(), be.name);
  sort.set_input("kernels", dks);
  Payloads buckets;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    sort.process({{"vis", be.to(blocks[i])}});
    auto placed = sort.outputs("vis")[i];
    box.process({{"vis", placed}});
    count.process({{"vis", placed}, {"box", box.outputs("box")[i]}});
    bucket.process({{"vis", placed}, {"counts", count.outputs("counts")[i]}});
    buckets.push_back(bucket.outputs("buckets")[i]);
  }
  double seconds = 0;
  const auto ref = grid_with(be, dks, buckets, "uvflow", &seconds);
  std::printf("table (uvflow): gridded %lld, skipped %lld, norm %.6e, %.2f s\n\n", (long long)ref->gridded(),
              (long long)ref->skipped(), ref->norm(), seconds);
  std::printf("| variable | terms | fit: median RMS error | fit: worst RMS error | fit: worst largest error | planes with "
              "fewer terms | fit s | grid vs table: relative Frobenius | norm / table's - 1 | grid s |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (const auto& var : variables)
    for (const auto& t : terms) {
      auto ks = std::make_shared<KernelStack>(*table);
      t0 = std::chrono::steady_clock::now();
      const auto errors = fit_chebyshev(*ks, std::stoi(t), var == "r");
      const double fit_s = seconds_since(t0);
      double rms = 0, max = 0;
      int fewer = 0;
      std::vector<double> each;
      for (const auto& e : errors)
        rms = std::max(rms, e.rms), max = std::max(max, e.max), fewer += e.terms < std::stoi(t), each.push_back(e.rms);
      std::nth_element(each.begin(), each.begin() + each.size() / 2, each.end());
      const auto g = grid_with(be, be.to(ks), buckets, "chebyshev", &seconds);
      std::printf("| %s | %s | %.2e | %.2e | %.2e | %d | %.1f | %.2e | %+.1e | %.2f |\n", var == "r" ? "r" : "r^2", t.c_str(),
                  each[each.size() / 2], rms, max, fewer, fit_s, test::relative_frobenius(*g, ref->cells), g->norm() / ref->norm() - 1, seconds);
      std::fflush(stdout);
    }
}
