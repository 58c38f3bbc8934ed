// Accuracy of the imaging chain against a direct DFT, as oversampling, padding and the grid
// correction vary: `image_accuracy [gridder]` prints one row per setting. (The support threshold,
// 1e-2 to 1e-4, moved no figure by more than 0.06 percentage points: bench/results/image_accuracy.md.)
#include <cstdio>

#include "tests/support/image_vs_dft.hpp"

using namespace uvflow::test;

int main(int argc, char** argv) {
  const std::string gridder = argc > 1 ? argv[1] : "tiled";
  const std::vector<PointSource> sky = {{0, 0, 2.0}, {-20, 12, 1.0}, {25, -30, 0.5}, {40, 40, 1.5}, {-45, -35, 1.0}};
  std::printf("tiny preset, %d px of %g arcsec, 5 sources up to 45 px from the centre, gridder %s\n", 128, 400.0,
              gridder.c_str());
  std::printf("%10s %10s %8s | %14s %16s %16s %8s\n", "oversample", "padding", "table", "RMS/peak(80%)",
              "||I-DFT||/||DFT||", "worst peak err", "peaks");
  for (int o : {2, 4, 8, 16})
    for (double pad : {1.2, 1.5})
      for (const char* table : {"kernel", "sinc"}) {
        ImagingSetup s;
        s.gridder = gridder;
        s.sets = {"kernels.oversample=" + std::to_string(o), "kernels.padding=" + std::to_string(pad),
                  std::string("corr.table_correction=") + table};
        ImageVsDft r = image_vs_dft(s, sky);
        std::printf("%10d %10.1f %8s | %14.3g %16.3g %15.3f%% %8s\n", o, pad, table, r.rms_over_peak, r.rel_l2,
                    100 * r.worst_peak_error, r.peaks_on_pixel ? "ok" : "OFF");
        std::fflush(stdout);
      }
}
