// What a stage is: a static spec (ports, parameters, backends) that drives validation,
// `uvflow describe`, the generated docs and the tests, and a small lifecycle
// configure -> prepare -> process (one item) -> finish (end of stream).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/payload.hpp"
#include "runtime/payloads/geometry.hpp"

namespace uvflow {

// ---------------------------------------------------------------- parameters

enum class ParamType { integer, number, boolean, string, choice, path, numbers, records, paths };
const char* to_string(ParamType t);

using Record = std::map<std::string, double>;  // one element of a `records` parameter
using ParamValue =
    std::variant<std::int64_t, double, bool, std::string, std::vector<double>, std::vector<Record>,
                 std::vector<std::string>>;
std::string to_string(const ParamValue& v);

// What a path parameter names, so that `uvflow check` and the start of `uvflow run` can check it
// before anything computes: an input must exist, an output's folder must be writable, no two
// outputs may be the same file, and a per-item output needs {index} for a stream of several items.
enum class PathRole {
  none,            // neither (a cache folder, a file searched for in several places)
  input,           // read: a file or folder that must exist (glob patterns are left to the stage)
  output,          // written once per run: a file or folder
  output_per_item  // written once per item; "{index}" in it becomes the item index
};

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::number;
  std::optional<ParamValue> def;      // none: the parameter is required (unless `optional`)
  bool optional = false;              // may be left unset, with no default
  std::string unit;                   // "arcsec", "Hz", ... (empty: dimensionless)
  std::optional<double> min, max;     // inclusive range for integer, number and numbers
  std::vector<std::string> choices;   // for `choice`
  std::vector<ParamSpec> fields;      // for `records`: each element's (numeric) fields
  std::string doc;
  PathRole role = PathRole::none;     // for `path` and `paths`: read or written (checked before running)
};

// Validated parameter values of one stage, with every default filled in.
class ParamValues {
 public:
  void set(std::string name, ParamValue v) { values_[std::move(name)] = std::move(v); }
  bool has(std::string_view name) const { return values_.count(std::string(name)) != 0; }
  const ParamValue& value(std::string_view name) const;
  std::int64_t integer(std::string_view name) const { return get<std::int64_t>(name); }
  double number(std::string_view name) const;  // integers convert
  bool boolean(std::string_view name) const { return get<bool>(name); }
  const std::string& string(std::string_view name) const { return get<std::string>(name); }
  const std::vector<double>& numbers(std::string_view name) const {
    return get<std::vector<double>>(name);
  }
  const std::vector<Record>& records(std::string_view name) const {
    return get<std::vector<Record>>(name);
  }
  const std::vector<std::string>& paths(std::string_view name) const {
    return get<std::vector<std::string>>(name);
  }
  const std::map<std::string, ParamValue, std::less<>>& values() const { return values_; }

 private:
  template <class T>
  const T& get(std::string_view name) const {
    auto it = values_.find(name);
    if (it == values_.end()) throw std::logic_error("parameter '" + std::string(name) + "' not set");
    if (auto p = std::get_if<T>(&it->second)) return *p;
    throw std::logic_error("parameter '" + std::string(name) + "' read with the wrong type");
  }
  std::map<std::string, ParamValue, std::less<>> values_;
};

