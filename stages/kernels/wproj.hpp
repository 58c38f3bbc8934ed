// Its image_size and cell_arcsec set the image geometry of the whole pipeline (KernelStack::geom);
// the derived layouts are built by runtime/payloads/kernel_stack_builder.hpp.
#pragma once

#include <filesystem>
#include <string>

#include "runtime/kernel_cache.hpp"
#include "runtime/payloads/kernels.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/stage_decl.hpp"
#include "runtime/units.hpp"

namespace uvflow {
// Smallest even 2^a 3^b 5^c greater than int(padding * image_size - 0.5).
int wproj_grid_size(int image_size, double padding);
}  // namespace uvflow

namespace uvflow::kernels_wproj {

inline constexpr int kMaxPlanes = 32767;  // GridCoord::plane is 16 bits

inline constexpr In<VisSetInfo> info{
    .name = "info", .arity = Arity::once, .residency = Residency::host,
    .doc = "the observation's |w| statistics (wavelengths)"};
inline constexpr Out<KernelStack> kernels{
    .name = "kernels", .arity = Arity::once, .residency = Residency::host,
    .doc = "the kernel stack with its geometry and layouts"};

struct Params {
  std::int64_t image_size = 512;
  double cell_arcsec = 2.0;
  double padding = 1.2;
  std::int64_t oversample = 0;
  std::int64_t w_planes = 0;
  std::int64_t max_conv_size = 2000;
  double support_threshold = 1e-3;
  std::filesystem::path cache_dir = kernel_cache::kDefaultDir;
  std::string layouts = "rows";
  double epsilon = 0;
  std::string plane_rule = "accuracy";
  std::int64_t chebyshev = 0;
  std::string chebyshev_variable = "r2";
};

inline const StageDecl<Params> decl{
    .type = "kernels.wproj",
    .summary = "w-projection convolution kernels (spheroidal taper x w screen), made once per run and cached on disk",
    .doc = "Builds the kernel stack of OSKAR's w-projection imager (WPROJ.md): grid size the smallest even 2^a 3^b 5^c "
    "above padding * image_size; max_w = 1.05 max|w|, scaled by rms/mid when the rms of |w| exceeds the "
    "mid-range (0.25 / cell, OSKAR's fallback, when all w are 0); plane k at |w| = k^2 / w_scale with "
    "w_scale = (planes-1)^2 / max_w. Each "
    "plane is the forward FFT (conv_size = padding * image_size, capped at max_conv_size and rounded down to a multiple of 2 oversample) of Schwab's spheroidal "
    "taper times exp(2 pi i w (sqrt(1-l^2-m^2) - 1)), sampled every dl so that conv_size/oversample samples span "
    "the padded field. The quarter [0, conv_size/2 - 1)^2 is kept; the support is where |K| along either axis "
    "last exceeds support_threshold times the plane-0 peak; plane p is stored compacted to S = o/2 + o s + 1 a "
    "side and every plane is divided by plane 0's sum at integer offsets, so plane 0 sums to 1. The FFTs are "
    "FFTW single precision, pruned to the screen's rows and the kept columns, planes in parallel; plans are "
    "measured when there are enough planes per thread, and FFTW wisdom is kept in cache_dir. The stack is cached "
    "in cache_dir under a hash of everything it depends on; a corrupt or mismatched file is ignored with a "
    "warning and rewritten. Tested against a direct double-precision DFT of the screen. w_planes and oversample "
    "left 0 come from error models of the w-plane quantisation (a phase error at the image corners of "
    "2 pi delta_w max|n - 1|) and of the kernel lookup, for a peak accuracy of about 1e-3 (w_planes never below "
    "OSKAR's max(16, max_w |sin(cell image_size / 2)|)), or for epsilon when it is set; then the FFT is sized for the "
    "widest kernel, or the stage stops naming the memory it would need (docs/prediction.md; measured against "
    "WSClean's wgridder in bench/results/wproj_wide_field.md). Given both, the FFT is padding x image_size, "
    "capped at max_conv_size, as in OSKAR.",
    .inputs = {info},
    .outputs = {kernels},
    .params = {{&Params::image_size,
                {.name = "image_size", .unit = "pixels", .min = 2, .max = 65536,
                 .doc = "output image side (even); sets the image geometry of the whole pipeline"}},
               {&Params::cell_arcsec, {.name = "cell_arcsec", .unit = "arcsec", .min = 1e-4, .max = 3600, .doc = "image pixel size"}},
               {&Params::padding,
                {.name = "padding", .min = 1, .max = 4,
                 .doc = "grid side / image side, before rounding the grid up to an even 2^a 3^b 5^c"}},
               {&Params::oversample,
                {.name = "oversample", .min = 0, .max = 16,
                 .doc = "kernel samples per grid cell (even); 0 chooses it from the field and padding for a peak "
                        "accuracy of about 1e-3 (at most 16); 4 in all the seeds' data sets"}},
               {&Params::w_planes,
                {.name = "w_planes", .min = 0, .max = kMaxPlanes,
                 .doc = "number of w-planes; 0 derives it from the data and the field for a peak accuracy of about "
                        "1e-3 (never fewer than OSKAR's max_w sin(fov/2), at least 16); 1 grids without w-projection"}},
               {&Params::max_conv_size,
                {.name = "max_conv_size", .unit = "samples", .min = 16, .max = 8192,
                 .doc = "cap on the kernel FFT size (OSKAR's 2000): memory and time grow with its square"}},
               {&Params::support_threshold,
                {.name = "support_threshold", .min = 1e-7, .max = 0.5,
                 .doc = "kernel support edge, relative to the largest kernel peak (plane 0's)"}},
               {&Params::cache_dir,
                {.name = "cache_dir",
                 .doc = "directory of cached kernel stacks and FFTW wisdom; {cache} is the user's cache folder "
                        "($XDG_CACHE_HOME/uvflow, else ~/.cache/uvflow), capped at UVFLOW_CACHE_MAX (default 4G) with the "
                        "least recently used stacks evicted first (`uvflow cache` lists it, `uvflow cache clear` empties "
                        "it); an empty string disables the cache"}},
               {&Params::layouts,
                {.name = "layouts", .choices = {"rows", "gpu", "all", "quarter"},
                 .doc = "derived layouts to build besides the compacted quarter (which grid.serial and grid.atomic "
                        "read): rows for grid.tiled on the cpu, gpu (oerc and nag) for grid.tiled on cuda; a GPU "
                        "pipeline uploads only what is built"}},
               {&Params::epsilon,
                {.name = "epsilon", .min = 0, .max = 0.1,
                 .doc = "requested accuracy: the largest error of a point source's peak, relative to its flux, over "
                        "the whole field (docs/prediction.md); when set, w_planes and oversample are chosen from it "
                        "and the field (their values are ignored) and the kernel FFT is sized to hold the widest "
                        "kernel (an error names the memory when max_conv_size is too small); 0 keeps the given settings"}},
               {&Params::plane_rule,
                {.name = "plane_rule", .choices = {"accuracy", "oskar"},
                 .doc = "how w_planes 0 is chosen: accuracy (the error model, for about 1e-3 of a peak) or oskar "
                        "(OSKAR's max(16, max_w |sin(fov/2)|), the rule of the seeds' data sets, kept for benchmarks "
                        "comparable with them; 0.2-0.9 % peak errors on wide fields); with oskar the FFT is "
                        "padding x image_size as when w_planes is given"}},
               {&Params::chebyshev,
                {.name = "chebyshev", .unit = "terms", .min = 0, .max = 256,
                 .doc = "also fit each plane with this many Chebyshev coefficients (SDP Memo 73), for grid.tiled's "
                        "chebyshev variant: a 1-D series in r^2 (or r, chebyshev_variable) of the distance r from the "
                        "visibility, over the disc r <= s + 1/2 cells (the table's last sample along the axes; zero "
                        "beyond it, which drops the footprint's corners), complex coefficients, by least squares "
                        "over every sample of the plane's quarter kernel inside the disc (Householder QR), with fewer "
                        "terms on a plane where more would make the coefficients sum beyond 16 times its peak (too "
                        "few or too unevenly spread radii for the degree: small planes, in r most; the float series "
                        "would lose to rounding what the fit gained). The fit's footprint sums give the chebyshev "
                        "gridder its norm; the RMS and largest error against the table (worst plane, relative to "
                        "its peak) are logged. The 1-D fit cannot follow the kernels' departure from radial symmetry "
                        "(the spheroidal taper is separable): about 2.5e-3 of the peak RMS however many terms "
                        "(bench/results/chebyshev.md). Not cached: refitted every run. 0: no fit"}},
               {&Params::chebyshev_variable,
                {.name = "chebyshev_variable", .choices = {"r2", "r"},
                 .doc = "the series' variable: r2 (x = 2 r^2 / R^2 - 1: no square root per point, and it stretches "
                        "the kernel's steep centre, the memo's better fit) or r (x = 2 r / R - 1)"}}},
    .concurrency = Concurrency::serial,
    // The geometry follows from the parameters alone; the planes and supports from the data.
    .describe = [](const Params& p, const PortShapes&) {
      const GridGeometry g{.image_size = int(p.image_size),
                           .grid_size = wproj_grid_size(int(p.image_size), p.padding),
                           .cell_rad = p.cell_arcsec * kArcsecToRad};
      return PortShapes{{std::string(kernels.name), PortShape{.grid = g}}};
    },
};

StageSpec spec();

}  // namespace uvflow::kernels_wproj

