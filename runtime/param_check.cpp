#include "runtime/param_check.hpp"

#include <algorithm>
#include <regex>
#include <sstream>

namespace uvflow {
namespace {

std::optional<std::string> check_range(const ParamSpec& spec, double x, const std::string& where) {
  if ((!spec.min || x >= *spec.min) && (!spec.max || x <= *spec.max)) return std::nullopt;
  std::ostringstream r;
  r << "[" << (spec.min ? std::to_string(*spec.min) : "-inf") << ", "
    << (spec.max ? std::to_string(*spec.max) : "inf") << "]";
  auto trim = [](std::string t) {  // 16.000000 -> 16
    std::regex z(R"((\.\d*?)0+(?=[,\]]))");
    t = std::regex_replace(t, z, "$1");
    return std::regex_replace(t, std::regex(R"(\.(?=[,\]]))"), "");
  };
  std::ostringstream xs;
  xs << x;
  return where + " = " + xs.str() + " is out of range " + trim(r.str()) + (spec.unit.empty() ? "" : " " + spec.unit);
}

}  // namespace

std::optional<std::string> check_param(const ParamSpec& spec, const ParamValue& v, const std::string& where) {
  if (auto i = std::get_if<std::int64_t>(&v)) return check_range(spec, double(*i), where);
  if (auto d = std::get_if<double>(&v)) return check_range(spec, *d, where);
  if (auto list = std::get_if<std::vector<double>>(&v)) {
    for (double x : *list)
      if (auto m = check_range(spec, x, where)) return m;
    return std::nullopt;
  }
  if (auto s = std::get_if<std::string>(&v)) {
    if (spec.type != ParamType::choice ||
        std::find(spec.choices.begin(), spec.choices.end(), *s) != spec.choices.end())
      return std::nullopt;
    std::string c;
    for (auto& x : spec.choices) c += (c.empty() ? "" : ", ") + x;
    return where + " must be one of " + c + ", got '" + *s + "'";
  }
  if (auto records = std::get_if<std::vector<Record>>(&v)) {
    for (const auto& r : *records)
      for (const auto& f : spec.fields)
        if (auto it = r.find(f.name); it != r.end())
          if (auto m = check_param(f, it->second, where + "." + f.name)) return m;
  }
  return std::nullopt;
}

}  // namespace uvflow
