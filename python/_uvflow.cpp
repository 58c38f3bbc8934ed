// The compiled half of the `uvflow` Python module (python/uvflow/__init__.py is the other): the
// same library functions as the `uvflow` command (load_plan, preflight, run_plan, the stage
// descriptions, cli/errors for the messages), the array feed of io.vis_arrays / io.image_arrays /
// io.collect (stages/shared/array_feed), and stages written in Python. The GIL is released while a
// pipeline runs and taken only by Python stages and by the owners of arrays handed in.
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstring>

#include "cli/describe.hpp"
#include "cli/errors.hpp"
#include "graph/executor.hpp"
#include "graph/interrupt.hpp"
#include "graph/pipeline.hpp"
#include "graph/preflight.hpp"
#include "runtime/device.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/payloads/vis.hpp"
#include "runtime/registry.hpp"
#include "stages/builtin.hpp"
#include "stages/shared/array_feed.hpp"
#include "stages/shared/sky_header.hpp"

#ifdef UVFLOW_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace py = pybind11;
using namespace uvflow;

namespace {

// ---------------------------------------------------------------- the registry

Registry& registry() {
  static Registry r = [] {
    Registry reg;
    register_builtin_stages(reg);
    return reg;
  }();
  return r;
}

// ---------------------------------------------------------------- errors

// uvflow.Error and its subclasses, one per kind of ErrorReport, made in PYBIND11_MODULE.
std::map<std::string, py::object>& error_classes() {
  static auto* m = new std::map<std::string, py::object>();  // never destroyed: outlives the interpreter's teardown
  return *m;
}

// Raises the Python exception of `r`: its class by kind, its message the command's stderr text.
void set_python_error(const ErrorReport& r) {
  auto& classes = error_classes();
  auto it = classes.find(r.kind);
  py::object cls = it != classes.end() ? it->second : classes.at("Error");
  std::string msg = r.text;
  if (!msg.empty() && msg.back() == '\n') msg.pop_back();
  py::object e = cls(msg);
  e.attr("exit_code") = r.exit_code;
  PyErr_SetObject(cls.ptr(), e.ptr());
}

// ---------------------------------------------------------------- Python objects kept by C++

// A Python object held from C++ (the owner of an array handed in, a Python stage's instance): it
// may be dropped on a TBB worker, so the GIL is taken for that.
std::shared_ptr<void> py_owner(py::object o) {
  return std::shared_ptr<void>(new py::object(std::move(o)), [](void* p) {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing left to release
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
}

// A NumPy view of host memory that keeps `keep` (the payload or storage) alive; read-only, since
// payloads are immutable once emitted.
template <class T>
py::array host_view(const T* p, std::vector<py::ssize_t> shape, std::shared_ptr<const void> keep) {
  py::capsule base(new std::shared_ptr<const void>(std::move(keep)),
                   [](void* k) { delete static_cast<std::shared_ptr<const void>*>(k); });
  py::array a(py::dtype::of<T>(), std::move(shape), {}, p, base);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// ---------------------------------------------------------------- device arrays

void require_cuda(const char* what) {
  if (!device::compiled())
    throw py::value_error(std::string(what) + ": uvflow was built without CUDA (docs/gpu.md)");
  if (device::count() == 0) throw py::value_error(std::string(what) + ": no CUDA device here");
}

// The CUDA array interface (version 3) of float32 C-contiguous memory.
py::dict cuda_interface(const void* p, const std::vector<py::ssize_t>& shape) {
  py::dict d;
  d["shape"] = py::tuple(py::cast(shape));
  d["typestr"] = "<f4";
  d["data"] = py::make_tuple(reinterpret_cast<std::uintptr_t>(p), false);
  d["strides"] = py::none();
  d["stream"] = py::none();  // the memory is ready: uvflow waited for its writer
  d["version"] = 3;
  return d;
}

struct CudaArray {
  void* ptr = nullptr;
  std::vector<py::ssize_t> shape;
  std::size_t count = 1;
};

// An object with __cuda_array_interface__ (CuPy, Numba, uvflow.DeviceArray), float32 and
// C-contiguous; its producer's stream is waited for.
CudaArray read_cuda_interface(const py::object& obj) {
  py::dict d = obj.attr("__cuda_array_interface__");
  CudaArray a;
  for (auto s : d["shape"]) a.shape.push_back(s.cast<py::ssize_t>());
  for (auto s : a.shape) a.count *= std::size_t(s);
  const std::string typestr = d["typestr"].cast<std::string>();
  if (typestr != "<f4")
    throw py::value_error("a device array must be float32 ('<f4'), not '" + typestr + "' (convert it on the device first)");
  if (d.contains("strides") && !d["strides"].is_none()) {
    py::ssize_t expect = 4;
    auto strides = d["strides"].cast<std::vector<py::ssize_t>>();
    for (std::size_t i = a.shape.size(); i-- > 0;) {
      if (a.shape[i] > 1 && strides[i] != expect) throw py::value_error("a device array must be C-contiguous");
      expect *= a.shape[i];
    }
  }
  a.ptr = reinterpret_cast<void*>(py::tuple(d["data"])[0].cast<std::uintptr_t>());
#ifdef UVFLOW_WITH_CUDA
  if (d.contains("stream") && !d["stream"].is_none()) {
    const auto s = d["stream"].cast<std::uintptr_t>();
    cudaStreamSynchronize(s == 1 ? cudaStreamLegacy : s == 2 ? cudaStreamPerThread : reinterpret_cast<cudaStream_t>(s));
  }
#endif
  return a;
}

// Device memory uvflow allocates itself: GPU tests and programs without CuPy hand arrays in and
// read results back through it.
struct DeviceArray {
  std::shared_ptr<Storage> storage;
  std::vector<py::ssize_t> shape;

  static DeviceArray from_host(const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
    require_cuda("DeviceArray");
    auto s = device::Stream::create();
    DeviceArray d{Storage::device(std::size_t(a.nbytes()), s), {a.shape(), a.shape() + a.ndim()}};
    device::copy(d.storage->data(), a.data(), std::size_t(a.nbytes()), device::Copy::host_to_device, s);
    s.synchronize();
    return d;
  }
};

// A host copy of any float32 device array with __cuda_array_interface__.
py::array_t<float> device_to_host(const py::object& obj) {
  require_cuda("to_host");
  const CudaArray a = read_cuda_interface(obj);
  py::array_t<float> out(a.shape);
  auto s = device::Stream::create();
  device::copy(out.mutable_data(), a.ptr, a.count * sizeof(float), device::Copy::device_to_host, s);
  s.synchronize();
  return out;
}

// ---------------------------------------------------------------- payloads to Python

struct ImageHandle {
  std::shared_ptr<const Image> img;

  std::vector<py::ssize_t> shape() const { return {img->ny, img->nx}; }
  std::string location() const { return to_string(img->pixels.location()); }
  py::object host_array() const {
    if (img->pixels.location() != Location::host)
      throw py::value_error("image " + std::to_string(img->index) +
                            " is in device memory: use its __cuda_array_interface__ (cupy.asarray(image)) or "
                            "uvflow.to_host(image)");
    return host_view(img->pixels.data(), shape(), img);
  }
  py::dict cuda_array_interface() const {
    if (img->pixels.location() != Location::device)
      throw py::attribute_error("image " + std::to_string(img->index) + " is in host memory (use numpy.asarray)");
    img->pixels.storage()->last_writer().synchronize();
    return cuda_interface(img->pixels.data(), shape());
  }
  py::list cards() const {
    py::list l;
    for (const auto& c : fits::sky_header(*img))
      std::visit([&](const auto& v) { l.append(py::make_tuple(c.key, v, c.comment)); }, c.value);
    return l;
  }
};

// A VisBlock as a dict of NumPy arrays (views, host blocks only).
py::dict vis_dict(const std::shared_ptr<const VisBlock>& b) {
  const std::size_t n = b->size();
  if (b->vis.location() != Location::host)
    throw py::value_error("visibility block " + std::to_string(b->index) + " is in device memory; collect it after a "
                          "transfer.to_host");
  py::dict d;
  const py::ssize_t sn = py::ssize_t(n);
  d["uu"] = host_view(b->uu.data(), {sn}, b);
  d["vv"] = host_view(b->vv.data(), {sn}, b);
  d["ww"] = host_view(b->ww.data(), {sn}, b);
  d["vis"] = host_view(b->vis.data(), {sn}, b);
  if (b->weight.size() == n) d["weight"] = host_view(b->weight.data(), {sn}, b);
  if (b->channel.size() == n) d["channel"] = host_view(b->channel.data(), {sn}, b);
  if (b->antenna1.size() == n) d["antenna1"] = host_view(b->antenna1.data(), {sn}, b);
  if (b->antenna2.size() == n) d["antenna2"] = host_view(b->antenna2.data(), {sn}, b);
  if (b->time.size() == n) d["time"] = host_view(b->time.data(), {sn}, b);
  d["index"] = b->index;
  return d;
}

py::object to_python(const std::shared_ptr<const Payload>& p) {
  if (auto img = std::dynamic_pointer_cast<const Image>(p)) return py::cast(ImageHandle{img});
  if (auto b = std::dynamic_pointer_cast<const VisBlock>(p)) return vis_dict(b);
  throw py::type_error("uvflow cannot hand a " + std::string(p->type()) + " payload to Python yet (Image and VisBlock)");
}

// ---------------------------------------------------------------- arrays in

// `a` as T, C-contiguous: the array itself where it already is (no copy), else a converted copy.
template <class T>
py::array_t<T, py::array::c_style> as_contiguous(const py::object& a, const char* what) {
  auto r = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!r) throw py::type_error(std::string(what) + ": not convertible to an array of " + py::str(py::dtype::of<T>()).cast<std::string>());
  return r;
}

template <class T>
Array<T> host_array(const py::array_t<T, py::array::c_style>& a) {
  return Array<T>::external(const_cast<T*>(a.data()), std::size_t(a.size()), Location::host, py_owner(a));
}

void feed_vis(const std::string& name, const py::object& uvw_in, const py::object& vis_in, const py::object& freq_in,
              const py::object& weight_in, const py::object& flag_in, double ra_rad, double dec_rad,
              const std::string& telescope) {
  auto uvw = as_contiguous<double>(uvw_in, "uvw");
  auto vis = as_contiguous<std::complex<float>>(vis_in, "vis");
  auto freq = as_contiguous<double>(freq_in, "freq");
  if (uvw.ndim() != 2 || uvw.shape(1) != 3) throw py::value_error("uvw must be rows x 3 (metres)");
  const py::ssize_t rows = uvw.shape(0), channels = freq.size();
  if (freq.ndim() != 1 || channels == 0) throw py::value_error("freq must be a 1-D array of the channels' frequencies (Hz)");
  auto same_shape = [&](const py::array& a, const char* what) {
    const bool ok = (a.ndim() == 2 && a.shape(0) == rows && a.shape(1) == channels) ||
                    (a.ndim() == 1 && channels == 1 && a.shape(0) == rows);
    if (!ok)
      throw py::value_error(std::string(what) + " must be rows x channels (" + std::to_string(rows) + " x " +
                            std::to_string(channels) + ")");
  };
  same_shape(vis, "vis");
  array_feed::VisArrays a;
  a.uvw = host_array(uvw);
  a.vis = host_array(vis);
  a.freq_hz.assign(freq.data(), freq.data() + channels);
  a.rows = rows;
  a.ra_rad = ra_rad;
  a.dec_rad = dec_rad;
  a.telescope = telescope;
  if (!weight_in.is_none()) {
    auto w = as_contiguous<float>(weight_in, "weight");
    same_shape(w, "weight");
    a.weight = host_array(w);
  }
  if (!flag_in.is_none()) {
    // A bool array is one byte per element: viewed as uint8, not converted.
    py::object f = flag_in;
    if (py::isinstance<py::array>(f) && py::array(f).dtype().kind() == 'b') f = f.attr("view")("uint8");
    auto f8 = as_contiguous<std::uint8_t>(f, "flag");
    same_shape(f8, "flag");
    a.flag = host_array(f8);
  }
  array_feed::put(name, std::move(a));
}

void feed_images(const std::string& name, const py::object& obj, const py::object& wcs) {
  array_feed::ImageArrays a;
  std::vector<py::ssize_t> shape;
  const bool on_device = py::hasattr(obj, "__cuda_array_interface__") && !py::hasattr(obj, "__array_interface__");
  float* base = nullptr;
  std::shared_ptr<void> owner;
  if (on_device) {
    require_cuda("a device array");
    const CudaArray c = read_cuda_interface(obj);
    shape = c.shape;
    base = static_cast<float*>(c.ptr);
    owner = py_owner(obj);
  } else {
    auto h = as_contiguous<float>(obj, "image");
    shape.assign(h.shape(), h.shape() + h.ndim());
    base = const_cast<float*>(h.data());
    owner = py_owner(h);
  }
  if (shape.size() != 2 && shape.size() != 3)
    throw py::value_error("an image is a 2-D array (ny x nx) and a stream of them a 3-D array (count x ny x nx)");
  const std::size_t count = shape.size() == 3 ? std::size_t(shape[0]) : 1;
  a.ny = int(shape[shape.size() - 2]);
  a.nx = int(shape[shape.size() - 1]);
  const std::size_t n = std::size_t(a.nx) * std::size_t(a.ny);
  for (std::size_t i = 0; i < count; ++i)
    a.frames.push_back(Array<float>::external(base + i * n, n, on_device ? Location::device : Location::host, owner));
  if (!wcs.is_none()) {
    py::dict d = wcs;
    SkyWcs w;
    w.ra_rad = d["ra_rad"].cast<double>();
    w.dec_rad = d["dec_rad"].cast<double>();
    w.cell_rad = d["cell_rad"].cast<double>();
    w.freq_hz = d["freq_hz"].cast<double>();
    w.bandwidth_hz = d["bandwidth_hz"].cast<double>();
    w.bunit = d["bunit"].cast<std::string>();
    w.telescope = d["telescope"].cast<std::string>();
    w.date_obs = d["date_obs"].cast<std::string>();
    a.wcs = w;
  }
  array_feed::put(name, std::move(a));
}

// ---------------------------------------------------------------- pipelines

// A pipeline as Python names it: a file, or YAML text standing for a file of that name.
struct Source {
  std::string file, text;
  bool is_text = false;
  std::vector<std::string> sets;
  Plan load() const {
    return is_text ? load_plan_text(text, file, sets, registry()) : load_plan(file, sets, registry());
  }
};

// Runs `f`, turning uvflow's exceptions into the Python exceptions with the command's messages.
template <class F>
auto mapped(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const py::error_already_set&) {
    throw;
  } catch (const py::builtin_exception&) {
    throw;
  } catch (...) {
    set_python_error(error_report(std::current_exception()));
    throw py::error_already_set();
  }
}

py::dict check(const Source& src) {
  return mapped([&] {
    Plan p = src.load();
    const PreflightResult pf = preflight(p, PreflightFor::check, registry());
    if (!pf.errors.empty()) throw ConfigError(pf.errors);
    py::list warnings;
    for (auto& w : pf.warnings) warnings.append(warning_str(w));
    py::dict d;
    d["stages"] = p.stages.size();
    d["transfers"] = p.notes.size();
    d["warnings"] = warnings;
    return d;
  });
}

std::string plan_text(const Source& src, bool dot) {
  return mapped([&] {
    Plan p = src.load();
    return dot ? plan_to_dot(p) : plan_to_text(p);
  });
}

// Ctrl-C while a pipeline runs cancels it, as in the command (whose handler records the signal
// and the graph polls it): Python's handler could not run before the run returned. Installed by
// the main thread only, for the time of the run; Python's is put back after.
class CtrlCCancels {
 public:
  CtrlCCancels() {
    auto threading = py::module_::import("threading");
    if (!threading.attr("current_thread")().is(threading.attr("main_thread")())) return;
    struct sigaction sa {};
    sa.sa_handler = [](int sig) { request_interrupt(sig); };
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGINT, &sa, &previous_) == 0;
  }
  ~CtrlCCancels() {
    if (installed_) sigaction(SIGINT, &previous_, nullptr);
  }

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
};

// What `uvflow run` does, less the table: the report (JSON text) and what
// every io.collect kept, by name.
py::tuple run(const Source& src, const std::string& report) {
  return mapped([&] {
    Plan p = src.load();
    if (!report.empty()) p.run.report = report, p.run.report_pos = {"report=" + report, 0, 0};
    std::vector<std::string> names;
    for (auto& st : p.stages)
      if (st.spec->type == "io.collect") names.push_back(st.params.string("name"));
    RunReport r;
    std::vector<std::string> warnings;
    {
      CtrlCCancels ctrl_c;
      py::gil_scoped_release nogil;
      const PreflightResult pf = preflight(p, PreflightFor::run, registry());
      if (!pf.errors.empty()) throw ConfigError(pf.errors);
      for (auto& w : pf.warnings) warnings.push_back(warning_str(w));
      for (auto& n : p.notes) spdlog::info("plan: {}", n);
      r = run_plan(p, ExecOptions{.progress = false, .report = p.run.report});
    }
    py::dict outputs;
    for (auto& n : names) {
      py::list items;
      for (auto& payload : array_feed::take(n)) items.append(to_python(payload));
      outputs[py::str(n)] = items;
    }
    return py::make_tuple(report_json(r), outputs, warnings);
  });
}

// ---------------------------------------------------------------- stages written in Python

ParamValue param_value(const std::string& kind, const py::handle& v) {
  if (kind == "integer") return v.cast<std::int64_t>();
  if (kind == "number") return v.cast<double>();
  if (kind == "boolean") return v.cast<bool>();
  if (kind == "string") return v.cast<std::string>();
  if (kind == "numbers") return v.cast<std::vector<double>>();
  throw py::value_error("parameter type '" + kind + "': integer, number, boolean, string or numbers");
}

py::object to_python(const ParamValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

// A Python class with process(inputs) -> {port: value}, and optionally finish() -> {port: value}.
// Its instance is made in configure(), with the parameters as keyword arguments.
class PythonStage : public Stage {
 public:
  PythonStage(py::object cls, const StageSpec* spec) : cls_(py_owner(std::move(cls))), spec_(spec) {}

  void configure(const ParamValues& values) override {
    py::gil_scoped_acquire gil;
    py::dict kwargs;
    for (auto& [k, v] : values.values()) kwargs[py::str(k)] = to_python(v);
    call([&] { obj_ = py_owner((*static_cast<py::object*>(cls_.get()))(**kwargs)); });
  }

  void process(Context& ctx) override {
    py::gil_scoped_acquire gil;
    py::dict inputs;
    std::shared_ptr<const Image> first_image;
    for (auto& port : spec_->inputs) {
      if (!ctx.connected(port.name)) continue;
      auto p = ctx.input(port.name);
      if (auto img = std::dynamic_pointer_cast<const Image>(p); img && !first_image) first_image = img;
      inputs[py::str(port.name)] = to_python(p);
    }
    call([&] { emit(ctx, instance().attr("process")(inputs), first_image); });
  }

  void finish(Context& ctx) override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(instance(), "finish")) call([&] { emit(ctx, instance().attr("finish")(), nullptr); });
  }

