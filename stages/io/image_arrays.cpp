#include "stages/io/image_arrays.hpp"

#include "runtime/error.hpp"
#include "stages/shared/array_feed.hpp"

namespace uvflow::io_image_arrays {
namespace {

class ImageArrays : public DeclaredStage<decl> {
 public:
  void check(const Params& p) override { name_ = p.name; }

  void prepare(PrepareContext& pc) override {
    a_ = array_feed::images(name_);
    backend_ = pc.backend;
    if (!a_) {
      if (pc.dry_run) return;  // `uvflow check` of a pipeline meant for a program
      throw InputError("io.image_arrays '" + pc.id + "': no images were handed in under the name '" + name_ +
                       "' (a program hands them in: uvflow.Pipeline.run(inputs={'" + name_ + "': array}) in Python)");
    }
    if (backend_ == "cpu")
      for (auto& f : a_->frames)
        if (f.location() != Location::host)
          throw InputError("io.image_arrays '" + pc.id + "': the images '" + name_ +
                           "' are in device memory; the cpu backend reads host memory (backend: cuda uses them in place)");
  }

  std::int64_t stream_length() const override { return a_ ? std::int64_t(a_->frames.size()) : 0; }

  void start(Context& ctx) override {
    if (!a_->frames.empty()) ctx.emit(image, make(0, ctx));
  }

  void process(Context& ctx) override { ctx.emit(frames, make(ctx.item(), ctx)); }

 private:
  std::shared_ptr<Image> make(std::int64_t i, Context& ctx) {
    auto img = std::make_shared<Image>();
    img->index = i;
    img->nx = a_->nx;
    img->ny = a_->ny;
    img->wcs = a_->wcs;
    img->pixels = a_->frames[std::size_t(i)];
    if (backend_ == "cuda" && img->pixels.location() == Location::host) {
      // The first image goes out twice (`image`, then item 0 of `frames`): uploaded once.
      if (i == 0 && first_upload_.storage()) {
        img->pixels = first_upload_;
      } else {
        img->pixels.transfer(Location::device, ctx.stream(), false);
        ctx.add_work({.bytes_h2d = double(img->pixels.bytes())});
        if (i == 0) first_upload_ = img->pixels;
      }
    }
    return img;
  }


  std::string name_, backend_;
  std::shared_ptr<const array_feed::ImageArrays> a_;
  Array<float> first_upload_;
};

}  // namespace

StageSpec spec() {
  return decl.spec({cpu_backend<ImageArrays>(),
                    UVFLOW_CUDA_BACKEND([] { return std::unique_ptr<Stage>(std::make_unique<ImageArrays>()); })});
}

}  // namespace uvflow::io_image_arrays
