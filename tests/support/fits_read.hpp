// Reading a FITS image back in tests (first plane of the primary HDU).
#pragma once

#include <filesystem>
#include <vector>

namespace uvflow::test {

struct FitsImage {
  long nx = 0, ny = 0;
  std::vector<float> pixels;  // [y][x]
};

FitsImage read_fits_image(const std::filesystem::path& p);

}  // namespace uvflow::test
