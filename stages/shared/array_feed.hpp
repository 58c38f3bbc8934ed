// Arrays handed to a pipeline by the program that runs it (the Python module, a C++ test), and
// the payloads its io.collect stages keep for that program: a table by name, so that the stages
// (io.vis_arrays, io.image_arrays, io.collect) know nothing of Python. The program puts its
// arrays, runs the pipeline, takes the collected payloads and clears the table; one run at a time
// uses the table.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/payload.hpp"
#include "runtime/payloads/image.hpp"
#include "runtime/payloads/vis.hpp"

namespace uvflow::array_feed {

// Visibilities as a Measurement Set holds them, one polarisation: `rows` rows of uvw (metres,
// antenna2 - antenna1) and `channels` channels per row, row-major ([row][channel]).
struct VisArrays {
  Array<double> uvw;           // rows x 3
  Array<cfloat> vis;           // rows x channels
  Array<float> weight;         // rows x channels; empty: 1
  Array<std::uint8_t> flag;    // rows x channels, nonzero: flagged (dropped); empty: none
  std::vector<double> freq_hz; // channels
  std::int64_t rows = 0;
  double ra_rad = 0, dec_rad = 0;  // phase centre, J2000
  std::string telescope, origin;
};

// A stream of images of nx x ny float pixels ([y][x], x fastest), each its own array (views of
// one buffer, or not), on the host or on the device; `wcs` for sky images.
struct ImageArrays {
  std::vector<Array<float>> frames;
  int nx = 0, ny = 0;
  std::optional<SkyWcs> wcs;
};

void put(const std::string& name, VisArrays a);
void put(const std::string& name, ImageArrays a);
// The arrays put under `name`, or null.
std::shared_ptr<const VisArrays> vis(const std::string& name);
std::shared_ptr<const ImageArrays> images(const std::string& name);

// io.collect: payloads kept in item order under `name`.
void collect(const std::string& name, std::int64_t item, std::shared_ptr<const Payload> p);
std::vector<std::shared_ptr<const Payload>> take(const std::string& name);

// Empties the table (arrays and collected payloads).
void clear();

}  // namespace uvflow::array_feed
