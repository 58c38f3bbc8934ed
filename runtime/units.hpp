// Physical constants and angle conversions, one definition for every stage.
#pragma once

#include <numbers>

namespace uvflow {

inline constexpr double kSpeedOfLight = 299792458.0;  // m/s
inline constexpr double kDegToRad = std::numbers::pi / 180;
inline constexpr double kRadToDeg = 180 / std::numbers::pi;
inline constexpr double kArcsecToRad = kDegToRad / 3600;

}  // namespace uvflow
