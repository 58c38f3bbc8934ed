#pragma once

#include <memory>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"
#include "stages/shared/wstack.hpp"

namespace uvflow::grid_wstack {

inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities, in any order (raw blocks: no w_sort, no kernels)"};
inline constexpr Out<Image> image{
    .name = "image", .arity = Arity::once, .doc = "the dirty image, already corrected for the kernel (JY/BEAM)"};

struct Params {
  std::int64_t image_size = 512;
  double cell_arcsec = 2.0;
  double epsilon = 1e-4;
  double padding = 2.0;
  std::string accumulate = "auto";
  std::int64_t pass_visibilities = std::int64_t(1) << 27;
};

inline const StageDecl<Params> decl{
    .type = "grid.wstack",
    .summary = "w-stacking with ES kernels: visibilities to a corrected dirty image at a requested accuracy",
    .doc = "The whole dirty image for the w-stacking method (docs/wstack.md): each visibility, weighted and "
           "flipped to w >= 0, is spread with an exponential-of-semicircle kernel of support W over W x W cells "
           "and W w-planes; per plane the grid (padding x image_size, rounded up to an even 2^a 3^b 5^c) is "
           "Fourier transformed, multiplied by the plane's w-screen exp(-2 pi i w_p (n - 1 - t0)) and accumulated; "
           "the sum is divided by the kernel's exact Fourier transform along u, v and w (Gauss-Legendre "
           "quadrature) and by the sum of the weights. W and the kernel shape come from epsilon and padding "
           "(the narrowest kernel whose measured per-axis error meets epsilon), the planes from the data's |w| "
           "range and the field's largest |n - 1| (dw = 1 / (padding max|n-1|)). Blocks are copied as they "
           "arrive (their tokens are released) and imaged when the stream ends, or in passes of "
           "pass_visibilities. Tested against a direct double-precision DFT on random skies over the whole "
           "field, edge included, narrow and wide fields: "
           "relative L2 error below epsilon for epsilon 1e-2 to 1e-5 (bench/results/wstack_accuracy.md), and "
           "as the exact adjoint of degrid.wstack. The cuda backend does the same on the device (staging arrays; at the end "
           "of the stream visibilities sorted by plane and tile, dense tiles spread through shared memory in fixed "
           "point, the others by global atomics; per plane a pruned FFT of two batched 1-D cuFFT passes, over the "
           "rows holding data and the image's columns; two waits per run) and is tested against the cpu backend. "
           "A non-finite uvw, or a non-finite value or weight of a visibility whose weight is not 0, is an input "
           "error (cpu: naming the block and visibility; cuda: their count, at the end of the stream or pass).",
    .inputs = {vis},
    .outputs = {image},
    .params = {{&Params::image_size, {.name = "image_size", .min = 2, .max = 65536, .doc = "image pixels a side (even)"}},
               {&Params::cell_arcsec, {.name = "cell_arcsec", .unit = "arcsec", .min = 1e-6, .doc = "pixel size"}},
               {&Params::epsilon,
                {.name = "epsilon",
                 .min = 1e-6,
                 .max = 0.1,
                 .doc = "requested relative L2 accuracy of the image against a direct DFT; sets the kernel support "
                        "(with padding 2: W = 4, 5, 6, 7, 8 at 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)"}},
               {&Params::padding,
                {.name = "padding",
                 .min = 0,
                 .max = 4.0,
                 .doc = "oversampling sigma: grid cells per image pixel; larger means narrower kernels but larger FFTs "
                        "and more w-planes per unit of w. In single precision 1.2 reaches epsilon 1e-3, 1.5 1e-5, 2 "
                        "1e-6 (a smaller epsilon is refused, naming this parameter). 0: the one of 1.25, 1.5, 1.75, "
                        "2, 2.5, 3 that reaches epsilon at the least predicted time for the data (its count and |w| "
                        "range, known when the stream ends; the cost model of `choose: auto`), logged"}},
               {&Params::accumulate,
                {.name = "accumulate",
                 .choices = {"auto", "single", "double"},
                 .doc = "precision of the uv grid of each plane (each plane is transformed in single precision): "
                        "auto is double at epsilon 1e-5 and below, single above"}},
               {&Params::pass_visibilities,
                {.name = "pass_visibilities",
                 .min = 1,
                 .doc = "the most visibilities held before they are imaged: a stream with more is imaged in passes "
                        "over all w-planes (the images summed), so memory stays bounded (20 bytes a visibility "
                        "held, and on cuda about 53 more while a pass sorts them) at the cost of one set of plane "
                        "transforms per pass (the estimate and padding 0's choice count them). With padding 0, the padding is chosen "
                        "once, at the first pass, for the observation's visibility count and |w| range where its "
                        "metadata gives them"}}},
    .concurrency = Concurrency::serial,
    .describe = [](const Params& p, const PortShapes&) {
      const int n = int(p.image_size);
      return PortShapes{{std::string(image.name), PortShape{.items = 1, .nx = n, .ny = n}}};
    },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/grid/wstack.cu
#endif

// Both backends: the engine the parameters ask for (ParamError naming epsilon or cell_arcsec when
// the kernel cannot reach epsilon or the field reaches the horizon).
wstack::Engine make_engine(const Params& p);
// With padding 0, the engine at the padding predicted fastest for this data (wstack::cheapest_padding),
// logged for the stage `id`; otherwise `e`.
wstack::Engine padded_for_data(const wstack::Engine& e, const Params& p, double n, double min_abs_w,
                               double max_abs_w, const EstimateContext& c, std::string_view id);
// The passes over the planes that n visibilities take (pass_visibilities), at least 1.
double passes_for(const Params& p, double n);

// The engine of a run's passes, chosen at its first: padded_for_data for the pass's visibilities when
// it is the only pass (`whole`: the stream ended), else for what `obs` says the stream holds (its
// count and |w| range) where it says, since later passes must share the padding: their images are
// summed before one correction.
wstack::Engine first_pass_engine(const wstack::Engine& e, const Params& p, const Observation* obs, bool whole, double n,
                                 double min_abs_w, double max_abs_w, const EstimateContext& c, std::string_view id);

// Padding 0 in a run: the candidate paddings' kernels searched in a oneTBB task from prepare() on,
// while the data streams in (on the H100's host the search took 0.2-0.3 s of finish(), with the GPU
// idle), so that padded_for_data() in finish() only compares costs.
class PaddingSearch {
 public:
  PaddingSearch();
  ~PaddingSearch();  // waits for a search still running
  void start(const Params& p, const wstack::Engine& e);  // nothing unless p.padding is 0
  void wait();
 private:
  struct Task;
  std::unique_ptr<Task> task_;
};

}  // namespace uvflow::grid_wstack
