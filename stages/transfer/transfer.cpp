#include "stages/transfer/transfer.hpp"

namespace uvflow {
namespace {

class Transfer : public Stage {
 public:
  explicit Transfer(Location to) : to_(to) {}
  void process(Context& ctx) override {
    auto in = ctx.input("data");
    auto out = in->moved_to(to_, ctx.stream(), /*pinned=*/true);
    Work w;
    (to_ == Location::device ? w.bytes_h2d : w.bytes_d2h) = double(in->bytes());
    ctx.add_work(w);
    ctx.emit("data", out);
  }

 private:
  Location to_;
};

StageSpec spec(Location to) {
  const bool up = to == Location::device;
  StageSpec s;
  s.type = up ? "transfer.to_device" : "transfer.to_host";
  s.summary = up ? "copy a payload from host to device memory (one asynchronous upload)"
                 : "copy a payload from device to pinned host memory (one asynchronous download)";
  s.doc = "Every array of the payload is copied on the stage's CUDA stream; the copy is ordered after the "
          "payload's last writer and later readers wait on its event. Bytes moved are counted in the run "
          "report. Inserted by the planner where needed unless run.transfers is explicit.";
  s.inputs = {{"data", kAnyPayload, Arity::stream, up ? Residency::host : Residency::device, "payload to copy"}};
  s.outputs = {{"data", kAnyPayload, Arity::stream, up ? Residency::device : Residency::host,
                "the same payload at its new location"}};
  s.backends = {{"cuda", [to] { return std::make_unique<Transfer>(to); }}};
  s.concurrency = Concurrency::serial;
  return s;
}

}  // namespace

StageSpec transfer_to_device_spec() { return spec(Location::device); }
StageSpec transfer_to_host_spec() { return spec(Location::host); }

}  // namespace uvflow
