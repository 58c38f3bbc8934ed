#include "stages/shared/es_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace uvflow::es {
namespace {

constexpr double kPi = std::numbers::pi;
// Relative rounding of a single-precision FFT's output (about 2^-24 times a few): the image-domain
// correction multiplies it by up to psi^(0) / psi^(1/(2 sigma)) along each axis.
constexpr double kSingleRounding = 6e-8;

// Gauss-Legendre nodes and weights on [-1, 1] (Newton on the Legendre recurrence).
struct GaussLegendre {
  std::vector<double> x, w;
  explicit GaussLegendre(int n) : x(n), w(n) {
    for (int i = 0; i < n; ++i) {
      double z = std::cos(kPi * (i + 0.75) / (n + 0.5)), dp = 0;
      for (int it = 0; it < 100; ++it) {
        double p0 = 1, p1 = z;
        for (int k = 2; k <= n; ++k) {
          const double p2 = ((2 * k - 1) * z * p1 - (k - 1) * p0) / k;
          p0 = p1;
          p1 = p2;
        }
        dp = n * (z * p1 - p0) / (z * z - 1);
        const double dz = p1 / dp;
        z -= dz;
        if (std::fabs(dz) < 1e-16) break;
      }
      x[i] = z;
      w[i] = 2 / ((1 - z * z) * dp * dp);
    }
  }
};

const GaussLegendre& nodes() {
  // psi has a square-root edge only at the level exp(-beta) and at most W/2 * t < 3 oscillations
  // over [0, W/2]: 96 nodes integrate it to double rounding for every support allowed.
  static const GaussLegendre gl(96);
  return gl;
}

double ft_of(int support, double beta, double t) {
  const GaussLegendre& gl = nodes();
  const double half = support / 2.0;
  double s = 0;
  // [0, W/2]: x = half (1 + z) / 2.
  for (std::size_t i = 0; i < gl.x.size(); ++i) {
    const double x = half * (1 + gl.x[i]) / 2;
    s += gl.w[i] * psi(x, support, beta) * std::cos(2 * kPi * x * t);
  }
  return s * half;  // 2 (even) * half / 2 (the map's Jacobian)
}

}  // namespace

double ft(const Kernel& k, double t) { return ft_of(k.support, k.beta, t); }

double tap_error(int support, double beta, double t) {
  const double f = ft_of(support, beta, t);
  constexpr int kPositions = 64;
  double sum2 = 0;
  for (int i = 0; i < kPositions; ++i) {
    const double g = (i + 0.5) / kPositions;
    const int b0 = int(std::ceil(g - support / 2.0));
    std::complex<double> s = 0;
    for (int b = b0; b < b0 + support; ++b) s += psi(g - b, support, beta) * std::polar(1.0, -2 * kPi * b * t);
    sum2 += std::norm(s / f - std::polar(1.0, -2 * kPi * g * t));
  }
  return std::sqrt(sum2 / kPositions);
}

double axis_error(int support, double beta, double sigma) {
  constexpr int kFreqs = 16;
  double worst = 0;
  for (int i = 0; i <= kFreqs; ++i) worst = std::max(worst, tap_error(support, beta, i / (2 * sigma * kFreqs)));
  return worst;
}

