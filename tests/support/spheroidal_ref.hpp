// Independent references for Schwab's grdsf and the w-projection grid correction, in long double
// straight from the published coefficients (WPROJ.md), for the kernel and correction tests.
#pragma once

#include <cmath>
#include <complex>
#include <cstdlib>
#include <vector>

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

// The image response R(gx, gy) of the oversampled table `quarter` (plane 0, S x S, the kernel
// at sub-sample offsets [0, S) of a grid_size grid; S = o/2 + o s + 1) at grid indices (gx, gy),
// from its definition, with nothing assumed separable: a visibility at sub-cell position (fu, fv),
// uniform over the cell, is gridded with the sample nearest to it, K[|kv o - jv|][|ku o - ju|] for
// |k| <= s, j = the sub-cell offset in [-o/2, o/2] that fu*o rounds to; the pixel sees
// sum_k K exp(2 pi i ((ku - fu) x + (kv - fv) y) / N) relative to the true position (x, y from
// the centre). The average over f is integrated exactly, bin by bin (a bin j covers
// [(j - 1/2)/o, (j + 1/2)/o] within the cell). Relative to the centre's response.
inline long double table_response_ref(const std::complex<float>* quarter, int S, int s, int o, int grid_size, int gx,
                                      int gy) {
  using cld = std::complex<long double>;
  const long double pi = 3.141592653589793238462643383279502884L;
  auto response = [&](int x, int y) {
    // Integral over one axis' bin j of exp(-2 pi i f x / N) df.
    auto bin = [&](int j, int x) -> cld {
      const long double a = std::max(-0.5L, (j - 0.5L) / o), b = std::min(0.5L, (j + 0.5L) / o);
      if (x == 0) return b - a;
      const long double t = -2 * pi * x / grid_size;
      return (std::exp(cld(0, t * b)) - std::exp(cld(0, t * a))) / cld(0, t);
    };
    std::vector<cld> eu(2 * s + 1), ev(2 * s + 1);
    for (int k = -s; k <= s; ++k) {
      eu[k + s] = std::exp(cld(0, 2 * pi * k * x / grid_size));
      ev[k + s] = std::exp(cld(0, 2 * pi * k * y / grid_size));
    }
    cld total = 0;
    for (int jv = -o / 2; jv <= o / 2; ++jv)
      for (int ju = -o / 2; ju <= o / 2; ++ju) {
        cld sum = 0;
        for (int kv = -s; kv <= s; ++kv)
          for (int ku = -s; ku <= s; ++ku) {
            const std::complex<float> k = quarter[std::abs(kv * o - jv) * S + std::abs(ku * o - ju)];
            sum += cld(k.real(), k.imag()) * eu[ku + s] * ev[kv + s];
          }
        total += sum * bin(ju, x) * bin(jv, y);
      }
    return total.real();
  };
  return response(gx - grid_size / 2, gy - grid_size / 2) / response(0, 0);
}

}  // namespace uvflow::test