 private:
  py::object& instance() { return *static_cast<py::object*>(obj_.get()); }

  // A Python exception becomes a C++ one with Python's text ("ValueError: ..."): the executor
  // names the stage and item around it, as for any stage.
  template <class F>
  void call(F&& f) {
    try {
      f();
    } catch (py::error_already_set& e) {
      throw std::runtime_error(std::string(py::str(e.type().attr("__name__"))) + ": " + std::string(py::str(e.value())));
    }
  }

  void emit(Context& ctx, const py::object& result, const std::shared_ptr<const Image>& like) {
    if (result.is_none()) return;
    if (!py::isinstance<py::dict>(result))
      throw std::runtime_error("process() must return a dict of outputs by port name, or None");
    for (auto [k, v] : py::cast<py::dict>(result)) {
      const std::string port = py::str(k);
      const PortSpec* out = spec_->output(port);
      if (!out) throw std::runtime_error("process() returned an output '" + port + "' the stage does not declare");
      if (py::isinstance<ImageHandle>(v)) {
        ctx.emit(port, std::const_pointer_cast<Image>(v.cast<ImageHandle&>().img));
        continue;
      }
      auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(v);
      if (!a || a.ndim() != 2)
        throw std::runtime_error("output '" + port + "' must be a uvflow.Image or a 2-D array of pixels");
      // Copied: the array stays Python's to change after process() returns.
      auto img = std::make_shared<Image>();
      img->index = std::max<std::int64_t>(ctx.item(), 0);
      img->ny = int(a.shape(0));
      img->nx = int(a.shape(1));
      img->pixels = Array<float>::host(std::size_t(a.size()));
      std::memcpy(img->pixels.data(), a.data(), std::size_t(a.nbytes()));
      if (like && like->nx == img->nx && like->ny == img->ny) img->wcs = like->wcs;
      ctx.emit(port, img);
    }
  }