// Thrown by Stage::configure to point the user at one parameter in the pipeline file.
class ParamError : public std::runtime_error {
 public:
  ParamError(std::string param, const std::string& what)
      : std::runtime_error(what), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// ---------------------------------------------------------------- ports

// Where a port's data lives. `backend`: on the host for the cpu backend, on the device for cuda.
enum class Residency { host, device, any, backend };
const char* to_string(Residency r);
// `stream`: a sequence of items (blocks, frames); `once`: exactly one item per run.
enum class Arity { stream, once };
const char* to_string(Arity a);

inline constexpr const char* kAnyPayload = "*";  // transfer stages carry any payload type

struct PortSpec {
  std::string name;
  std::string type;  // payload type name, e.g. "VisBlock"
  Arity arity = Arity::stream;
  Residency residency = Residency::backend;
  std::string doc;
  bool optional = false;  // inputs only: may be left unconnected
};

// A typed port: the payload type is part of the constant, so ctx.in(port) returns that type and
// ctx.emit(port, p) accepts only it; a misspelled port is a compile error, not a run-time one.
template <class T>
struct In {
  std::string_view name;
  Arity arity = Arity::stream;
  Residency residency = Residency::backend;
  std::string_view doc;
  bool optional = false;  // may be left unconnected
  operator PortSpec() const {
    return {std::string(name), std::string(T::type_name), arity, residency, std::string(doc), optional};
  }
};

template <class T>
struct Out {
  std::string_view name;
  Arity arity = Arity::stream;
  Residency residency = Residency::backend;
  std::string_view doc;
  operator PortSpec() const {
    return {std::string(name), std::string(T::type_name), arity, residency, std::string(doc), false};
  }
};

// ---------------------------------------------------------------- shapes

// What is known about a port's items before the first exists, so that prepare() can make plans
// and buffers: the planner asks each stage's `describe` (StageSpec) in topological order, from its
// parameters and its inputs' shapes. Every field may be unknown, and a stage must still work then
// (a producer that describes nothing, sizes that depend on the data).
struct Observation;

// What the estimate pass (StageSpec::estimate) learns of a w-projection kernel stack: enough for a
// gridder to predict its work without the kernels.
struct KernelFacts {
  int planes = 0, oversample = 0, conv_size = 0, max_support = 0;
  double mean_footprint = 0;  // expected (2s+1)^2 kernel points per visibility, over the data's |w|
  double image_error = 0;     // predicted peak error of an image gridded with it (its error models)
  int chebyshev_terms = 0;    // the Chebyshev fit's terms per plane (0: none)
};

struct PortShape {
  std::int64_t items = -1;           // items on the port: 1 for once ports, -1 unknown
  int nx = 0, ny = 0;                // image pixels, or grid cells, along x and y: 0 unknown
  std::optional<GridGeometry> grid;  // grids and kernel stacks: the image and grid geometry
  // Known in the estimate pass only (never from describe): the observation the items come from,
  // with its sizes and uvw statistics, and the kernel stack's facts.
  std::shared_ptr<const Observation> obs;
  std::optional<KernelFacts> kernel;
  bool sized() const { return nx > 0 && ny > 0; }
};
using PortShapes = std::map<std::string, PortShape, std::less<>>;  // by port name

// ---------------------------------------------------------------- estimates

struct EstimateContext {
  std::string backend;  // "cpu" or "cuda"
  int threads = 1;      // the run's TBB worker threads
};

// A stage's predicted cost on the data at hand: seconds on its backend (its time in the run
// report), the relative error it predicts for its result (0: exact or not its concern), how it
// got them, and what its outputs carry beyond their describe()d shape (PortShape::obs, kernel).
struct Estimate {
  double seconds = 0;
  double error = 0;
  std::string basis;
  PortShapes outputs;
};

// Seconds to do `work` at `cpu_per_core` per second on each of the context's threads, or at
// `cuda` per second on the device: the two measured rates a stage's estimate is built from.
inline double seconds_at(const EstimateContext& c, double work, double cpu_per_core, double cuda) {
  return c.backend == "cuda" ? work / cuda : work / (cpu_per_core * std::max(1, c.threads));
}

// The visibilities the items of an input carry, from its observation (PortShape::obs); throws
// InputError naming the port when no estimate upstream told them.
double estimated_visibilities(const PortShapes& inputs, std::string_view port);

// The estimate of a stage whose time is proportional to the visibilities on `port`, at the rates
// of seconds_at() (visibilities per second).
Estimate per_visibility_estimate(const PortShapes& inputs, std::string_view port, const EstimateContext& c,
                                 double cpu_per_core, double cuda);

// ---------------------------------------------------------------- stages

class Context;

struct PrepareContext {
  std::string id;        // stage id in the pipeline
  std::string backend;   // "cpu" or "cuda"
  bool dry_run = false;  // `uvflow check`: validate against the environment, allocate nothing
  // Output ports whose consumers are on the device: a host producer should allocate them in
  // pinned memory so the upload is a true asynchronous copy.
  std::vector<std::string> pinned_outputs;
  PortShapes inputs, outputs;   // the shapes of the connected inputs, and of the stage's own outputs
  device::Stream stream;    // the stage's stream (cuda backends, not in a dry run)
  bool pinned(std::string_view port) const {
    for (auto& p : pinned_outputs) if (p == port) return true;
    return false;
  }
  // A port's shape; all unknown where nothing described it.
  const PortShape& input(std::string_view port) const { return find(inputs, port); }
  const PortShape& output(std::string_view port) const { return find(outputs, port); }
  template <class T>
  const PortShape& input(const In<T>& port) const { return input(port.name); }
  template <class T>
  const PortShape& output(const Out<T>& port) const { return output(port.name); }

