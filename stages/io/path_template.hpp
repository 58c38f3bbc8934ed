// Output path templates shared by the writers: "{index}" becomes the zero-padded item index.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/error.hpp"

namespace uvflow {

inline std::string expand_index(const std::string& tmpl, std::int64_t index) {
  auto at = tmpl.find("{index}");
  if (at == std::string::npos) return tmpl;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%05lld", static_cast<long long>(index));
  return tmpl.substr(0, at) + buf + tmpl.substr(at + 7);
}

// A stream of several items needs {index} in the path, or the files would overwrite each other:
// the pipeline's path does not fit its data, an InputError (exit 4) like other unusable input.
inline void require_index_for_streams(const std::string& tmpl, std::int64_t item) {
  if (item > 0 && tmpl.find("{index}") == std::string::npos)
    throw InputError("more than one image arrived but path '" + tmpl + "' has no {index} to tell the files apart");
}

}  // namespace uvflow
