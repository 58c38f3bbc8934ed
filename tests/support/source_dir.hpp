// Where the repository's pipelines and fixtures are: $UVFLOW_SOURCE_DIR when set (binaries run on
// another machine, e.g. the GPU machine, from a copy of the tree), else the tree they were built from.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace uvflow::test {

inline std::filesystem::path source_dir() {
  if (const char* e = std::getenv("UVFLOW_SOURCE_DIR"); e && *e) return e;
  return UVFLOW_TEST_SOURCE_DIR;
}

}  // namespace uvflow::test
