#include "runtime/stage.hpp"

#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "runtime/error.hpp"
#include "runtime/payloads/vis.hpp"

namespace uvflow {

const char* to_string(ParamType t) {
  switch (t) {
    case ParamType::integer: return "integer";
    case ParamType::number: return "number";
    case ParamType::boolean: return "boolean";
    case ParamType::string: return "string";
    case ParamType::choice: return "choice";
    case ParamType::path: return "path";
    case ParamType::numbers: return "list of numbers";
    case ParamType::records: return "list of records";
    case ParamType::paths: return "list of paths";
  }
  return "?";
}

const char* to_string(Residency r) {
  switch (r) {
    case Residency::host: return "host";
    case Residency::device: return "device";
    case Residency::any: return "any";
    case Residency::backend: return "backend";
  }
  return "?";
}

const char* to_string(Arity a) { return a == Arity::stream ? "stream" : "once"; }

static std::string number_str(double d) {
  std::ostringstream s;
  s << d;
  return s.str();
}

std::string to_string(const ParamValue& v) {
  struct V {
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return number_str(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<double>& l) const {
      std::string s = "[";
      for (size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + number_str(l[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<Record>& l) const {
      std::string s = "[";
      for (size_t i = 0; i < l.size(); ++i) {
        s += i ? ", {" : "{";
        bool first = true;
        for (auto& [k, x] : l[i]) {
          s += (first ? "" : ", ") + k + ": " + number_str(x);
          first = false;
        }
        s += "}";
      }
      return s + "]";
    }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string s = "[";
      for (size_t i = 0; i < l.size(); ++i) s += (i ? ", " : "") + l[i];
      return s + "]";
    }
  };
  return std::visit(V{}, v);
}

const ParamValue& ParamValues::value(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::logic_error("parameter '" + std::string(name) + "' not set");
  return it->second;
}

double ParamValues::number(std::string_view name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (auto i = std::get_if<std::int64_t>(&it->second)) return double(*i);
  return get<double>(name);
}

template <class T>
static const T* find_named(const std::vector<T>& v, std::string_view n) {
  for (auto& x : v)
    if (x.name == n) return &x;
  return nullptr;
}

const PortSpec* StageSpec::input(std::string_view n) const { return find_named(inputs, n); }
const PortSpec* StageSpec::output(std::string_view n) const { return find_named(outputs, n); }
const ParamSpec* StageSpec::param(std::string_view n) const { return find_named(params, n); }
const BackendSpec* StageSpec::backend(std::string_view n) const { return find_named(backends, n); }

namespace {
// Stands for a cuda backend in a build without CUDA: validation (a dry run) passes through it; a
// run never reaches it, the executor having refused the pipeline, so running it is a logic error.
class UnavailableCudaStage final : public Stage {
 public:
  void prepare(PrepareContext& pc) override {
    if (!pc.dry_run) refuse();
  }
  void process(Context&) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { throw std::logic_error("uvflow was built without CUDA"); }
};
}  // namespace

std::unique_ptr<Stage> unavailable_cuda_stage() { return std::make_unique<UnavailableCudaStage>(); }

double estimated_visibilities(const PortShapes& inputs, std::string_view port) {
  auto it = inputs.find(port);
  if (it == inputs.end() || !it->second.obs || it->second.obs->total_visibilities < 0)
    throw InputError("input '" + std::string(port) + "': the number of visibilities is not known before the run "
                     "(its source does not estimate its observation)");
  return double(it->second.obs->total_visibilities);
}

Estimate per_visibility_estimate(const PortShapes& inputs, std::string_view port, const EstimateContext& c,
                                 double cpu_per_core, double cuda) {
  const double n = estimated_visibilities(inputs, port);
  char basis[64];
  std::snprintf(basis, sizeof basis, "%.3g visibilities", n);
  return {.seconds = seconds_at(c, n, cpu_per_core, cuda), .basis = basis};
}

PortShapes describe_outputs(const StageSpec& spec, const ParamValues& params, const PortShapes& inputs) {
  PortShapes described = spec.describe ? spec.describe(params, inputs) : PortShapes{};
  PortShapes out;
  for (const auto& port : spec.outputs) {
    auto it = described.find(port.name);
    PortShape& s = out[port.name] = it == described.end() ? PortShape{} : it->second;
    if (port.arity == Arity::once) s.items = 1;
  }
  return out;
}

Work read_device_work(const std::vector<Array<double>>& counters, const device::Stream& s) {
  Work w;
  for (Array<double> c : counters) {
    c.transfer(Location::host, s, false);
    s.synchronize();
    w.visibilities += c[0];
    w.updates += c[1];
  }
  return w;
}

}  // namespace uvflow
