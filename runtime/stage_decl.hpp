// Declaring a stage once, at the top of its header: a typed parameter struct (the C++ type and
// default of each parameter are the member's), named descriptions of each parameter, typed port
// constants, and the StageDecl that makes the spec from them. Validation, `uvflow describe`,
// docs/stages.md, the one-stage harness and both backends all read this one declaration.
//
//   namespace uvflow::grid_serial {
//   struct Params { std::int64_t central_box = 2; };
//   inline constexpr In<VisBlock> vis{.name = "vis", .doc = "visibilities"};
//   inline constexpr Out<Grid> grid{.name = "grid", .arity = Arity::once, .doc = "the grid"};
//   inline const StageDecl<Params> decl{
//       .type = "grid.serial", .summary = "...", .doc = "...",
//       .inputs = {vis}, .outputs = {grid},
//       .params = {{&Params::central_box, {.name = "central_box", .min = -1, .doc = "..."}}}};
//   }
//
// A backend derives from DeclaredStage<decl> and reads `params()` (already checked against the
// ranges and choices), and its ports through the constants: ctx.in(vis), ctx.emit(grid, g).
#pragma once

#include <concepts>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/stage.hpp"

namespace uvflow {

// ---------------------------------------------------------------- parameters

// Everything about a parameter that its C++ member does not say already.
struct ParamInfo {
  std::string name;
  std::string unit;                  // "arcsec", "Hz", ... (empty: dimensionless)
  std::optional<double> min, max;    // inclusive range for integers, numbers and lists of numbers
  std::vector<std::string> choices;  // a std::string member with choices is a `choice`
  std::vector<ParamSpec> fields;     // records: each element's numeric fields
  std::string doc;
  bool required = false;             // no default: the pipeline must set it
  PathRole role = PathRole::none;    // path parameters: input, output or output_per_item
};

namespace detail {
template <class T> struct is_optional : std::false_type { using value_type = T; };
template <class T> struct is_optional<std::optional<T>> : std::true_type { using value_type = T; };

template <class T>
constexpr ParamType param_type(bool has_choices) {
  if constexpr (std::is_same_v<T, bool>) return ParamType::boolean;
  else if constexpr (std::is_integral_v<T>) return ParamType::integer;
  else if constexpr (std::is_floating_point_v<T>) return ParamType::number;
  else if constexpr (std::is_same_v<T, std::string>) return has_choices ? ParamType::choice : ParamType::string;
  else if constexpr (std::is_same_v<T, std::filesystem::path>) return ParamType::path;
  else if constexpr (std::is_same_v<T, std::vector<double>>) return ParamType::numbers;
  else if constexpr (std::is_same_v<T, std::vector<Record>>) return ParamType::records;
  else if constexpr (std::is_same_v<T, std::vector<std::filesystem::path>>) return ParamType::paths;
  else static_assert(sizeof(T) == 0, "no parameter type for this member type");
}

// C++ value -> the loader's ParamValue, and back (the loader has checked type and range).
template <class T>
ParamValue to_value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v;
  else if constexpr (std::is_integral_v<T>) return std::int64_t(v);
  else if constexpr (std::is_floating_point_v<T>) return double(v);
  else if constexpr (std::is_same_v<T, std::filesystem::path>) return v.string();
  else if constexpr (std::is_same_v<T, std::vector<std::filesystem::path>>) {
    std::vector<std::string> s;
    for (auto& p : v) s.push_back(p.string());
    return s;
  } else return v;
}

template <class T>
T from_value(const ParamValue& v) {
  if constexpr (std::is_same_v<T, bool>) return std::get<bool>(v);
  else if constexpr (std::is_integral_v<T>) return T(std::get<std::int64_t>(v));
  else if constexpr (std::is_floating_point_v<T>) {
    if (auto i = std::get_if<std::int64_t>(&v)) return T(*i);
    return T(std::get<double>(v));
  } else if constexpr (std::is_same_v<T, std::filesystem::path>) return std::get<std::string>(v);
  else if constexpr (std::is_same_v<T, std::vector<std::filesystem::path>>) {
    const auto& s = std::get<std::vector<std::string>>(v);
    return {s.begin(), s.end()};
  } else return std::get<T>(v);
}
}  // namespace detail

