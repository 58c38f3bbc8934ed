// degrid.wproj (all cores, rows layout, nearest and bilinear lookup) against degrid.serial (the
// transpose of Listing 1, one core) on the same simulated, w-sorted visibilities, kernels and a
// random model grid: `degrid_cpu [preset] [image px] [cell arcsec] [oversample]` prints the seeds-style table
// for bench/results/degrid_cpu.md. Wall time of the stage's process() calls, best of 3.
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/harness.hpp"
#include "stages/degrid/serial.hpp"
#include "stages/degrid/wproj.hpp"
#include "stages/io/simulate.hpp"
#include "stages/kernels/wproj.hpp"
#include "stages/uvw/w_sort.hpp"

using namespace uvflow;

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "small";
  const int npix = argc > 2 ? std::atoi(argv[2]) : 512;
  const double cell = argc > 3 ? std::atof(argv[3]) : 100;
  const int oversample = argc > 4 ? std::atoi(argv[4]) : 16;

  StageHarness sim(io_simulate::spec(), "cpu", {{"preset", preset}});
  sim.run_source();
  auto info = sim.output<VisSetInfo>("info");
  std::vector<std::shared_ptr<const Payload>> blocks = sim.outputs("vis");
  StageHarness kh(kernels_wproj::spec(), "cpu",
                  {{"image_size", std::int64_t(npix)}, {"cell_arcsec", cell}, {"oversample", std::int64_t(oversample)}});
  kh.set_input("info", info);
  kh.process();
  auto ks = kh.output<KernelStack>("kernels");
  // As a pipeline would feed it: placed and w-sorted (uvw.w_sort), so kernel planes are read in order.
  {
    StageHarness sort(uvw_w_sort::spec(), "cpu");
    sort.set_input("kernels", ks);
    for (auto& b : blocks) sort.process({{"vis", b}});
    blocks = sort.outputs("vis");
  }
  auto grid = std::make_shared<Grid>(Grid::zeros_on_host(ks->geom, nullptr));
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> amp(-1, 1);
  for (cfloat& c : grid->cells) c = cfloat(amp(rng), amp(rng));

  struct Row {
    std::string name;
    int threads;
    double seconds, visibilities, updates;
  };
  std::vector<Row> rows;
  auto time = [&](const std::string& name, const StageSpec& spec, std::map<std::string, ParamValue> params, int threads) {
    double best = 1e300;
    Work w;
    for (int rep = 0; rep < 3; ++rep) {
      StageHarness h(spec, "cpu", params);
      h.set_input("grid", grid);
      h.set_input("kernels", ks);
      const auto t0 = std::chrono::steady_clock::now();
      for (auto& b : blocks) h.process({{"vis", b}});
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      w = h.work();
    }
    rows.push_back({name, threads, best, w.visibilities, w.updates});
  };
  const int cores = tbb::info::default_concurrency();
  time("degrid.serial (nearest)", degrid_serial::spec(), {}, 1);
  time("degrid.serial (linear)", degrid_serial::spec(), {{"kernel_lookup", std::string("linear")}}, 1);
  time("degrid.wproj (nearest)", degrid_wproj::spec(), {}, cores);
  time("degrid.wproj (linear)", degrid_wproj::spec(), {{"kernel_lookup", std::string("linear")}}, cores);

  std::printf("preset %s, %zu blocks, %.0f visibilities predicted, %d^2 image of %g arcsec, oversample %d, "
              "%d planes, supports %d..%d\n\n",
              preset.c_str(), blocks.size(), rows[0].visibilities, npix, cell, oversample, ks->planes, ks->support[0],
              ks->max_support);
  std::printf("| degridder | threads | wall s | Mvis/s | Gupdates/s | Gupdates/s per core |\n|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %d | %.3f | %.2f | %.3f | %.3f |\n", r.name.c_str(), r.threads, r.seconds,
                r.visibilities / r.seconds / 1e6, r.updates / r.seconds / 1e9, r.updates / r.seconds / 1e9 / r.threads);
  std::printf("\nSpeed-up of degrid.wproj over degrid.serial on %d cores: %.1fx (nearest), %.1fx (linear)\n", cores,
              rows[0].seconds / rows[2].seconds, rows[1].seconds / rows[3].seconds);
}
