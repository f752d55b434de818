// Shared helpers for the kernel tests.
#pragma once

#include <omp.h>

#include <cstdint>
#include <random>
#include <vector>

namespace meshtrain::kernels::test {

template <typename T = double>
std::vector<T> random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(gen));
  return v;
}

template <typename To, typename From>
std::vector<To> cast_vec(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// Runs fn with this thread's team size (compute_team.h, OpenMP) set to n,
// then restores it.
template <typename F>
auto with_threads(int n, F&& fn) {
  const int old = omp_get_max_threads();
  omp_set_num_threads(n);
  struct Restore {
    int old;
    ~Restore() { omp_set_num_threads(old); }
  } restore{old};
  return fn();
}

// The tree (docs/math.md (M.10)) over leaves [first, first + n): the
// largest power of two below n on the left (equal halves for a power of
// two), what model/canonical_sum.h's BlockTree builds (a binary counter
// that folds its open subtrees right to left).
template <typename T>
std::vector<T> block_tree_sum(const std::vector<std::vector<T>>& leaves, size_t first, size_t n) {
  if (n == 1) return leaves[first];
  size_t left = 1;
  while (2 * left < n) left *= 2;
  std::vector<T> sum = block_tree_sum(leaves, first, left);
  const std::vector<T> right = block_tree_sum(leaves, first + left, n - left);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + right[i];
  return sum;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace meshtrain::kernels::test

#include "meshtrain/kernels/cpu/isa.h"

namespace meshtrain::kernels::test {

// Every kernel ISA level this CPU can run, lowest first (tests loop over them
// with ScopedIsa, so an AVX-512 machine checks the AVX2 and scalar code too).
inline std::vector<Isa> runnable_levels() {
  std::vector<Isa> levels;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (int(isa) <= int(detected_isa())) levels.push_back(isa);
  return levels;
}

}  // namespace meshtrain::kernels::test
