// The cuda minor-cycle backends' common part (deconv.hogbom's and deconv.clark's; .cu files only): the
// dirty image, PSF and model so far are read on the device, and the model and residual made there, so
// that a loop's state stays on the device from one major cycle to the next. The cycle's starting
// figures (peak and robust RMS of the dirty image within the mask) are computed on a host copy of the
// dirty image, by the cpu backends' code, so that both stop at the same limits; the peak search and
// the subtraction run on the device (hogbom_cuda).
#pragma once

#include <cuda_runtime.h>

#include "runtime/cuda_check.hpp"
#include "runtime/error.hpp"
#include "stages/shared/minor_cycle.hpp"

namespace uvflow::clean {

// Hogbom CLEAN as hogbom() does it, on device images: `residual` and `model` (nx x ny, added to),
// `psf` (pnx x pny, centre p0 > 0), `mask` (nx x ny bytes). Each iteration finds the peak of
// |residual| within the mask by a block-level argmax reduction (ties: the lowest index, as hogbom()),
// reads it back, and subtracts flux x the PSF over the overlap with one fma per pixel, as hogbom().
MinorCycle hogbom_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                       const std::uint8_t* mask, double gain, std::int64_t niter, double threshold,
                       const std::function<bool()>& cancelled, const device::Stream& stream);

// Clark CLEAN as clark() does it: the peak search, the FFT convolution of each cycle's components
// with the whole PSF (cuFFT) and its subtraction on the device; each cycle's selection of pixels and
// its patch cycle on the host, as clark() does them, on the residual read back once per cycle (the
// selected pixels are few). `host_mask` is `mask` on the host.
MinorCycle clark_cuda(float* residual, float* model, int nx, int ny, const float* psf, int pnx, int pny, double p0,
                      const std::uint8_t* mask, const std::vector<std::uint8_t>& host_mask, double gain, std::int64_t niter,
                      double threshold, int psf_patch, double cycle_factor, const std::string& where,
                      const std::function<bool()>& cancelled, const device::Stream& stream);

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

    std::vector<float> dirty(n);
    float centre = 0;
    device::check(cudaMemcpyAsync(dirty.data(), d->pixels.data(), n * sizeof(float), cudaMemcpyDeviceToHost, s), who.c_str(),
                  "read the dirty image");
    device::check(cudaMemcpyAsync(&centre, p->pixels.data() + std::size_t(p->ny / 2) * std::size_t(p->nx) + std::size_t(p->nx / 2),
                                  sizeof centre, cudaMemcpyDeviceToHost, s),
                  who.c_str(), "read the PSF's centre");
    stream.synchronize();
    const double p0 = require_positive_centre(centre, *p, decl.type);
    const std::vector<std::uint8_t>& mask = this->mask_.get(d->nx, d->ny);
    auto figures = std::make_shared<CycleFigures>();
    const Limits limits = begin_minor_cycle(dirty.data(), mask, pr.threshold, pr.niter, control.get(), *figures);

    auto residual = std::make_shared<Image>(*d), model = std::make_shared<Image>(*d);
    residual->pixels = Array<float>::device(n, stream);
    model->pixels = Array<float>::device(n, stream);
    if (model->wcs) model->wcs->bunit = "JY/PIXEL";
    auto mask_dev = Array<std::uint8_t>::device(n, stream);
    device::check(cudaMemcpyAsync(residual->pixels.data(), d->pixels.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, s),
                  who.c_str(), "copy the dirty image");
    device::check(so_far ? cudaMemcpyAsync(model->pixels.data(), so_far->pixels.data(), n * sizeof(float),
                                           cudaMemcpyDeviceToDevice, s)
                         : cudaMemsetAsync(model->pixels.data(), 0, n * sizeof(float), s),
                  who.c_str(), "start the model");
    device::check(cudaMemcpyAsync(mask_dev.data(), mask.data(), n, cudaMemcpyHostToDevice, s), who.c_str(), "upload the mask");
    const MinorCycle cycle = clean(residual->pixels.data(), model->pixels.data(), *d, *p, p0, mask_dev.data(), mask, limits,
                                   [&] { return ctx.cancelled(); }, stream);
    if (cycle.stop == "cancelled") return;
    // The model's flux summed on the host in pixel order, as the cpu backends sum it.
    std::vector<float> m(n);
    device::check(cudaMemcpyAsync(m.data(), model->pixels.data(), n * sizeof(float), cudaMemcpyDeviceToHost, s), who.c_str(),
                  "read the model");
    stream.synchronize();
    end_minor_cycle(ctx, decl.type, limits, cycle, model_flux(m.data(), n), pr.components ? pr.components->string() : "",
                    *figures);
    ctx.emit(kModel, model);
    ctx.emit(kResidual, residual);
    ctx.emit(kFigures, figures);
  }

 protected:
  // Cleans the device image `residual` (the dirty image on entry) into `model` (added to), stopping
  // at `limits`, the work enqueued on `stream` (`host_mask`: `mask` on the host).
  virtual MinorCycle clean(float* residual, float* model, const Image& dirty, const Image& psf, double p0,
                           const std::uint8_t* mask, const std::vector<std::uint8_t>& host_mask, const Limits& limits,
                           const std::function<bool()>& cancelled, const device::Stream& stream) = 0;
};

}  // namespace uvflow::clean
