// RMSNorm and LayerNorm over the last dim. x, y, dy, dx [n, d]; w, b [d];
// mean, rstd [n]. Row statistics accumulate in double. Backward: dx rows in
// parallel over rows; dw / db parallel over columns, each column summed in
// row order, so results do not depend on the thread count. Both run block
// of rows by block of rows, so the dw pass finds the block's x and dy in
// cache instead of reading them from memory a second time.
#include "meshtrain/kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

template <typename T, typename Out>
void rmsnorm_forward(const T* x, const T* w, int64_t n, int64_t d, T eps, Out* y, T* rstd) {
  parallel_range(n, n * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      double ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < d; ++j) ss += double(xr[j]) * double(xr[j]);
      const T r = T(1.0 / std::sqrt(ss / double(d) + double(eps)));
      rstd[i] = r;
      Out* yr = y + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) store_out(yr + j, xr[j] * r * w[j]);
    }
  });
}

namespace {

// The backward's row reductions, in double. In functions of their own:
// written inside the row lambdas, GCC 12 ran these `omp simd` reductions
// one element at a time (a dependent add per element, several times the
// cost of the rest of the backward).

// sum_j w[j] dy[j] x[j]
template <typename T>
double weighted_dot(const T* w, const T* dy, const T* x, int64_t d) {
  double dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < d; ++j) dot += double(w[j]) * double(dy[j]) * double(x[j]);
  return dot;
}

// sum_j g[j] and sum_j g[j] xhat[j], g = w dy, xhat = (x - m) r
struct GradSums {
  double g = 0, gx = 0;
};
template <typename T>
GradSums layernorm_grad_sums(const T* w, const T* dy, const T* x, T m, T r, int64_t d) {
  double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t j = 0; j < d; ++j) {
    const double g = double(w[j]) * double(dy[j]);
    sg += g;
    sgx += g * double((x[j] - m) * r);
  }
  return {sg, sgx};
}

// Rows per block of the backward: x and dy of a block (2 x 64 rows of up to
// a few KiB) stay in L2 between the dx pass and the dw pass.
constexpr int64_t kBackwardRows = 64;

// Lanes of the backward: pieces of the team (compute_team.h), so a thread
// without a core holds up one lane, not the call.
constexpr int64_t kBackwardLanes = 8;

// For each lane in [0, lanes): rows(r0, r1) over the lane's part of the
// rows of each block, then cols(r0, r1, c0, c1) over the block's rows for
// the lane's columns, block after block. Neither depends on the other (dw
// reads x and dy, not dx), and a column is summed by one lane in row order,
// so the lanes need no order among them and the bits none of the split.
template <typename Rows, typename Cols>
void backward_by_row_blocks(int64_t n, int64_t d, Rows&& rows, Cols&& cols) {
  const int64_t lanes = worth_a_team(n, n * d) ? std::min(d, kBackwardLanes) : 1;
  auto lane = [&](int64_t t, int) {
    const int64_t c0 = d * t / lanes, c1 = d * (t + 1) / lanes;
    for (int64_t b0 = 0; b0 < n; b0 += kBackwardRows) {
      const int64_t b1 = std::min(n, b0 + kBackwardRows), len = b1 - b0;
      const int64_t r0 = b0 + len * t / lanes, r1 = b0 + len * (t + 1) / lanes;
      if (r0 < r1) rows(r0, r1);
      if (c0 < c1) cols(b0, b1, c0, c1);
    }
  };
  run_pieces(lanes, lane);
}

}  // namespace

template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, int64_t n, int64_t d, T* dx, T* dw) {
  // dx = r w dy - (r^3 / d) x sum_k(w_k dy_k x_k)
  backward_by_row_blocks(n, d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      const double dot = weighted_dot(w, dyr, xr, d);
      const double r = double(rstd[i]);
      const T coef = T(r * r * r * dot / double(d));
      const T rt = rstd[i];
      T* dxr = dx + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dxr[j] += rt * w[j] * dyr[j] - coef * xr[j];
    }
  }, [&](int64_t i0, int64_t i1, int64_t c0, int64_t c1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      const T r = rstd[i];
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) dw[j] += dyr[j] * xr[j] * r;
    }
  });
}

template <typename T, typename Out>
void layernorm_forward(const T* x, const T* w, const T* b, int64_t n, int64_t d, T eps, Out* y, T* mean, T* rstd) {
  parallel_range(n, n * d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < d; ++j) s += double(xr[j]);
      const double mu = s / double(d);
      double var = 0;  // two-pass: no cancellation for large means
#pragma omp simd reduction(+ : var)
      for (int64_t j = 0; j < d; ++j) var += (double(xr[j]) - mu) * (double(xr[j]) - mu);
      const T m = T(mu), r = T(1.0 / std::sqrt(var / double(d) + double(eps)));
      mean[i] = m;
      rstd[i] = r;
      Out* yr = y + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) store_out(yr + j, (xr[j] - m) * r * w[j] + b[j]);
    }
  });
}

template <typename T>
void layernorm_backward(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, int64_t n, int64_t d,
                        T* dx, T* dw, T* db) {
  // xhat = (x - mean) r, g = w dy: dx = r (g - mean(g) - xhat mean(g xhat))
  backward_by_row_blocks(n, d, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      const T m = mean[i], r = rstd[i];
      const GradSums sums = layernorm_grad_sums(w, dyr, xr, m, r, d);
      const T mg = T(sums.g / double(d)), mgx = T(sums.gx / double(d));
      T* dxr = dx + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        const T xhat = (xr[j] - m) * r;
        dxr[j] += r * (w[j] * dyr[j] - mg - xhat * mgx);
      }
    }
  }, [&](int64_t i0, int64_t i1, int64_t c0, int64_t c1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T* xr = x + i * d;
      const T* dyr = dy + i * d;
      const T m = mean[i], r = rstd[i];
#pragma omp simd
      for (int64_t j = c0; j < c1; ++j) {
        dw[j] += dyr[j] * ((xr[j] - m) * r);
        db[j] += dyr[j];
      }
    }
  });
}

#define MT_INSTANTIATE_NORM_FORWARD(T, Out)                                                                 \
  template void rmsnorm_forward<T, Out>(const T*, const T*, int64_t, int64_t, T, Out*, T*);              \
  template void layernorm_forward<T, Out>(const T*, const T*, const T*, int64_t, int64_t, T, Out*, T*, T*);
MT_INSTANTIATE_NORM_FORWARD(float, uint16_t)
#define MT_INSTANTIATE(T)                                                                                   \
  MT_INSTANTIATE_NORM_FORWARD(T, T)                                                                     \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);   \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                      T*, T*, T*);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE
#undef MT_INSTANTIATE_NORM_FORWARD

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
