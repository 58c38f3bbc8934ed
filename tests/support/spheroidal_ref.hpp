// Independent references for Schwab's grdsf and the w-projection grid correction, in long double
// straight from the published coefficients (WPROJ.md), for the kernel and correction tests.
#pragma once

#include <cmath>

namespace uvflow::test {

inline long double grdsf_ref(long double nu) {
  static const long double p[2][5] = {{0.08203343L, -0.3644705L, 0.627866L, -0.5335581L, 0.2312756L},
                                      {0.004028559L, -0.03697768L, 0.1021332L, -0.1201436L, 0.06412774L}};
  static const long double q[2][3] = {{1.0L, 0.8212018L, 0.2078043L}, {1.0L, 0.9599102L, 0.2918724L}};
  if (nu < 0 || nu > 1) return 0;
  const int row = nu < 0.75L ? 0 : 1;
  const long double end = row == 0 ? 0.75L : 1.0L;
  const long double d = nu * nu - end * end;
  long double top = 0, bottom = 0;
  for (int i = 0; i < 5; ++i) top += p[row][i] * std::pow(d, (long double)i);
  for (int i = 0; i < 3; ++i) bottom += q[row][i] * std::pow(d, (long double)i);
  return top / bottom;
}

// corr(i) = 1 / (grdsf(|nu|) sinc(x)^p), nu = (i - N/2)/(N/2), x = pi (i - N/2)/(N o); 1 where 0.
inline long double grid_correction_ref(int i, int grid_size, int oversample, int sinc_power = 1) {
  const long double pi = 3.141592653589793238462643383279502884L;
  const long double c = grid_size / 2;
  const long double nu = (i - c) / c;
  const long double x = pi * (i - c) / ((long double)grid_size * oversample);
  const long double sinc = x == 0 ? 1.0L : std::sin(x) / x;
  const long double v = grdsf_ref(std::fabs(nu)) * std::pow(sinc, (long double)sinc_power);
  return v == 0 ? 1.0L : 1.0L / v;
}

}  // namespace uvflow::test
