#include "stages/transfer/transfer.hpp"

namespace uvflow {
namespace {

// Both directions: the payload's arrays moved to `to` on the stage's stream, the bytes counted.
template <const auto& decl, const PortSpec& in_data, const PortSpec& out_data, Location to>
class Transfer : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.input(in_data.name);
    auto out = in->moved_to(to, ctx.stream(), /*pinned=*/true);
    Work w;
    (to == Location::device ? w.bytes_h2d : w.bytes_d2h) = double(in->bytes());
    ctx.add_work(w);
    ctx.emit(out_data.name, out);
  }
};

template <class S>
BackendSpec cuda_backend() {
  return {"cuda", [] { return std::unique_ptr<Stage>(std::make_unique<S>()); }};
}

}  // namespace

StageSpec transfer_to_device::spec() {
  using namespace transfer_to_device;
  return decl.spec({cuda_backend<Transfer<decl, in_data, out_data, Location::device>>()});
}

StageSpec transfer_to_host::spec() {
  using namespace transfer_to_host;
  return decl.spec({cuda_backend<Transfer<decl, in_data, out_data, Location::host>>()});
}

}  // namespace uvflow
