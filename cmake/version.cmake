# `uvflow --version`: the project version and the git commit the binary was built from, in
# <build>/generated/uvflow_version.hpp. Included from CMakeLists.txt, it adds a target that runs
# this file again in script mode at every build, which rewrites the header only when the commit (or
# whether the tree has uncommitted changes) differs, so an unchanged build recompiles nothing.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(UVFLOW_VERSION_HEADER ${PROJECT_BINARY_DIR}/generated/uvflow_version.hpp)
  add_custom_target(uvflow_version
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUT=${UVFLOW_VERSION_HEADER}
            -DVERSION=${PROJECT_VERSION} -P ${CMAKE_CURRENT_LIST_FILE}
    BYPRODUCTS ${UVFLOW_VERSION_HEADER}
    COMMENT "")
  add_dependencies(uvflow_cli uvflow_version)
  target_include_directories(uvflow_cli PRIVATE ${PROJECT_BINARY_DIR}/generated)
  return()
endif()

set(commit "")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} describe --always --dirty --abbrev=12
                  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    set(commit "")  # not a git checkout (a release tarball)
  endif()
endif()
set(text "#pragma once\n#define UVFLOW_VERSION \"${VERSION}\"\n#define UVFLOW_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