 private:
  static const PortShape& find(const PortShapes& s, std::string_view port) {
    static const PortShape unknown;
    auto it = s.find(port);
    return it == s.end() ? unknown : it->second;
  }
};

class Stage {
 public:
  virtual ~Stage() = default;
  // Check the parameters together (single values were checked against the spec already).
  // Throw ParamError to point at a parameter. Allocate nothing.
  virtual void configure(const ParamValues&) {}
  // Look at the environment: open input files, check the device, build plans.
  virtual void prepare(PrepareContext&) {}
  // Sources only (stages without inputs): how many items process() will be called for.
  virtual std::int64_t stream_length() const { return 0; }
  // Sources only: called once before the first item, to emit the `once` outputs known up front
  // (e.g. the observation), so the stages that need only those can run before the stream starts.
  virtual void start(Context&) {}
  // One item: read inputs with ctx.in<T>(port), write outputs with ctx.emit(port, payload).
  virtual void process(Context& ctx) = 0;
  // After the last item of every stream input: emit what was accumulated (e.g. the grid).
  virtual void finish(Context&) {}
};

enum class Concurrency {
  serial,    // one item at a time, in stream order (accumulators, sources)
  parallel   // items may be processed concurrently
};

struct BackendSpec {
  std::string name;  // "cpu" or "cuda"
  std::function<std::unique_ptr<Stage>()> make;
};

// A stage's cuda backend, `make` being its factory in a .cu file. A build without CUDA declares the
// backend all the same, so that pipelines naming it still validate and describe the same; there
// its stage (unavailable_cuda_stage) does nothing in a dry run and refuses to run, and `uvflow run`
// refuses such pipelines before anything runs ("uvflow was built without CUDA").
std::unique_ptr<Stage> unavailable_cuda_stage();
#ifdef UVFLOW_WITH_CUDA
#define UVFLOW_CUDA_BACKEND(make) ::uvflow::BackendSpec{"cuda", make}
#else
#define UVFLOW_CUDA_BACKEND(make) ::uvflow::BackendSpec{"cuda", ::uvflow::unavailable_cuda_stage}
#endif

struct StageSpec {
  std::string type;     // "grid.tiled"
  std::string summary;  // one line
  std::string doc;      // a paragraph: what it does, what it is tested against
  std::vector<PortSpec> inputs, outputs;
  std::vector<ParamSpec> params;
  std::vector<BackendSpec> backends;  // the first is the default
  Concurrency concurrency = Concurrency::serial;
  // In a run of several MPI ranks (runtime/dist.hpp), this stage's outputs are what all ranks made
  // together and exist on rank 0 only (a reduction to the root): the stages it feeds, directly or
  // not, run on rank 0 alone, and the other ranks leave them out of their plan.
  bool output_on_root = false;
  // Optional: the shapes of the outputs from the checked parameters and the shapes of the inputs
  // (see PortShape); a port left out is unknown. It runs while planning, `uvflow check` and `plan`
  // included, so it is cheap, allocates nothing, and leaves unknown what it cannot tell rather
  // than fail on the environment (prepare() reports that).
  std::function<PortShapes(const ParamValues&, const PortShapes& inputs)> describe;
  // Optional: what running the stage would cost, for `choose: auto` (docs/pipelines.md, "Choices").
  // Only the automatic choice calls it, so unlike describe it may look at the data's metadata (a
  // source computes its observation's statistics). Throws InputError where the stage could not run.
  std::function<Estimate(const ParamValues&, const PortShapes& inputs, const EstimateContext&)> estimate;