  std::shared_ptr<void> cls_, obj_;
  const StageSpec* spec_;
};

std::vector<PortSpec> ports(const std::vector<std::tuple<std::string, std::string, std::string>>& list, bool input) {
  std::vector<PortSpec> out;
  for (auto& [name, type, arity] : list) {
    if (type != "Image" && type != "VisBlock")
      throw py::value_error("port '" + name + "': Python stages take Image and VisBlock payloads (not '" + type + "')");
    if (!input && type != "Image") throw py::value_error("port '" + name + "': Python stages output Image payloads");
    if (arity != "stream" && arity != "once") throw py::value_error("port '" + name + "': arity is 'stream' or 'once'");
    out.push_back({name, type, arity == "once" ? Arity::once : Arity::stream, Residency::host, "", false});
  }
  return out;
}

void register_stage(const std::string& type, py::object cls,
                    const std::vector<std::tuple<std::string, std::string, std::string>>& inputs,
                    const std::vector<std::tuple<std::string, std::string, std::string>>& outputs,
                    const std::vector<std::tuple<std::string, std::string, py::object>>& params,
                    const std::string& summary, const std::string& doc) {
  if (registry().find(type)) throw py::value_error("a stage of type '" + type + "' is registered already");
  auto spec = std::make_shared<StageSpec>();
  spec->type = type;
  spec->summary = summary;
  spec->doc = doc;
  spec->inputs = ports(inputs, true);
  spec->outputs = ports(outputs, false);
  for (auto& [name, kind, def] : params) {
    ParamSpec p{.name = name};
    p.type = kind == "integer" ? ParamType::integer
             : kind == "number" ? ParamType::number
             : kind == "boolean" ? ParamType::boolean
             : kind == "numbers" ? ParamType::numbers
                                 : ParamType::string;
    if (!def.is_none()) p.def = param_value(kind, def);
    spec->params.push_back(std::move(p));
  }
  // The registry keeps its own copy; the factory finds that copy by type (for the port list).
  spec->backends = {{"cpu", [cls = py_owner(std::move(cls)), type] {
                       py::gil_scoped_acquire gil;
                       return std::unique_ptr<Stage>(std::make_unique<PythonStage>(
                           *static_cast<py::object*>(cls.get()), registry().find(type)));
                     }}};
  try {
    registry().add(*spec);
  } catch (const std::logic_error& e) {
    throw py::value_error(e.what());
  }
}

