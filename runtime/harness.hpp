// Runs one stage outside any pipeline, synchronously: set its parameters and once-inputs, feed
// stream items, collect what it emits. The unit tests of every stage use it; it goes through the
// same configure -> prepare -> process -> finish lifecycle as a pipeline run.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/output_files.hpp"
#include "runtime/stage_context.hpp"
#include "runtime/stage_decl.hpp"

namespace uvflow {

class StageHarness {
 public:
  // Parameters not given take their spec defaults. Unknown names, and values out of their range
  // or choices (as the pipeline loader checks them), throw std::invalid_argument.
  // `inputs`: the shapes prepare() is told its inputs have, as a planner would have described them
  // (none: all unknown); its outputs' shapes come from the spec's describe.
  StageHarness(const StageSpec& spec, std::string backend, std::map<std::string, ParamValue> params = {},
               PortShapes inputs = {});
  // The typed form: StageHarness h(grid_tiled::spec(), "cpu", grid_tiled::decl, {.central_box = 2}).
  template <class P>
  StageHarness(const StageSpec& spec, std::string backend, const StageDecl<P>& decl, const P& params,
               PortShapes inputs = {})
      : StageHarness(spec, std::move(backend), decl.write(params), std::move(inputs)) {}
  ~StageHarness();

  void set_input(const std::string& port, std::shared_ptr<const Payload> p);  // once inputs
  // One process() call with these stream inputs (none for sources and once-only stages).
  void process(std::map<std::string, std::shared_ptr<const Payload>> stream_inputs = {});
  // Sources: start() (their up-front once outputs), then process() once per item of stream_length().
  void run_source();
  void start();
  void finish();
  // Everything emitted on `port` so far (device work synchronised first).
  std::vector<std::shared_ptr<const Payload>> outputs(const std::string& port);
  template <class T>
  std::shared_ptr<const T> output(const std::string& port, size_t i = 0) {
    auto v = outputs(port);
    if (i >= v.size()) throw std::runtime_error("stage emitted no item " + std::to_string(i) + " on '" + port + "'");
    auto t = std::dynamic_pointer_cast<const T>(v[i]);
    if (!t) throw std::runtime_error("output '" + port + "' is " + std::string(v[i]->type()));
    return t;
  }
  Work work() const;
  Stage& stage() { return *stage_; }
  // Output files are written to temporaries and renamed into place only here (as a successful run
  // would); the destructor removes any not committed.
  void commit_outputs();

 private:
  // One call of the stage with these stream inputs (plus the once inputs); keeps what it emits.
  void call(void (Stage::*fn)(Context&), std::int64_t item, PayloadMap stream_inputs);
  const StageSpec spec_;  // a copy: callers pass temporaries such as write_fits_spec()
  std::string backend_;
  std::unique_ptr<Stage> stage_;
  OutputFiles files_{"harness"};
  StageState state_;  // refers to spec_ and files_
  PayloadMap once_;
  std::map<std::string, std::vector<std::shared_ptr<const Payload>>> out_;
  std::int64_t next_item_ = 0;
};

}  // namespace uvflow
