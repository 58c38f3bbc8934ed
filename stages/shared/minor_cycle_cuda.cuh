// The cuda minor-cycle backends' common part (deconv.hogbom's and deconv.clark's; .cu files only) and
// deconv.restore's device work. The dirty image, PSF and model so far are read on the device, and the
// model and residual made there, so that a loop's state stays on the device from one major cycle to
// the next. The cycle's figures are computed there too, to the cpu backends' values: the starting
// peak, the robust RMS (exact medians by radix selection) and the model's flux (its non-zero pixels
// summed on the host in pixel order), so that both backends stop at the same limits and no image
// crosses the bus.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/shared/minor_cycle.hpp"

namespace uvflow::clean {

// Hogbom CLEAN as hogbom() does it, on device images: `residual` and `model` (nx x ny, added to),
// `psf` (pnx x pny, centre p0 > 0), `mask` (nx x ny bytes, or null: every pixel). Each iteration
// finds the peak of |residual| within the mask by a block-level argmax reduction (ties: the lowest
// index, as hogbom()),
// reads it back, and subtracts flux x the PSF over the overlap with one fma per pixel, as hogbom().
MinorCycle hogbom_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                       const std::uint8_t* mask, double gain, std::int64_t niter, double threshold,
                       const std::function<bool()>& cancelled, const device::Stream& stream);

// Clark CLEAN as clark() does it: the peak search, each cycle's limit and selection of the pixels
// above it (from the residual's peak per 64 x 64 tile, kept up to date where the subtraction changed
// it; the pixels sorted by index on the device), and the subtraction of its components on the
// device; the patch cycle on the host, by clark()'s code, on the selected pixels alone (read back:
// they are few). Two waits a cycle: the peak and count, then the pixels. The components are
// subtracted from the whole residual with the whole PSF over their overlap in one launch over the
// tiles they touch, one fma per pixel and component in their order as hogbom_cuda(), or, where that
// would move more memory (many components of a large PSF), by an FFT convolution on the 2nx x 2ny
// grid (cuFFT) as clark() does it. `mask` may be null: every pixel.
MinorCycle clark_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                      const std::uint8_t* mask, double gain, std::int64_t niter, double threshold, int psf_patch,
                      double cycle_factor, const std::string& where, const std::function<bool()>& cancelled,
                      const device::Stream& stream);

// The figures a minor cycle starts from, on the device image `dirty` (n pixels, `mask` may be null),
// equal to begin_minor_cycle()'s: the peak |value| (0 when none) and the robust RMS. And the sum of
// `model`'s pixels in pixel order, equal to model_flux().
struct StartFigures {
  double peak = 0, noise = 0;
};
StartFigures start_figures_cuda(const float* dirty, const std::uint8_t* mask, std::size_t n, const device::Stream& stream);
double model_flux_cuda(const float* model, std::size_t n, const device::Stream& stream);

// restore() on device images (nx x ny): `restored` = `residual` plus each non-zero pixel of `model`
// as a Gaussian `g` of that peak, out to the same reach; the Gaussians summed in single precision.
void restore_cuda(const float* model, const float* residual, float* restored, int nx, int ny, const Gaussian& g,
                  const device::Stream& stream);