py::list stage_list() {
  py::list l;
  for (auto& t : registry().types()) {
    const StageSpec* s = registry().find(t);
    py::list backends;
    for (auto& b : s->backends) backends.append(b.name);
    py::dict d;
    d["type"] = t;
    d["summary"] = s->summary;
    d["backends"] = backends;
    py::list in, out, params;
    for (auto& p : s->inputs) in.append(py::make_tuple(p.name, p.type, to_string(p.arity)));
    for (auto& p : s->outputs) out.append(py::make_tuple(p.name, p.type, to_string(p.arity)));
    for (auto& p : s->params) params.append(py::make_tuple(p.name, to_string(p.type), p.def ? to_python(*p.def) : py::none()));
    d["inputs"] = in;
    d["outputs"] = out;
    d["params"] = params;
    l.append(d);
  }
  return l;
}

std::string describe(const std::string& type) {
  const StageSpec* s = registry().find(type);
  if (!s) {
    set_python_error({int(ExitCode::usage), "UsageError", unknown_stage_text(type, registry())});
    throw py::error_already_set();
  }
  return describe_stage(*s);
}

}  // namespace

PYBIND11_MODULE(_uvflow, m) {
  m.doc() = "uvflow's compiled core; use the `uvflow` package";
  device::prefer_eager_module_loading();  // as the command does: no kernel loads inside a run's stream

  // Messages as the command prints them, on stderr; warnings and errors only unless asked.
  if (!spdlog::get("uvflow")) {
    auto log = spdlog::stderr_color_mt("uvflow");
    spdlog::set_default_logger(log);
    spdlog::set_pattern("[uvflow] %^%l%$: %v");
    spdlog::set_level(spdlog::level::warn);
  }
  m.def("set_log_level", [](const std::string& level) { spdlog::set_level(spdlog::level::from_str(level)); });

  py::object base = py::reinterpret_steal<py::object>(PyErr_NewException("uvflow.Error", PyExc_Exception, nullptr));
  m.attr("Error") = base;
  error_classes()["Error"] = base;
  for (const char* kind :
       {"ConfigError", "InputError", "StageError", "OutputError", "Interrupted", "MemoryError", "InternalError", "UsageError"}) {
    // A cancelled run is a KeyboardInterrupt too, so code that stops on Ctrl-C stops on it.
    py::object bases = std::string(kind) == "Interrupted" ? py::object(py::make_tuple(base, py::handle(PyExc_KeyboardInterrupt)))
                                                           : py::object(base);
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewException((std::string("uvflow.") + kind).c_str(), bases.ptr(), nullptr));
    m.attr(kind) = cls;
    error_classes()[kind] = cls;
  }

  py::class_<Source>(m, "Source")
      .def(py::init([](std::string file, std::string text, bool is_text, std::vector<std::string> sets) {
        return Source{std::move(file), std::move(text), is_text, std::move(sets)};
      }));
  m.def("check", &check);
  m.def("plan", &plan_text, py::arg("source"), py::arg("dot") = false);
  m.def("run", &run);
  m.def("feed_vis", &feed_vis);
  m.def("feed_images", &feed_images);
  m.def("clear_feed", [] { array_feed::clear(); });
  m.def("register_stage", &register_stage);
  m.def("stages", &stage_list);
  m.def("stages_text", [] { return stages_summary(registry()); });
  m.def("describe", &describe);
  m.def("device_count", [] { return device::count(); });
  m.def("cuda_compiled", [] { return device::compiled(); });
  m.def("to_host", &device_to_host, "a host copy (NumPy) of a float32 device array with __cuda_array_interface__");

  py::class_<ImageHandle>(m, "Image")
      .def_property_readonly("index", [](const ImageHandle& h) { return h.img->index; })
      .def_property_readonly("shape", [](const ImageHandle& h) { return py::tuple(py::cast(h.shape())); })
      .def_property_readonly("location", &ImageHandle::location)
      .def_property_readonly("has_wcs", [](const ImageHandle& h) { return h.img->wcs.has_value(); })
      .def_property_readonly("__cuda_array_interface__", &ImageHandle::cuda_array_interface)
      .def("_host_array", &ImageHandle::host_array)
      .def("_cards", &ImageHandle::cards);

  py::class_<DeviceArray>(m, "DeviceArray", "float32 device memory allocated by uvflow (no CuPy needed)")
      .def_static("from_host", &DeviceArray::from_host)
      .def_property_readonly("shape", [](const DeviceArray& d) { return py::tuple(py::cast(d.shape)); })
      .def_property_readonly("__cuda_array_interface__",
                             [](const DeviceArray& d) { return cuda_interface(d.storage->data(), d.shape); });
}
