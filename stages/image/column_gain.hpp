// image.column_gain: the per-column correction of the StrayLight report's Listing 3.6,
// out[y][x] = in[y][x] * gain[x].
//
//   in   frame  Image, stream, backend residency
//   out  frame  Image, stream, backend residency: same size and index
//   params
//     source  file | flat | linear (default flat)
//     path    file: a FITS file of gains, a 1-D array or a 1 x W image, one gain per column
//     gain    flat: the gain of every column; linear: the gain at the centre column (default 1)
//     slope   linear: gain change per column, gain[x] = gain + slope * (x - (W - 1) / 2)
//   backends: cpu; cuda (stages/image/column_gain.cu: the gains uploaded once per frame width,
//             frames stay on the device)
//
// The operator of Listing 3.6 was lost when the report was turned into text; it is taken to be a
// product (see the stage doc for why). A gain vector whose length differs from a frame's width is
// an InputError naming the frame and the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/payloads/image.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec column_gain_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_column_gain_cuda();  // stages/image/column_gain.cu
#endif

namespace column_gain {

// Where the gains come from, shared by the backends so that they accept the same parameters and
// files and reject the same frames.
// Throws InputError unless the frame's pixels are nx * ny of a non-empty frame.
void check_frame(const Image& frame);

class Gains {
 public:
  void configure(const Params& p);  // throws ParamError
  void load();                      // source file: reads and checks it (InputError)
  // The gain of each column of frame `index`, `nx` pixels wide. Thread-safe.
  std::vector<float> of_frame(int nx, std::int64_t index) const;

 private:
  std::string source_, path_, where_;
  double gain_ = 1, slope_ = 0;
  std::vector<float> file_gains_;
};

}  // namespace column_gain
}  // namespace uvflow
