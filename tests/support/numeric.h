// Numeric helpers for tests: finite-difference gradients and comparisons.
#pragma once

#include <functional>
#include <vector>

namespace meshtrain::testing {

// Central differences of a scalar function f(x) at x, step h (f64).
std::vector<double> finite_difference(const std::function<double(const std::vector<double>&)>& f,
                                      std::vector<double> x, double h = 1e-6);
// max_i |a_i - b_i| / max(|a_i|, |b_i|, floor)
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-8);
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
// max_i |a_i - ref_i| / max_i |ref_i|: a layout's state against a reference,
// relative to the reference's largest magnitude (equivalence tolerances).
double rel_to_max(const std::vector<double>& a, const std::vector<double>& ref);

}  // namespace meshtrain::testing
