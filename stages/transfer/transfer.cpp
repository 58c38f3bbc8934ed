#include "stages/transfer/transfer.hpp"

namespace uvflow {
namespace {

// Both directions: the payload's arrays moved to `to` on the stage's stream, the bytes counted.
template <const auto& decl, Location to>
class Transfer : public DeclaredStage<decl> {
 public:
  void process(Context& ctx) override {
    auto in = ctx.input(transfer::kPort);
    auto out = in->moved_to(to, ctx.stream(), /*pinned=*/true);
    Work w;
    (to == Location::device ? w.bytes_h2d : w.bytes_d2h) = double(in->bytes());
    ctx.add_work(w);
    ctx.emit(transfer::kPort, out);
  }
};

template <const auto& decl, Location to>
StageSpec spec_of() {
  return decl.spec({{"cuda", [] { return std::unique_ptr<Stage>(std::make_unique<Transfer<decl, to>>()); }}});
}

}  // namespace

StageSpec transfer_to_device::spec() { return spec_of<decl, Location::device>(); }
StageSpec transfer_to_host::spec() { return spec_of<decl, Location::host>(); }

}  // namespace uvflow
