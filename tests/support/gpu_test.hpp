// The fixture of every GPU test: skips cleanly without a CUDA device, and moves payloads between
// host and device on a stream of its own, waiting for each copy, so that what it returns can be
// read at once or handed to a one-stage harness.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "runtime/device.hpp"
#include "runtime/payload.hpp"

namespace uvflow::test {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device::count() == 0) GTEST_SKIP() << "no CUDA device";
    stream_ = device::Stream::create();
  }

  template <class T>
  std::shared_ptr<const T> moved(const std::shared_ptr<const T>& p, Location to) {
    auto out = std::static_pointer_cast<const T>(p->moved_to(to, stream_, false));
    stream_.synchronize();
    return out;
  }

  device::Stream stream_;
};

}  // namespace uvflow::test
