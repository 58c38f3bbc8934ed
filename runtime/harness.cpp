#include "runtime/harness.hpp"

#include <unistd.h>

namespace uvflow {

class StageHarness::Ctx : public Context {
 public:
  Ctx(const StageSpec& spec, std::string id, std::string backend) : spec_(spec), id_(std::move(id)), backend_(std::move(backend)) {}
  const std::string& stage_id() const override { return id_; }
  const std::string& backend() const override { return backend_; }
  std::int64_t item() const override { return item_; }
  bool connected(std::string_view port) const override {
    return once_.count(std::string(port)) || current_.count(std::string(port));
  }
  std::shared_ptr<const Payload> input(std::string_view port) const override {
    if (auto it = current_.find(std::string(port)); it != current_.end()) return it->second;
    if (auto it = once_.find(std::string(port)); it != once_.end()) return it->second;
    if (!spec_.input(port)) throw std::logic_error("stage has no input port '" + std::string(port) + "'");
    return nullptr;
  }
  void emit(std::string_view port, std::shared_ptr<Payload> p) override {
    if (!spec_.output(port)) throw std::logic_error("stage has no output port '" + std::string(port) + "'");
    out_[std::string(port)].push_back(std::move(p));
  }
  const device::Stream& stream() override {
    if (!stream_.valid()) stream_ = device::Stream::create();
    return stream_;
  }
  void add_work(const Work& w) override {
    work_.visibilities += w.visibilities;
    work_.updates += w.updates;
    work_.bytes_h2d += w.bytes_h2d;
    work_.bytes_d2h += w.bytes_d2h;
  }
  void add_work_on_device(Array<double> counters) override { device_work_.push_back(std::move(counters)); }
  std::filesystem::path output_file(const std::filesystem::path& f) override {
    if (f.has_parent_path()) std::filesystem::create_directories(f.parent_path());
    auto tmp = f.parent_path() / ("." + f.filename().string() + ".harness-" + std::to_string(getpid()) + ".tmp");
    files_.emplace_back(tmp, f);
    return tmp;
  }
  bool cancelled() const override { return false; }

  const StageSpec& spec_;
  std::string id_, backend_;
  std::int64_t item_ = 0;
  std::map<std::string, std::shared_ptr<const Payload>> once_, current_;
  std::map<std::string, std::vector<std::shared_ptr<const Payload>>> out_;
  device::Stream stream_;
  Work work_;
  std::vector<Array<double>> device_work_;
  std::vector<std::pair<std::filesystem::path, std::filesystem::path>> files_;
};

StageHarness::StageHarness(const StageSpec& spec, std::string backend, std::map<std::string, ParamValue> params)
    : spec_(spec), backend_(std::move(backend)) {
  const BackendSpec* b = spec.backend(backend_);
  if (!b) throw std::invalid_argument(spec.type + " has no backend " + backend_);
  Params p;
  for (auto& ps : spec.params) {
    auto it = params.find(ps.name);
    if (it != params.end()) {
      ParamValue v = it->second;
      if (ps.type == ParamType::number && std::holds_alternative<std::int64_t>(v)) v = double(std::get<std::int64_t>(v));
      p.set(ps.name, v);
      params.erase(it);
    } else if (ps.def) {
      p.set(ps.name, *ps.def);
    }
  }
  if (!params.empty()) throw std::invalid_argument(spec.type + " has no parameter '" + params.begin()->first + "'");
  stage_ = b->make();
  ctx_ = std::make_unique<Ctx>(spec_, "harness", backend_);
  stage_->configure(p);
  PrepareContext pc{"harness", backend_, false, {}};
  stage_->prepare(pc);
}

StageHarness::~StageHarness() {
  if (ctx_)
    for (auto& [tmp, f] : ctx_->files_) {
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);  // a file, or a directory (a Measurement Set)
    }
}

void StageHarness::set_input(const std::string& port, std::shared_ptr<const Payload> p) { ctx_->once_[port] = std::move(p); }

void StageHarness::process(std::map<std::string, std::shared_ptr<const Payload>> stream_inputs) {
  ctx_->current_ = std::move(stream_inputs);
  std::map<std::string, std::size_t> emitted;
  for (auto& [port, v] : ctx_->out_) emitted[port] = v.size();
  const bool on_device = device_inputs_wait();
  stage_->process(*ctx_);
  if (on_device) stamp_device(emitted);
  ctx_->current_.clear();
  ctx_->item_++;
}

// Device inputs, as the executor orders them: the stage's stream waits for their last writers, so
// a test need not synchronise after an upload. True when there is any (and so a device).
bool StageHarness::device_inputs_wait() {
  bool any = false;
  for (auto* m : {&ctx_->once_, &ctx_->current_})
    for (auto& [_, p] : *m)
      if (has_device_array(*p)) {  // the stream (and a device) only then
        wait_for_device_input(*p, ctx_->stream());
        any = true;
      }
  return any;
}

// After a call with device inputs, as the executor does (runtime/payload.hpp): the stream inputs,
// which the caller may drop at once, are not released (and their memory reused) before the stage's
// work on them is done, and this call's outputs carry its event.
void StageHarness::stamp_device(const std::map<std::string, std::size_t>& emitted_before) {
  std::vector<const Payload*> in, out;
  for (auto& [_, p] : ctx_->current_) in.push_back(p.get());
  for (auto& [port, v] : ctx_->out_) {
    const auto it = emitted_before.find(port);
    for (std::size_t i = it == emitted_before.end() ? 0 : it->second; i < v.size(); ++i) out.push_back(v[i].get());
  }
  stamp_device_use(in, out, ctx_->stream().record());
}

void StageHarness::start() {
  ctx_->item_ = -1;
  stage_->start(*ctx_);
  ctx_->item_ = 0;
}

void StageHarness::run_source() {
  start();
  for (std::int64_t i = 0, n = stage_->stream_length(); i < n; ++i) process();
}

void StageHarness::finish() {
  ctx_->item_ = -1;
  stage_->finish(*ctx_);
}

std::vector<std::shared_ptr<const Payload>> StageHarness::outputs(const std::string& port) {
  if (ctx_->stream_.valid()) ctx_->stream_.synchronize();
  return ctx_->out_[port];
}

Work StageHarness::work() const {
  Work w = ctx_->work_;
  if (ctx_->device_work_.empty()) return w;
  const Work d = read_device_work(ctx_->device_work_, ctx_->stream_);
  w.visibilities += d.visibilities;
  w.updates += d.updates;
  return w;
}

void StageHarness::commit_outputs() {
  for (auto& [tmp, f] : ctx_->files_) std::filesystem::rename(tmp, f);
  ctx_->files_.clear();
}

}  // namespace uvflow