namespace {

Kernel search(double epsilon, double sigma) {
  if (!(sigma > 1)) throw std::invalid_argument("ES kernel: the oversampling (padding) must exceed 1");
  for (int w = 2; w <= kMaxSupport; ++w) {
    Kernel best{.support = w, .beta = 0, .sigma = sigma, .error = 1e300};
    for (double fac = 1.0; fac <= 3.2001; fac += 0.05) {
      const double r = ft_of(w, fac * w, 0) / ft_of(w, fac * w, 0.5 / sigma);
      if (r * r * kSingleRounding > epsilon / 2) continue;
      const double e = axis_error(w, fac * w, sigma);
      if (e < best.error) best.beta = fac * w, best.error = e;
    }
    if (std::sqrt(3.0) * best.error <= epsilon) return best;
  }
  throw std::invalid_argument("ES kernel: epsilon " + std::to_string(epsilon) + " is out of reach at padding " +
                              std::to_string(sigma) + " (a kernel accurate enough either needs a support above " +
                              std::to_string(kMaxSupport) + " cells or makes the image-domain correction amplify "
                              "single-precision rounding above epsilon): raise the padding (2 reaches 1e-6) or epsilon");
}

// Answers kept for the process, made once per key: the first caller makes it outside the lock
// (other keys are made meanwhile) and later callers wait for it; a failure is kept and rethrown
// to each caller as the first one's exception.
template <class Key, class Value>
class KeptPerProcess {
 public:
  template <class Make>
  Value get(const Key& key, Make&& make) {
    std::promise<Value> mine;
    std::shared_future<Value> answer;
    bool make_here = false;
    {
      const std::lock_guard lock(mutex_);
      auto [at, added] = known_.try_emplace(key);
      if (added) at->second = mine.get_future().share(), make_here = true;
      answer = at->second;
    }
    if (make_here) {
      try {
        mine.set_value(make());
      } catch (...) {
        mine.set_exception(std::current_exception());
      }
    }
    return answer.get();
  }

 private:
  std::mutex mutex_;
  std::map<Key, std::shared_future<Value>> known_;
};

}  // namespace

// The search evaluates tap errors over tens of betas and supports (5-30 ms each on the VM, more for
// an unreachable epsilon), and padding 0 asks for six paddings at once (wstack::prepare_paddings),
// so the answers are kept for the process: a handful of pairs per run.
Kernel choose(double epsilon, double sigma) {
  static KeptPerProcess<std::pair<double, double>, Kernel> kept;
  return kept.get({epsilon, sigma}, [&] { return search(epsilon, sigma); });
}

std::shared_ptr<const Correction> Correction::of(const Kernel& k) {
  static KeptPerProcess<std::tuple<int, double, double>, std::shared_ptr<const Correction>> kept;
  return kept.get({k.support, k.beta, k.sigma}, [&] { return std::make_shared<const Correction>(k); });
}

Taps::Taps(const Kernel& k) : w_(k.support), deg_(k.support + 3) {
  const int n = deg_ + 1;
  c_.assign(std::size_t(n) * kMaxSupport, 0.0);
  // Chebyshev interpolation at n nodes of [-1, 1], then the Chebyshev series to monomials.
  std::vector<double> node(n);
  for (int j = 0; j < n; ++j) node[j] = std::cos(kPi * (j + 0.5) / n);
  // T_m as monomial coefficients, m = 0 .. n-1.
  std::vector<std::vector<double>> T(n, std::vector<double>(n, 0.0));
  T[0][0] = 1;
  if (n > 1) T[1][1] = 1;
  for (int m = 2; m < n; ++m)
    for (int d = 0; d < n; ++d) T[m][d] = (d ? 2 * T[m - 1][d - 1] : 0.0) - T[m - 2][d];
  for (int i = 0; i < w_; ++i) {
    std::vector<double> val(n);
    for (int j = 0; j < n; ++j) val[j] = psi(w_ / 2.0 - (node[j] + 1) / 2 - i, w_, k.beta);
    for (int m = 0; m < n; ++m) {
      double a = 0;
      for (int j = 0; j < n; ++j) a += val[j] * std::cos(kPi * m * (j + 0.5) / n);
      a *= (m ? 2.0 : 1.0) / n;
      for (int d = 0; d < n; ++d) c_[std::size_t(d) * kMaxSupport + i] += a * T[m][d];
    }
  }
}

Correction::Correction(const Kernel& k) {
  constexpr int kSteps = 4096;
  step_ = (0.5 / k.sigma) * 1.01 / kSteps;
  inv_.resize(kSteps + 4);
  for (int i = 0; i < kSteps + 4; ++i) inv_[i] = 1 / ft(k, (i - 1) * step_);
}

int good_size(double min_size) {
  for (int n = std::max(2, int(std::ceil(min_size))); ; ++n) {
    if (n % 2) continue;
    int m = n;
    for (int p : {2, 3, 5})
      while (m % p == 0) m /= p;
    if (m == 1) return n;
  }
}

}  // namespace uvflow::es
