// image.psf_convolve: convolve each frame with the stray-light PSF, with IDL's EDGE_WRAP
// semantics exactly as the StrayLight report's Listing 4.1 (the reference):
//
//   out[(i + kY/2) mod H][(j + kX/2) mod W] = sum_{k < kY, l < kX} in[(i+k) mod H][(j+l) mod W] * psf[k][l]
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
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/payloads/image.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow::image_psf_convolve {

inline constexpr In<Image> in_frame{.name = "frame", .doc = "frames, one size per stream"};
inline constexpr In<Image> psf{
    .name = "psf",
    .arity = Arity::once,
    .residency = Residency::host,
    .doc = "the PSF, no larger than a frame (checked on the host; the cuda backend uploads it once)"};
inline constexpr Out<Image> out_frame{.name = "frame", .doc = "convolved frames, same size and index"};

struct Params {
  std::string method = "auto";
  std::filesystem::path wisdom = ".cache/uvflow/fftwf.wisdom";
};

inline const StageDecl<Params> decl{
    .type = "image.psf_convolve",
    .summary = "convolve frames with the stray-light PSF, IDL EDGE_WRAP semantics (StrayLight Listing 4.1)",
    .doc =
        "out[(i + kY/2) mod H][(j + kX/2) mod W] = sum over k < kY, l < kX of in[(i+k) mod H][(j+l) mod W] * "
        "psf[k][l]: the frame wraps around at every edge, and the PSF's pixel (kX/2, kY/2) maps a frame pixel onto "
        "itself. Any PSF size up to the frame's, odd or even; float in and out. method direct follows the loop "
        "order of the report's Listing 4.7 (PSF rows outside, contiguous x loops inside) with each row widened "
        "by its periodic continuation instead of a modulo per pixel, 64 columns in AVX registers and oneTBB "
        "over output rows. method fft extends the frame periodically by the PSF size minus one to a length that "
        "FFTW transforms fast (a multiple of 8 with prime factors 2, 3, 5, 7; 5271 x 813 has the primes 251 and "
        "271), correlates there with FFTW real-to-complex transforms done as fused row and column passes on "
        "oneTBB, and keeps the rows and columns that equal the circular result; the PSF spectrum is made once per "
        "stream. Its plans are measured on the first frame (about a second per size) and kept in the wisdom "
        "file, so later runs start at once. method auto picks the cheaper by a cost model calibrated on the "
        "2-core benchmark machine: direct for small PSFs, fft from about 14 x 14 on 5271 x 813 frames (fft then "
        "costs about the same for any PSF size). Every method matches a double-precision Listing 4.1 to a "
        "relative Frobenius error below 1e-5 (about 1e-7 to 5e-7 in practice). A PSF larger than the frame, with "
        "a NaN or infinite pixel or all zero, a frame of another size than the stream's first, and a frame "
        "with a NaN or infinite pixel (the methods would spread it differently) are input errors. The run table's "
        "updates count W * H * kX * kY multiply-adds per frame whatever the method, so "
        "its rate compares methods directly. The cuda backend keeps frames on the device: method direct stages "
        "32 x 64 output tiles of the frame, with their wrapped halo, and 8 x 32 pieces of the PSF through shared "
        "memory, each thread keeping 8 outputs in registers; method fft wrap-pads on the device to the cpu fft's "
        "size and correlates with cuFFT R2C/C2R, the PSF spectrum made on the device once per stream; method auto "
        "picks by the same rule with the device's costs (direct up to about 25 x 25 on 5271 x 813 frames). It is "
        "tested against the same double-precision Listing 4.1 and raises the same input errors, except that a "
        "non-finite frame pixel, found by the kernels that read the frame, is raised once that frame's work has "
        "completed (at a later frame or the end of the stream) rather than before it is emitted; the run fails "
        "all the same and writes nothing.",
    .inputs = {in_frame, psf},
    .outputs = {out_frame},
    .params = {{&Params::method,
                {.name = "method",
                 .choices = {"direct", "fft", "auto"},
                 .doc = "direct (small PSFs), fft (large PSFs) or auto (chosen per stream from the frame and PSF "
                        "sizes)"}},
               {&Params::wisdom,
                {.name = "wisdom",
                 .doc = "fft (cpu): FFTW wisdom file, so that only the first run measures its plans; \"\" disables "
                        "it"}}},
    // One frame at a time, each spread over every core: the frame stays in the shared cache (the
    // report's section 3.5) and the scratch grids and PSF spectrum are allocated once.
    .concurrency = Concurrency::serial,
    .describe = [](const Params&, const PortShapes& in) {
      auto it = in.find(in_frame.name);
      return it == in.end() ? PortShapes{} : PortShapes{{std::string(out_frame.name), it->second}};
    },
};

StageSpec spec();
#ifdef UVFLOW_WITH_CUDA
std::unique_ptr<Stage> make_cuda();  // stages/image/psf_convolve.cu
#endif

// Shared by the backends, so that every backend accepts and rejects the same inputs with the same
// messages and picks methods by the same sizes.
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

}  // namespace uvflow::image_psf_convolve
