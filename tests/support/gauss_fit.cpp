#include "tests/support/gauss_fit.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <stdexcept>
#include <string>
#include <unsupported/Eigen/NonLinearOptimization>

namespace uvflow::test {

namespace {

// Parameters: amplitude, x0, y0, log sigma_a, log sigma_b, angle (logs keep the widths positive).
struct Residuals {
  using Scalar = double;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;

  std::vector<double> xs, ys, data;
  int inputs() const { return 6; }
  int values() const { return int(data.size()); }

  static double model(const Eigen::VectorXd& p, double x, double y) {
    const double c = std::cos(p[5]), s = std::sin(p[5]);
    const double dx = x - p[1], dy = y - p[2];
    const double a = (c * dx + s * dy) / std::exp(p[3]), b = (-s * dx + c * dy) / std::exp(p[4]);
    return p[0] * std::exp(-0.5 * (a * a + b * b));
  }
  int operator()(const Eigen::VectorXd& p, Eigen::VectorXd& r) const {
    for (std::size_t i = 0; i < data.size(); ++i) r[Eigen::Index(i)] = model(p, xs[i], ys[i]) - data[i];
    return 0;
  }
};

}  // namespace

Gaussian2D fit_gaussian(const std::vector<float>& image, long nx, long ny, int x, int y, int half, double sigma_guess) {
  if (x - half < 0 || y - half < 0 || x + half >= nx || y + half >= ny)
    throw std::invalid_argument("fit_gaussian: the patch around (" + std::to_string(x) + ", " + std::to_string(y) +
                                ") leaves the image");
  Residuals f;
  for (int yy = y - half; yy <= y + half; ++yy)
    for (int xx = x - half; xx <= x + half; ++xx) {
      f.xs.push_back(xx);
      f.ys.push_back(yy);
      f.data.push_back(image[std::size_t(yy) * std::size_t(nx) + std::size_t(xx)]);
    }
  Eigen::VectorXd p(6);
  p << image[std::size_t(y) * std::size_t(nx) + std::size_t(x)], x, y, std::log(sigma_guess), std::log(sigma_guess), 0;
  Eigen::NumericalDiff<Residuals> numeric(f);
  Eigen::LevenbergMarquardt<Eigen::NumericalDiff<Residuals>> lm(numeric);
  lm.parameters.xtol = 1e-12;
  lm.parameters.ftol = 1e-12;
  const auto status = lm.minimize(p);
  if (status <= 0 || !p.allFinite())
    throw std::runtime_error("fit_gaussian: no fit at (" + std::to_string(x) + ", " + std::to_string(y) +
                             "), status " + std::to_string(int(status)));
  Eigen::VectorXd r(Eigen::Index(f.data.size()));
  f(p, r);
  Gaussian2D g;
  g.amplitude = p[0];
  g.x0 = p[1];
  g.y0 = p[2];
  const double sa = std::exp(p[3]), sb = std::exp(p[4]);
  g.sigma_major = std::max(sa, sb);
  g.sigma_minor = std::min(sa, sb);
  g.angle = sa >= sb ? p[5] : p[5] + M_PI / 2;
  g.rms_misfit = std::sqrt(r.squaredNorm() / double(r.size()));
  return g;
}

}  // namespace uvflow::test
