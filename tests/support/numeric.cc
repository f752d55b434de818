#include "support/numeric.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace meshtrain::testing {

std::vector<double> finite_difference(const std::function<double(const std::vector<double>&)>& f,
                                      std::vector<double> x, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b, double floor) {
  if (a.size() != b.size()) throw std::invalid_argument("max_rel_diff: size mismatch");
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(a[i] - b[i]) / std::max({std::abs(a[i]), std::abs(b[i]), floor}));
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("max_abs_diff: size mismatch");
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double rel_to_max(const std::vector<double>& a, const std::vector<double>& ref) {
  if (a.size() != ref.size()) throw std::invalid_argument("rel_to_max: size mismatch");
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace meshtrain::testing