namespace uvflow {

// The parameters that shape a stack (cell in radians).
struct WProjSettings {
  int image_size = 512;
  double cell_rad = 0;
  double padding = 1.2;
  int oversample = 4;  // 0: from the field
  int w_planes = 0;    // 0: from the data and the field
  int max_conv_size = 2000;
  double support_threshold = 1e-3;
  double epsilon = 0;  // 0: w_planes and oversample as given
  bool oskar_planes = false;  // w_planes 0 by OSKAR's rule, not the error model
};

// What the settings and the data fix before any kernel is computed (WPROJ.md).
struct WProjSizes {
  GridGeometry geom;
  int oversample = 0;
  int planes = 0;
  bool auto_planes = false;      // chosen by the stage (w_planes 0 or epsilon), with auto_oversample
  bool auto_oversample = false;  // likewise; either sizes the FFT for the widest kernel
  double target = 0;             // the accuracy they were chosen for (epsilon, else the automatic one)
  int conv_size = 0;        // kernel FFT size (even)
  bool conv_capped = false; // conv_size is max_conv_size, below padding * image_size
  int inner = 0;            // screen samples a side: conv_size / oversample
  double max_w = 0;         // wavelengths
  double w_scale = 0;       // plane k at |w| = k^2 / w_scale
  double dl = 0;            // direction-cosine step between screen samples
  double max_n_minus_1 = 0; // largest |n - 1| of the image (its corners)
  double w_error = 0;       // predicted peak error from w-plane quantisation (error model, wproj.cpp)
  double lookup_error = 0;  // predicted peak error from the nearest-sample kernel lookup
  int max_support() const;  // largest support whose compacted kernel fits in the kept quarter
};

// Throws uvflow::InputError when the observation's w statistics are unusable.
WProjSizes wproj_sizes(const WProjSettings& s, const Observation& obs);

}  // namespace uvflow
