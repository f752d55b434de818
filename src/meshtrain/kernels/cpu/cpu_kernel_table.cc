// The host's KernelTable: each entry checks the tensors and calls the typed
// kernel of cpu/ for their dtype (f32 for training, f64 for gradient checks).
#include <mutex>

#include "meshtrain/kernels/cpu/activation.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/embedding.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/norm.h"
#include "meshtrain/kernels/kernel_table.h"

namespace meshtrain::kernels {

namespace {

// Calls fn(T{}) with T the C++ type of a floating dtype the CPU kernels run.
template <typename Fn>
decltype(auto) with_float_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: return fn(float{});
    case DType::F64: return fn(double{});
    default: MT_THROW(ConfigError, "the CPU kernels compute in f32 or f64, not ", dtype_name(t));
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.template data<T>() : nullptr;
}

// Rows of a [rows, features] tensor, any rank: everything but the last dim.
int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.dim(t.rank() - 1); }
int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(t.rank() - 1); }

void same_numel(const Tensor& a, const Tensor& b, const char* op) {
  MT_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype(), op, ": ", a.shape().str(), " ", dtype_name(a.dtype()),
           " vs ", b.shape().str(), " ", dtype_name(b.dtype()));
}

class CpuKernels final : public KernelTable {
 public:
  Device device() const override { return Device::Cpu; }

