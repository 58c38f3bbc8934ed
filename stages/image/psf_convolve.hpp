// image.psf_convolve: convolve each frame with the stray-light PSF, with IDL's EDGE_WRAP
// semantics exactly as the StrayLight report's Listing 4.1 (the reference):
//
//   out[(i + kY/2) mod H][(j + kX/2) mod W] = sum_{k < kY, l < kX} in[(i+k) mod H][(j+l) mod W] * psf[k][l]
//
//   in   frame  Image, stream, backend residency: H rows of W pixels, float; one size per stream
//   in   psf    Image, once, host: kY rows of kX pixels, any size up to the frame's (checked on the
//               host where it was made; the cuda backend uploads it once per stream)
//   out  frame  Image, stream, backend residency: same size and index as the input frame
//   params
//     method  direct | fft | auto (default auto: the cheaper of the two by a cost model per backend)
//     wisdom  FFTW wisdom file (default .cache/uvflow/fftwf.wisdom; "" disables it; cpu only)
//   backends: cpu   direct: Listing 4.7's loop order (output row, PSF row, x, PSF column),
//                   register-blocked and vectorised, oneTBB over output rows;
//                   fft: FFTW r2c/c2r on the frame wrap-padded to a 7-smooth size, as fused
//                   1-D passes on oneTBB, the PSF spectrum made once per stream
//             cuda  (stages/image/psf_convolve.cu) direct: 32 x 64 output tiles, the frame tile
//                   with its halo and 8 x 32 PSF pieces staged through shared memory, 8 outputs
//                   per thread in registers; fft: cuFFT R2C/C2R on the same wrap-padded size as
//                   the cpu fft, the PSF spectrum made on the device once per stream
//
// The cpu backend is the reference other backends are tested against. Input errors (PSF larger
// than the frame, NaN, infinite or all-zero PSF, a frame of another size than the stream's first,
// a NaN or infinite frame pixel) are detected on the frame where they appear; the cpu backend
// raises them before that frame is emitted. The cuda backend raises all but the last the same way,
// but finds non-finite pixels on the device, in the kernels that read the frame: it learns of
// them when the frame's work has completed (at the next frame, or at the end of the stream)
// without a host wait per frame, so the frame itself has been emitted; the run still fails with
// the same message and writes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage.hpp"

namespace uvflow {

StageSpec psf_convolve_spec();

#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_psf_convolve_cuda();  // stages/image/psf_convolve.cu
#endif

// Shared by the backends, so that every backend accepts and rejects the same inputs with the same
// messages and picks methods by the same sizes.
namespace psf_convolve {

enum class Method { direct, fft };

// Checks one stream: the PSF once (finite, not all zero, fits in the frame), then every frame
// against the first. Throws InputError naming the frame index and both sizes.
class StreamCheck {
 public:
  void check(const Image& frame, std::int64_t item, const Image& psf);

 private:
  int nx_ = -1, ny_ = -1;
  std::int64_t first_ = -1;
};

// Throws InputError naming the NaN (`nan`) or infinite pixel (x, y) of frame `item`.
[[noreturn]] void throw_non_finite(std::int64_t item, int x, int y, bool nan);

// The padded transform length of the fft method along one axis: the frame extended periodically
// by the PSF size minus one, rounded up to a multiple of 8 whose prime factors are all 2, 3, 5 or 7
// (FFTW's fast lengths; without the factor 8, lengths such as 882 = 2*3^2*7^2 or 5292 transform
// markedly slower than the larger 896 or 5376).
int fft_size(int frame, int psf);

// The auto method on the cpu: direct when its estimated time is below the fft method's.
Method choose_cpu(int nx, int ny, int kx, int ky);

// The auto method on the cuda backend, by the same rule with the device's costs.
Method choose_cuda(int nx, int ny, int kx, int ky);

// The method of a stream: the `method` parameter, or for auto the choice of `backend` ("cpu" or
// "cuda"); logged once, with the transform sizes of fft.
Method pick(const std::string& method, const std::string& backend, const std::string& stage_id, int nx, int ny,
            int kx, int ky);

}  // namespace psf_convolve
}  // namespace uvflow
