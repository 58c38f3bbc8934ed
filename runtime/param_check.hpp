// The checks a parameter value gets against its spec: the pipeline loader (graph/pipeline) and the
// one-stage harness both apply them, so a test cannot configure a stage with a value no pipeline
// could give it.
#pragma once

#include <optional>
#include <string>

#include "runtime/stage.hpp"

namespace uvflow {

// The range of an integer or a number (or of each element of a list of numbers, or a single one
// of them), the choices of a choice, and the fields of records. Returns nothing when `v` passes,
// otherwise the message: "<where> = 300 is out of range [0, 100] Hz" or
// "<where> must be one of a, b, got 'c'". The type of `v` is not checked here.
std::optional<std::string> check_param(const ParamSpec& spec, const ParamValue& v, const std::string& where);

}  // namespace uvflow
