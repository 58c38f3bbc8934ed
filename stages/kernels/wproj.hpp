// kernels.wproj: the w-projection kernel stack of WPROJ.md, made once per run from the
// observation's w statistics and cached on disk. Its image_size and cell_arcsec set the image
// geometry of the whole pipeline (KernelStack::geom).
//
//   in   info     VisSetInfo, once, host: max|w|, min|w|, rms|w| (wavelengths)
//   out  kernels  KernelStack, once, host: geometry, w-planes, supports, normalised compacted
//                 quarter kernels and the layouts built from them (stages/kernels/layouts.hpp)
//   params
//     image_size         integer, 512, pixels, even, [2, 65536]: output image side
//     cell_arcsec        number, 2, arcsec, [1e-4, 3600]: image pixel size
//     padding            number, 1.2, [1, 4]: grid side ~ padding * image_size
//     oversample         integer, 4, even, [2, 16]: kernel samples per grid cell
//     w_planes           integer, 0, [0, 32767]: number of w-planes; 0 = from the data, 1 = no w
//     max_conv_size      integer, 2000, samples, [16, 8192]: cap on the kernel FFT size (as OSKAR)
//     support_threshold  number, 1e-3, [1e-7, 0.5]: support edge relative to the plane-0 peak
//     cache_dir          path, ".cache/uvflow/kernels": stack cache ("" disables it)
#pragma once

#include "runtime/payloads/kernels.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec kernels_wproj_spec();

// The parameters that shape a stack (cell in radians).
struct WProjSettings {
  int image_size = 512;
  double cell_rad = 0;
  double padding = 1.2;
  int oversample = 4;
  int w_planes = 0;  // 0: from the data
  int max_conv_size = 2000;
  double support_threshold = 1e-3;
};

// What the settings and the data fix before any kernel is computed (WPROJ.md).
struct WProjSizes {
  GridGeometry geom;
  int oversample = 0;
  int planes = 0;
  int conv_size = 0;        // kernel FFT size (even)
  bool conv_capped = false; // conv_size is max_conv_size, below padding * image_size
  int inner = 0;            // screen samples a side: conv_size / oversample
  double max_w = 0;         // wavelengths
  double w_scale = 0;       // plane k at |w| = k^2 / w_scale
  double dl = 0;            // direction-cosine step between screen samples
  int max_support() const;  // largest support whose compacted kernel fits in the kept quarter
};

// Smallest even 2^a 3^b 5^c greater than int(padding * image_size - 0.5).
int wproj_grid_size(int image_size, double padding);
// Throws uvflow::InputError when the observation's w statistics are unusable.
WProjSizes wproj_sizes(const WProjSettings& s, const Observation& obs);

}  // namespace uvflow
