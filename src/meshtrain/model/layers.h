// Building blocks with explicit forward/backward: Linear and Norm. Backward
// ACCUMULATES into parameter gradients. Arrays are row-major [n, features].
#pragma once

#include <cstdint>

#include "meshtrain/model/model_config.h"
#include "meshtrain/model/parameters.h"

namespace meshtrain::model {

template <typename T>
struct Linear {
  Parameter* weight = nullptr;  // [out, in]
  Parameter* bias = nullptr;    // [out] or null
  int64_t in = 0, out = 0;

  // y[n, out] = x[n, in] W^T + b, or y += ... when accumulate_y (fuses the
  // residual add into the GEMM instead of a separate pass).
  void forward(const T* x, int64_t n, T* y, bool accumulate_y = false) const;
  // dW += dy^T x, db += colsum(dy); dx = dy W (dx += dy W when accumulate_dx).
  void backward(const T* x, const T* dy, int64_t n, T* dx, bool accumulate_dx) const;
};

template <typename T>
struct Norm {
  NormKind kind = NormKind::RMSNorm;
  Parameter* weight = nullptr;  // [d]
  Parameter* bias = nullptr;    // [d], LayerNorm only
  int64_t d = 0;
  T eps = T(1e-5);

  // mean is unused (may be null) for RMSNorm.
  void forward(const T* x, int64_t n, T* y, T* mean, T* rstd) const;
  // dx += d(norm)/dx . dy (residual-stream accumulate), dw/db accumulate.
  void backward(const T* x, const T* mean, const T* rstd, const T* dy, int64_t n, T* dx) const;
};

}  // namespace meshtrain::model