// One parameter of P: its ParamSpec (type and default from the member) and how to read and write
// it. An std::optional member is an optional parameter (unset when the pipeline leaves it out).
template <class P>
class Field {
 public:
  template <class T>
  Field(T P::*member, ParamInfo info) {
    using V = typename detail::is_optional<T>::value_type;
    spec_ = ParamSpec{.name = std::move(info.name), .unit = std::move(info.unit), .min = info.min, .max = info.max,
                      .choices = std::move(info.choices), .fields = std::move(info.fields), .doc = std::move(info.doc),
                      .role = info.role};
    spec_.type = detail::param_type<V>(!spec_.choices.empty());
    if constexpr (detail::is_optional<T>::value) {
      spec_.optional = true;
      read_ = [member](P& p, const ParamValue& v) { p.*member = detail::from_value<V>(v); };
      write_ = [member](const P& p) -> std::optional<ParamValue> {
        if (!(p.*member)) return std::nullopt;
        return detail::to_value<V>(*(p.*member));
      };
    } else {
      if (!info.required) spec_.def = detail::to_value<V>(P{}.*member);
      read_ = [member](P& p, const ParamValue& v) { p.*member = detail::from_value<V>(v); };
      write_ = [member](const P& p) -> std::optional<ParamValue> { return detail::to_value<V>(p.*member); };
    }
  }
  const ParamSpec& spec() const { return spec_; }
  void read(P& p, const ParamValues& values) const {
    if (values.has(spec_.name)) read_(p, values.value(spec_.name));
  }
  std::optional<ParamValue> write(const P& p) const { return write_(p); }

 private:
  ParamSpec spec_;
  std::function<void(P&, const ParamValue&)> read_;
  std::function<std::optional<ParamValue>(const P&)> write_;
};

// ---------------------------------------------------------------- the declaration

template <class P>
struct StageDecl {
  using Params = P;
  std::string type;     // "grid.tiled"
  std::string summary;  // one line
  std::string doc;      // a paragraph: what it does, what it is tested against
  std::vector<PortSpec> inputs, outputs;
  std::vector<Field<P>> params;
  Concurrency concurrency = Concurrency::serial;
  bool output_on_root = false;  // StageSpec::output_on_root: a reduction across MPI ranks
  // Optional: the output shapes from the typed parameters and the input shapes (StageSpec::describe
  // says what it may do), e.g. `.describe = [](const Params& p, const PortShapes&) { return PortShapes{{"image",
  // {.nx = p.size, .ny = p.size}}}; }`. Ports are named by their constants: {std::string(out.name), ...}.
  std::function<PortShapes(const P&, const PortShapes& inputs)> describe;
  // Optional: StageSpec::estimate from the typed parameters.
  std::function<Estimate(const P&, const PortShapes& inputs, const EstimateContext&)> estimate;

  // The spec with these backends (the first is the default).
  StageSpec spec(std::vector<BackendSpec> backends) const {
    StageSpec s{.type = type, .summary = summary, .doc = doc, .inputs = inputs, .outputs = outputs};
    for (const auto& f : params) s.params.push_back(f.spec());
    s.backends = std::move(backends);
    s.concurrency = concurrency;
    s.output_on_root = output_on_root;
    if (describe)
      s.describe = [decl = *this](const ParamValues& values, const PortShapes& in) {
        return decl.describe(decl.read(values), in);
      };
    if (estimate)
      s.estimate = [decl = *this](const ParamValues& values, const PortShapes& in, const EstimateContext& c) {
        return decl.estimate(decl.read(values), in, c);
      };
    return s;
  }
  // The same with an estimate (StageSpec::estimate), written beside the backends whose speed it models.
  StageSpec spec(std::vector<BackendSpec> backends,
                 std::function<Estimate(const P&, const PortShapes& inputs, const EstimateContext&)> est) const {
    StageDecl d = *this;
    d.estimate = std::move(est);
    return d.spec(std::move(backends));
  }
  // Checked values (every default filled in by the loader or the harness) -> the typed struct.
  P read(const ParamValues& values) const {
    P p{};
    for (const auto& f : params) f.read(p, values);
    return p;
  }
  // The typed struct -> values, for the harness (tests set parameters as a struct too).
  std::map<std::string, ParamValue> write(const P& p) const {
    std::map<std::string, ParamValue> m;
    for (const auto& f : params)
      if (auto v = f.write(p)) m.emplace(f.spec().name, std::move(*v));
    return m;
  }
};

// A backend of a declared stage: configure() reads the typed parameters, then calls check() for
// the checks that involve several parameters (throw ParamError to point at one).
template <const auto& decl>
class DeclaredStage : public Stage {
 public:
  using Params = typename std::remove_cvref_t<decltype(decl)>::Params;
  void configure(const ParamValues& values) final {
    params_ = decl.read(values);
    check(params_);
  }

 protected:
  virtual void check(const Params&) {}
  const Params& params() const { return params_; }

 private:
  Params params_{};
};

// The cpu backend entry of a spec: `cpu_backend<TiledGridder>()`.
template <class S>
BackendSpec cpu_backend() {
  return {"cpu", [] { return std::unique_ptr<Stage>(std::make_unique<S>()); }};
}

}  // namespace uvflow