// A cuda minor-cycle backend: the images on the device, the derived class's algorithm on them.
template <const auto& decl>
class MinorCycleCuda : public MinorCycleBase<decl> {
 public:
  using Params = typename DeclaredStage<decl>::Params;
  void process(Context& ctx) override {
    auto d = ctx.in(kDirty);
    auto p = ctx.in(kPsf);
    auto so_far = ctx.connected(kModelSoFar) ? ctx.in(kModelSoFar) : nullptr;
    auto control = ctx.connected(kControl) ? ctx.in(kControl) : nullptr;
    const std::string who = std::string(decl.type) + " (cuda)";
    check_cycle_inputs(decl.type, *d, so_far.get());
    if (!p->consistent()) throw InputError(std::string(decl.type) + ": the PSF has inconsistent size");
    check_on_device(d->pixels, who + ": the dirty image");
    check_on_device(p->pixels, who + ": the PSF");
    if (so_far) check_on_device(so_far->pixels, who + ": the model so far");
    const Params& pr = this->params();
    const device::Stream& stream = ctx.stream();
    auto s = static_cast<cudaStream_t>(stream.native());
    const std::size_t n = d->pixels.size();

    float centre = 0;
    device::check(cudaMemcpyAsync(&centre, p->pixels.data() + std::size_t(p->ny / 2) * std::size_t(p->nx) + std::size_t(p->nx / 2),
                                  sizeof centre, cudaMemcpyDeviceToHost, s),
                  who.c_str(), "read the PSF's centre");
    stream.synchronize();
    const double p0 = require_positive_centre(centre, *p, decl.type);
    // No mask (every pixel) unless a file or boxes give one: 1 byte a pixel less to read and upload.
    auto mask_dev = Array<std::uint8_t>::device(this->mask_.all() ? 0 : n, stream);
    if (!this->mask_.all())
      device::check(cudaMemcpyAsync(mask_dev.data(), this->mask_.get(d->nx, d->ny).data(), n, cudaMemcpyHostToDevice, s),
                    who.c_str(), "upload the mask");
    const std::uint8_t* mask = this->mask_.all() ? nullptr : mask_dev.data();
    auto figures = std::make_shared<CycleFigures>();
    const auto t0 = std::chrono::steady_clock::now();
    const StartFigures start = start_figures_cuda(d->pixels.data(), mask, n, stream);
    const double start_ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    figures->peak_start = start.peak;
    figures->noise = start.noise;
    const Limits limits = minor_cycle_limits(pr.threshold, pr.niter, start.peak, start.noise, control.get());

    auto residual = std::make_shared<Image>(*d), model = std::make_shared<Image>(*d);
    residual->pixels = Array<float>::device(n, stream);
    model->pixels = Array<float>::device(n, stream);
    if (model->wcs) model->wcs->bunit = "JY/PIXEL";
    device::check(cudaMemcpyAsync(residual->pixels.data(), d->pixels.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, s),
                  who.c_str(), "copy the dirty image");
    device::check(so_far ? cudaMemcpyAsync(model->pixels.data(), so_far->pixels.data(), n * sizeof(float),
                                           cudaMemcpyDeviceToDevice, s)
                         : cudaMemsetAsync(model->pixels.data(), 0, n * sizeof(float), s),
                  who.c_str(), "start the model");
    MinorCycle cycle =
        clean(residual->pixels.data(), model->pixels.data(), *d, *p, p0, mask, limits, [&] { return ctx.cancelled(); }, stream);
    if (cycle.stop == "cancelled") return;
    char note[64];
    std::snprintf(note, sizeof note, "%sstart figures %.1f ms", cycle.detail.empty() ? "" : "; ", start_ms);
    cycle.detail += note;
    keep_until(stream.record(), {&mask_dev});
    end_minor_cycle(ctx, decl.type, limits, cycle, model_flux_cuda(model->pixels.data(), n, stream),
                    pr.components ? pr.components->string() : "", *figures);
    ctx.emit(kModel, model);
    ctx.emit(kResidual, residual);
    ctx.emit(kFigures, figures);
  }

 protected:
  // Cleans the device image `residual` (the dirty image on entry) into `model` (added to), stopping
  // at `limits`, the work enqueued on `stream` (`mask`: null for every pixel).
  virtual MinorCycle clean(float* residual, float* model, const Image& dirty, const Image& psf, double p0,
                           const std::uint8_t* mask, const Limits& limits, const std::function<bool()>& cancelled,
                           const device::Stream& stream) = 0;
};

}  // namespace uvflow::clean