  void gemm(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, double beta,
            const Tensor& c) const override {
    const int64_t M = rows_of(c), N = cols_of(c);
    const int64_t K = ta ? rows_of(a) : cols_of(a);
    MT_CHECK((ta ? cols_of(a) : rows_of(a)) == M && (tb ? cols_of(b) : rows_of(b)) == K &&
                 (tb ? rows_of(b) : cols_of(b)) == N,
             "gemm shapes: a ", a.shape().str(), (ta ? "^T" : ""), " b ", b.shape().str(), (tb ? "^T" : ""), " c ",
             c.shape().str());
    with_float_type(c.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::gemm<T>(ta, tb, M, N, K, T(alpha), ptr<T>(a), ptr<T>(b), T(beta), ptr<T>(c));
    });
  }

  void add_row_bias(const Tensor& y, const Tensor& bias) const override {
    const int64_t n = rows_of(y), out = cols_of(y);
    MT_CHECK(bias.numel() == out, "bias of ", bias.numel(), " for rows of ", out);
    with_float_type(y.dtype(), [&](auto z) {
      using T = decltype(z);
      T* yp = ptr<T>(y);
      const T* b = ptr<T>(bias);
      for (int64_t i = 0; i < n; ++i) {
        T* row = yp + i * out;
#pragma omp simd
        for (int64_t j = 0; j < out; ++j) row[j] += b[j];
      }
    });
  }

  void bias_grad(const Tensor& dbias, const Tensor& dy) const override {
    const int64_t n = rows_of(dy), out = cols_of(dy);
    MT_CHECK(dbias.numel() == out, "bias grad of ", dbias.numel(), " for rows of ", out);
    with_float_type(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      T* db = ptr<T>(dbias);
      const T* d = ptr<T>(dy);
      for (int64_t i = 0; i < n; ++i) {
        const T* row = d + i * out;
#pragma omp simd
        for (int64_t j = 0; j < out; ++j) db[j] += row[j];
      }
    });
  }

  void add(const Tensor& y, const Tensor& x) const override {
    same_numel(y, x, "add");
    with_float_type(y.dtype(), [&](auto z) {
      using T = decltype(z);
      add_inplace<T>(ptr<T>(y), ptr<T>(x), y.numel());
    });
  }

  void copy(const Tensor& dst, const Tensor& src) const override {
    same_numel(dst, src, "copy");
    if (dst.numel() > 0 && dst.raw() != src.raw()) std::memcpy(dst.raw(), src.raw(), dst.nbytes());
  }

  void fill(const Tensor& y, double value) const override {
    if (value == 0.0) {
      if (y.numel() > 0) std::memset(y.raw(), 0, y.nbytes());
      return;
    }
    with_float_type(y.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::fill<T>(ptr<T>(y), T(value), y.numel());
    });
  }

  double sum_squares(const Tensor& x) const override {
    return with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      return kernels::sum_squares<T>(ptr<T>(x), x.numel());
    });
  }

  bool all_finite(const Tensor& x) const override {
    return with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      return kernels::all_finite<T>(ptr<T>(x), x.numel());
    });
  }

  void embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out) const override {
    with_float_type(out.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::embedding_forward<T>(ids, rows_of(out), ptr<T>(table), rows_of(table), cols_of(table), ptr<T>(out));
    });
  }

  void embedding_backward(const int32_t* ids, const Tensor& dout, const Tensor& dtable) const override {
    with_float_type(dout.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::embedding_backward<T>(ids, rows_of(dout), ptr<T>(dout), rows_of(dtable), cols_of(dtable),
                                     ptr<T>(dtable));
    });
  }

  void norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) const override {
    with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      if (!mean.defined())
        rmsnorm_forward<T>(ptr<T>(x), ptr<T>(w), rows_of(x), cols_of(x), T(eps), ptr<T>(y), ptr<T>(rstd));
      else
        layernorm_forward<T>(ptr<T>(x), ptr<T>(w), ptr<T>(b), rows_of(x), cols_of(x), T(eps), ptr<T>(y),
                             ptr<T>(mean), ptr<T>(rstd));
    });
  }

  void norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                     const Tensor& dx, const Tensor& dw, const Tensor& db) const override {
    with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      if (!mean.defined())
        rmsnorm_backward<T>(ptr<T>(x), ptr<T>(w), ptr<T>(rstd), ptr<T>(dy), rows_of(x), cols_of(x), ptr<T>(dx),
                            ptr<T>(dw));
      else
        layernorm_backward<T>(ptr<T>(x), ptr<T>(w), ptr<T>(mean), ptr<T>(rstd), ptr<T>(dy), rows_of(x),
                              cols_of(x), ptr<T>(dx), ptr<T>(dw), ptr<T>(db));
    });
  }

  void rope(const Tensor& x, const int32_t* positions, int64_t heads, int64_t head_dim, const RopeTable& table,
            bool inverse) const override {
    with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      rope_apply<T>(ptr<T>(x), positions, rows_of(x), heads, head_dim, table, inverse);
    });
  }

  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) const override {
    with_float_type(out.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::swiglu_forward<T>(ptr<T>(gate), ptr<T>(up), out.numel(), ptr<T>(out));
    });
  }

  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
                       const Tensor& dup) const override {
    with_float_type(dout.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::swiglu_backward<T>(ptr<T>(gate), ptr<T>(up), ptr<T>(dout), dout.numel(), ptr<T>(dgate), ptr<T>(dup));
    });
  }

  void gelu_forward(const Tensor& x, const Tensor& y) const override {
    with_float_type(y.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::gelu_forward<T>(ptr<T>(x), y.numel(), ptr<T>(y));
    });
  }

  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const override {
    with_float_type(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::gelu_backward<T>(ptr<T>(x), ptr<T>(dy), dy.numel(), ptr<T>(dx));
    });
  }

  void attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const int32_t* segments, double scale, const Tensor& out, const Tensor& lse) const override {
    with_float_type(q.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::attention_forward<T>(s, ptr<T>(q), ptr<T>(k), ptr<T>(v), segments, T(scale), ptr<T>(out),
                                    ptr<T>(lse));
    });
  }

  void attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                          const int32_t* segments, double scale, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) const override {
    with_float_type(q.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::attention_backward<T>(s, ptr<T>(q), ptr<T>(k), ptr<T>(v), segments, T(scale), ptr<T>(out),
                                     ptr<T>(lse), ptr<T>(dout), ptr<T>(dq), ptr<T>(dk), ptr<T>(dv));
    });
  }

  CrossEntropyResult cross_entropy(const Tensor& logits, const int32_t* targets) const override {
    return with_float_type(logits.dtype(), [&](auto z) {
      using T = decltype(z);
      return cross_entropy_forward<T>(ptr<T>(logits), targets, rows_of(logits), cols_of(logits));
    });
  }

  CrossEntropyResult cross_entropy_backward(const Tensor& logits, const int32_t* targets, double grad_scale,
                                            const Tensor& dlogits) const override {
    return with_float_type(logits.dtype(), [&](auto z) {
      using T = decltype(z);
      return cross_entropy_forward_backward<T>(ptr<T>(logits), targets, rows_of(logits), cols_of(logits),
                                               T(grad_scale), ptr<T>(dlogits));
    });
  }

  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWHyper& h,
             double grad_scale) const override {
    MT_CHECK(param.numel() == grad.numel() && param.numel() == m.numel() && param.numel() == v.numel(),
             "adamw slices differ in length");
    MT_CHECK(param.dtype() == grad.dtype() && param.dtype() == m.dtype() && param.dtype() == v.dtype(),
             "adamw: the CPU kernel runs one dtype for parameters, gradients and moments");
    with_float_type(param.dtype(), [&](auto z) {
      using T = decltype(z);
      adamw_step<T>(ptr<T>(param), ptr<T>(grad), ptr<T>(m), ptr<T>(v), param.numel(), h, T(grad_scale));
    });
  }
};

const CpuKernels cpu_kernels;
std::mutex registry_mu;
const KernelTable* registry[2] = {&cpu_kernels, nullptr};

}  // namespace

const KernelTable& kernels_for(Device device) {
  std::lock_guard<std::mutex> lock(registry_mu);
  const KernelTable* t = registry[int(device)];
  MT_REQUIRE(ConfigError, t != nullptr, "no kernels for device ", device_name(device), " in this build");
  return *t;
}

void register_kernels(Device device, const KernelTable* table) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry[int(device)] = table;
}

}  // namespace meshtrain::kernels
