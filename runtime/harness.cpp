#include "runtime/harness.hpp"

#include <algorithm>

#include "runtime/param_check.hpp"

namespace uvflow {

StageHarness::StageHarness(const StageSpec& spec, std::string backend, std::map<std::string, ParamValue> params,
                           PortShapes inputs)
    : spec_(spec), backend_(std::move(backend)), state_(spec_, "harness", backend_, files_) {
  const BackendSpec* b = spec_.backend(backend_);
  if (!b) throw std::invalid_argument(spec_.type + " has no backend " + backend_);
  ParamValues p;
  for (auto& ps : spec_.params) {
    auto it = params.find(ps.name);
    if (it != params.end()) {
      ParamValue v = it->second;
      if (ps.type == ParamType::number && std::holds_alternative<std::int64_t>(v)) v = double(std::get<std::int64_t>(v));
      if (auto m = check_param(ps, v, spec_.type + " parameter '" + ps.name + "'")) throw std::invalid_argument(*m);
      p.set(ps.name, v);
      params.erase(it);
    } else if (ps.def) {
      p.set(ps.name, *ps.def);
    }
  }
  if (!params.empty()) throw std::invalid_argument(spec_.type + " has no parameter '" + params.begin()->first + "'");
  stage_ = b->make();
  // As the executor does, a cuda stage has its own stream.
  if (backend_ == "cuda") state_.stream = device::Stream::create();
  stage_->configure(p);
  PrepareContext pc{.id = "harness", .backend = backend_, .inputs = inputs,
                    .outputs = describe_outputs(spec_, p, inputs), .stream = state_.stream};
  stage_->prepare(pc);
}

StageHarness::~StageHarness() { files_.rollback(); }

void StageHarness::set_input(const std::string& port, std::shared_ptr<const Payload> p) {
  once_[port] = std::move(p);
  auto& c = state_.connected;
  if (std::find(c.begin(), c.end(), port) == c.end()) c.push_back(port);
}

void StageHarness::process(std::map<std::string, std::shared_ptr<const Payload>> stream_inputs) {
  call(&Stage::process, next_item_, PayloadMap(stream_inputs.begin(), stream_inputs.end()));
  next_item_++;
}

// Device inputs are ordered as the executor orders them: the stage's stream waits for their last
// writers, so a test need not synchronise after an upload. After such a call the stream inputs,
// which the caller may drop at once, are not released (and their memory reused) before the stage's
// work on them is done, and the call's outputs carry its event (runtime/payload.hpp).
void StageHarness::call(void (Stage::*fn)(Context&), std::int64_t item, PayloadMap stream_inputs) {
  for (auto& [port, _] : stream_inputs)
    if (std::find(state_.connected.begin(), state_.connected.end(), port) == state_.connected.end())
      state_.connected.push_back(port);
  PayloadMap inputs = stream_inputs;
  inputs.insert(once_.begin(), once_.end());
  bool on_device = false;
  for (auto& [_, p] : inputs)
    if (has_device_array(*p)) {  // a stream (and a device) only then
      if (!state_.stream.valid()) state_.stream = device::Stream::create();
      wait_for_device_input(*p, state_.stream);
      on_device = true;
    }
  StageContext ctx(state_, item, std::move(inputs));
  ((*stage_).*fn)(ctx);
  if (on_device) {
    std::vector<const Payload*> in, out;
    for (auto& [_, p] : stream_inputs) in.push_back(p.get());
    for (auto& [_, p] : ctx.outbox) out.push_back(p.get());
    stamp_device_use(in, out, state_.stream.record());
  }
  for (auto& [port, p] : ctx.outbox) out_[port].push_back(std::move(p));
}

void StageHarness::start() {
  call(&Stage::start, -1, {});
  next_item_ = 0;
}

void StageHarness::run_source() {
  start();
  for (std::int64_t i = 0, n = stage_->stream_length(); i < n; ++i) process();
}

void StageHarness::finish() { call(&Stage::finish, -1, {}); }

std::vector<std::shared_ptr<const Payload>> StageHarness::outputs(const std::string& port) {
  if (state_.stream.valid()) state_.stream.synchronize();
  return out_[port];
}

Work StageHarness::work() const { return state_.work.total(state_.stream); }

void StageHarness::commit_outputs() { files_.commit(); }

}  // namespace uvflow