  const PortSpec* input(std::string_view n) const;
  const PortSpec* output(std::string_view n) const;
  const ParamSpec* param(std::string_view n) const;
  const BackendSpec* backend(std::string_view n) const;
};

// The shapes of a stage's outputs: its describe (if any), once ports having one item. The planner
// and the one-stage harness both use it.
PortShapes describe_outputs(const StageSpec& spec, const ParamValues& params, const PortShapes& inputs);

// Work counters a stage reports for the run table.
struct Work {
  double visibilities = 0;  // visibilities processed
  double updates = 0;       // kernel-point updates (complex multiply-adds)
  double bytes_h2d = 0;     // bytes this stage moved host -> device (transfer stages)
  double bytes_d2h = 0;     // bytes this stage moved device -> host
};

// The sum of device work counters [visibilities, updates] (Context::add_work_on_device), read
// back on `s` after the work queued on it: the one wait, after a stage's last device work.
Work read_device_work(const std::vector<Array<double>>& counters, const device::Stream& s);

// What a stage sees while it runs.
class Context {
 public:
  virtual ~Context() = default;
  virtual const std::string& stage_id() const = 0;
  virtual const std::string& backend() const = 0;
  // Index of the item being processed; -1 in finish().
  virtual std::int64_t item() const = 0;
  virtual bool connected(std::string_view port) const = 0;
  virtual std::shared_ptr<const Payload> input(std::string_view port) const = 0;
  virtual void emit(std::string_view port, std::shared_ptr<Payload> p) = 0;
  // The stage's own CUDA stream (cuda backends only).
  virtual const device::Stream& stream() = 0;
  virtual void add_work(const Work& w) = 0;
  // Cuda backends whose work is only known on the device (updates depend on supports read there):
  // a device array [visibilities, updates] the stage keeps adding to; the framework reads it once,
  // after the run's last device work, and adds it to the stage's Work. No sync in the hot path.
  virtual void add_work_on_device(Array<double> counters) = 0;
  // A temporary path for an output file that becomes `final_path` only if the whole run
  // succeeds; on failure or Ctrl-C it is removed, so no half-written file is left.
  virtual std::filesystem::path output_file(const std::filesystem::path& final_path) = 0;
  virtual bool cancelled() const = 0;

  // Typed ports (In<T>, Out<T> constants of a stage's declaration).
  template <class T>
  std::shared_ptr<const T> in(const In<T>& port) const { return in<T>(port.name); }
  template <class T>
  bool connected(const In<T>& port) const { return connected(port.name); }
  template <class T, class U>
    requires std::derived_from<U, T>
  void emit(const Out<T>& port, std::shared_ptr<U> p) { emit(port.name, std::move(p)); }

  template <class T>
  std::shared_ptr<const T> in(std::string_view port) const {
    auto p = input(port);
    auto t = std::dynamic_pointer_cast<const T>(p);
    if (!t)
      throw std::logic_error("input '" + std::string(port) + "' is " +
                             (p ? std::string(p->type()) : std::string("missing")) + ", expected " +
                             std::string(T::type_name));
    return t;
  }
};

}  // namespace uvflow
