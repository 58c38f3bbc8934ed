// io.write_fits: write images as FITS files (cfitsio), with the header radio astronomers expect.
//
//   in   image  Image, stream (a single image is a stream of one), host
//   params
//     path       output file; "{index}" is replaced by the item index (zero-padded to 5) and is
//                required when more than one image arrives
//     bitpix     -32 (float) or -64 (double)
//
// Dirty images get a WSClean-style celestial header: 4 axes RA---SIN, DEC--SIN, FREQ, STOKES,
// CRPIX at N/2+1 (the phase centre), CDELT1 negative (RA increases to the left), BUNIT JY/BEAM,
// EQUINOX/RADESYS, TELESCOP, DATE-OBS. Images without sky coordinates (StrayLight frames) are
// written as plain 2-D arrays. The file appears only when the whole run succeeds.
#pragma once

#include "runtime/stage.hpp"

namespace uvflow {

StageSpec write_fits_spec();

}  // namespace uvflow
