// The host's KernelTable: each entry checks the tensors and calls the typed
// kernel of cpu/ for their dtype (f32 for training, f64 for gradient checks).
#include <algorithm>
#include <array>
#include <mutex>
#include <type_traits>
#include <vector>

#include "meshtrain/kernels/cpu/activation.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/embedding.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/half_gemm.h"
#include "meshtrain/kernels/cpu/moe_rows.h"
#include "meshtrain/kernels/cpu/norm.h"
#include "meshtrain/kernels/cpu/vocab_parallel.h"
#include "meshtrain/kernels/cpu/cpu_kernel_table.h"

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
  if constexpr (std::is_same_v<T, uint16_t>) {  // bf16 bits
    MT_CHECK(!t.defined() || t.dtype() == DType::BF16, "expected a bf16 tensor, got ", dtype_name(t.dtype()));
    return t.defined() ? static_cast<uint16_t*>(t.raw()) : nullptr;
  } else {
    return t.defined() ? t.template data<T>() : nullptr;
  }
}

template <typename T>
SoftmaxState<T> state_of(const KernelTable::SoftmaxStateRef& st) {
  return {ptr<T>(st.o), ptr<T>(st.a), ptr<T>(st.l)};
}

bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }

// Converts n elements between f32/f64/bf16/f16 (same dtype: a copy).
void convert_n(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == to) {
    if (n > 0 && src != dst) std::memcpy(dst, src, size_t(n) * dtype_size(from));
    return;
  }
  auto* s16 = static_cast<const uint16_t*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  if (from == DType::F32 && to == DType::BF16) return convert_f32_to_bf16(static_cast<const float*>(src), d16, n);
  if (from == DType::BF16 && to == DType::F32) return convert_bf16_to_f32(s16, static_cast<float*>(dst), n);
  if (from == DType::F32 && to == DType::F16) return convert_f32_to_f16(static_cast<const float*>(src), d16, n);
  if (from == DType::F16 && to == DType::F32) return convert_f16_to_f32(s16, static_cast<float*>(dst), n);
  if (from == DType::F64 && to == DType::F32) {
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = float(static_cast<const double*>(src)[i]);
    return;
  }
  if (from == DType::F32 && to == DType::F64) {
    for (int64_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = static_cast<const float*>(src)[i];
    return;
  }
  MT_THROW(ConfigError, "no conversion ", dtype_name(from), " -> ", dtype_name(to), " in the CPU kernels");
}

// A small 16-bit parameter (norm weight, bias) widened for f32 math: the
// mixed policies store every parameter in 16 bits, elementwise math runs in f32.
std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  convert_n(t.raw(), t.dtype(), out.data(), DType::F32, t.numel());
  return out;
}

// The parameter's data as T: itself when it has type T, else (16-bit under
// f32 activations) its widened copy kept in `keep`.
template <typename T>
const T* param_as(const Tensor& p, std::vector<float>& keep) {
  if (!p.defined() || p.dtype() == dtype_of<T>) return ptr<T>(p);
  if constexpr (std::is_same_v<T, float>) {
    keep = as_f32(p);
    return keep.data();
  } else {
    MT_THROW(ConfigError, "a ", dtype_name(p.dtype()), " parameter with ", dtype_name(dtype_of<T>), " activations");
  }
}

// Rows of a [rows, features] tensor, any rank: everything but the last dim.
int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.dim(t.rank() - 1); }
int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(t.rank() - 1); }

void same_numel(const Tensor& a, const Tensor& b, const char* op) {
  MT_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype(), op, ": ", a.shape().str(), " ", dtype_name(a.dtype()),
           " vs ", b.shape().str(), " ", dtype_name(b.dtype()));
}

// {M, N, K} of c = op(a) op(b), checked.
std::array<int64_t, 3> gemm_shape(bool ta, bool tb, const Tensor& a, const Tensor& b, const Tensor& c) {
  const int64_t M = rows_of(c), N = cols_of(c);
  const int64_t K = ta ? rows_of(a) : cols_of(a);
  MT_CHECK((ta ? cols_of(a) : rows_of(a)) == M && (tb ? cols_of(b) : rows_of(b)) == K &&
               (tb ? rows_of(b) : cols_of(b)) == N,
           "gemm shapes: a ", a.shape().str(), (ta ? "^T" : ""), " b ", b.shape().str(), (tb ? "^T" : ""), " c ",
           c.shape().str());
  return {M, N, K};
}

// f(T{}, S{}) for a kernel computing in `wide`'s dtype T whose `narrow`
// tensors are of dtype T too, or bf16 (S = uint16_t bits) where T is f32;
// `what` names the kernel and the two roles in the error.
template <typename F>
void with_bf16_or_same(const Tensor& wide, const Tensor& narrow, const char* what, F&& f) {
  if (narrow.dtype() == DType::BF16 && wide.dtype() == DType::F32) return f(float{}, uint16_t{});
  MT_CHECK(narrow.dtype() == wide.dtype(), what, ": ", dtype_name(wide.dtype()), " with ", dtype_name(narrow.dtype()),
           " (f32 with bf16, or one dtype)");
  with_float_type(wide.dtype(), [&](auto z) { f(z, z); });
}

// f(T{}, out pointer) for an elementwise kernel computing in `in`'s dtype
// T: out of dtype T, or bf16 where T is f32 (activation.h).
template <typename F>
void with_output(const Tensor& in, const Tensor& out, F&& f) {
  with_bf16_or_same(in, out, "elementwise kernel (in, out)", [&](auto z, auto o) { f(z, ptr<decltype(o)>(out)); });
}

// KernelTable::gemm_shared_b's sets as PackedGemmRowsOf<In>, run by gemm.h's.
template <typename In>
void shared_b(bool ta, bool tb, double alpha, const std::vector<KernelTable::GemmRows>& rows, const Tensor& b) {
  std::vector<PackedGemmRowsOf<In>> sets;
  int64_t N = 0, K = 0;
  for (const KernelTable::GemmRows& r : rows) {
    const auto [m, n, k] = gemm_shape(ta, tb, r.a, b, r.c);
    N = n, K = k;
    sets.push_back({m, ptr<In>(r.a), float(r.beta), ptr<float>(r.c)});
  }
  kernels::gemm_shared_b(ta, tb, sets.data(), int(sets.size()), N, K, float(alpha), ptr<In>(b));
}

// Columns [col, col + w) of `wide` [M, K] and `narrow` [M, w]: narrow = those
// columns (to_narrow) or those columns = narrow.
void column_copy(const Tensor& wide, const Tensor& narrow, int64_t col, bool to_narrow) {
  const int64_t M = rows_of(wide), K = cols_of(wide), w = cols_of(narrow);
  MT_CHECK(wide.dtype() == narrow.dtype() && rows_of(narrow) == M && col >= 0 && col + w <= K, "column copy: ",
           narrow.shape().str(), " and columns ", col, "+ of ", wide.shape().str());
  const size_t es = dtype_size(wide.dtype()), row = size_t(w) * es;
  auto* wp = static_cast<char*>(wide.raw()) + size_t(col) * es;
  auto* np = static_cast<char*>(narrow.raw());
  parallel_range(M, M * w, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      char* a = wp + size_t(i * K) * es;
      char* n = np + size_t(i) * row;
      if (to_narrow) std::memcpy(n, a, row);
      else std::memcpy(a, n, row);
    }
  });
}

}  // namespace

bool cpu_gemm_block_tree_runs(const std::vector<KernelTable::BlockTerm>& terms, const Tensor& c) {
  if (terms.empty() || c.dtype() != DType::F32 || active_gemm_impl() != GemmImpl::kPacked) return false;
  return std::all_of(terms.begin(), terms.end(), [&](const KernelTable::BlockTerm& t) {
    return t.a.dtype() == DType::F32 && t.b.dtype() == DType::F32 && t.k_blocks.size() == terms[0].k_blocks.size();
  });
}

namespace {

class CpuKernels final : public KernelTable {
 public:
  Device device() const override { return Device::Cpu; }

  void gemm(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, double beta,
            const Tensor& c) const override {
    const auto [M, N, K] = gemm_shape(ta, tb, a, b, c);
    if (is_half(a.dtype())) {
      // 16-bit inputs, f32 accumulate and output (the mixed policies).
      MT_CHECK(b.dtype() == a.dtype() && c.dtype() == DType::F32, "gemm: ", dtype_name(a.dtype()), " x ",
               dtype_name(b.dtype()), " -> ", dtype_name(c.dtype()), " (16-bit inputs need f32 output)");
      if (a.dtype() == DType::BF16)
        gemm_bf16(ta, tb, M, N, K, float(alpha), ptr<bf16>(a), ptr<bf16>(b), float(beta), ptr<float>(c));
      else
        gemm_f16(ta, tb, M, N, K, float(alpha), ptr<f16>(a), ptr<f16>(b), float(beta), ptr<float>(c));
      return;
    }
    with_float_type(c.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::gemm<T>(ta, tb, M, N, K, T(alpha), ptr<T>(a), ptr<T>(b), T(beta), ptr<T>(c));
    });
  }

  void gemm_onto(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, const Tensor& base,
                 const Tensor& c) const override {
    const DType in = a.dtype();
    if ((in != DType::F32 && in != DType::BF16) || b.dtype() != in || c.dtype() != DType::F32 ||
        base.dtype() != DType::F32)
      return KernelTable::gemm_onto(ta, tb, alpha, a, b, base, c);
    same_numel(base, c, "gemm_onto");
    const auto [M, N, K] = gemm_shape(ta, tb, a, b, c);
    if (in == DType::F32)
      kernels::gemm_onto(ta, tb, M, N, K, float(alpha), ptr<float>(a), ptr<float>(b), ptr<float>(base), ptr<float>(c));
    else
      kernels::gemm_onto(ta, tb, M, N, K, float(alpha), ptr<bf16>(a), ptr<bf16>(b), ptr<float>(base), ptr<float>(c));
  }

  void gemm_shared_b(bool ta, bool tb, double alpha, const std::vector<GemmRows>& rows,
                     const Tensor& b) const override {
    const DType in = b.dtype();
    const bool packable = (in == DType::F32 || in == DType::BF16) &&
                          std::all_of(rows.begin(), rows.end(), [&](const GemmRows& r) {
                            return r.a.dtype() == in && r.c.dtype() == DType::F32;
                          });
    if (!packable) return KernelTable::gemm_shared_b(ta, tb, alpha, rows, b);
    if (in == DType::F32) return shared_b<float>(ta, tb, alpha, rows, b);
    shared_b<bf16>(ta, tb, alpha, rows, b);
  }

  bool gemm_block_tree(const std::vector<BlockTerm>& terms, bool accumulate, const Tensor& c) const override {
    if (!cpu_gemm_block_tree_runs(terms, c)) return false;
    const size_t leaves = terms[0].k_blocks.size();
    std::vector<int64_t> offsets, lengths;  // term t's leaves at t * leaves
    std::vector<PackedGemmTreeTerm> packed;
    for (const BlockTerm& t : terms) {
      const int64_t k = t.ta ? rows_of(t.a) : cols_of(t.a);
      for (const auto& [offset, length] : t.k_blocks) {
        MT_CHECK(offset >= 0 && length > 0 && offset + length <= k, "gemm_block_tree: the block [", offset, ", +",
                 length, ") of k = ", k);
        offsets.push_back(offset);
        lengths.push_back(length);
      }
    }
    for (size_t i = 0; i < terms.size(); ++i) {
      const BlockTerm& t = terms[i];
      gemm_shape(t.ta, t.tb, t.a, t.b, c);  // checks op(a) [M, K] op(b) [K, N] against c [M, N]
      packed.push_back({ptr<float>(t.a), cols_of(t.a), t.ta, ptr<float>(t.b), cols_of(t.b), t.tb,
                        offsets.data() + i * leaves, lengths.data() + i * leaves});
    }
    packed_gemm_f32_tree(packed.data(), int(packed.size()), int(leaves), rows_of(c), cols_of(c), accumulate,
                         ptr<float>(c));
    return true;
  }

  void convert(const Tensor& dst, const Tensor& src) const override {
    MT_CHECK(dst.numel() == src.numel(), "convert: ", src.shape().str(), " into ", dst.shape().str());
    convert_n(src.raw(), src.dtype(), dst.raw(), dst.dtype(), dst.numel());
  }

  void add_row_bias(const Tensor& y, const Tensor& bias) const override {
    const int64_t n = rows_of(y), out = cols_of(y);
    MT_CHECK(bias.numel() == out, "bias of ", bias.numel(), " for rows of ", out);
    with_float_type(y.dtype(), [&](auto z) {
      using T = decltype(z);
      T* yp = ptr<T>(y);
      std::vector<float> keep;
      const T* b = param_as<T>(bias, keep);
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
    if (is_half(dy.dtype())) {
      // A 16-bit output gradient (the matmul operand) summed in f32.
      MT_CHECK(dbias.dtype() == DType::F32, "bias grad of 16-bit rows accumulates in f32");
      float* db = dbias.data<float>();
      std::vector<float> row(static_cast<size_t>(out));
      const size_t es = dtype_size(dy.dtype());
      for (int64_t i = 0; i < n; ++i) {
        convert_n(static_cast<const char*>(dy.raw()) + size_t(i * out) * es, dy.dtype(), row.data(), DType::F32, out);
#pragma omp simd
        for (int64_t j = 0; j < out; ++j) db[j] += row[size_t(j)];
      }
      return;
    }
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
    if (dst.numel() > 0 && dst.raw() != src.raw()) parallel_copy_bytes(dst.raw(), src.raw(), dst.nbytes());
  }

  void copy_columns(const Tensor& dst, const Tensor& src, int64_t col) const override {
    column_copy(src, dst, col, true);
  }

  void put_columns(const Tensor& dst, const Tensor& src, int64_t col) const override {
    column_copy(dst, src, col, false);
  }

  void gather_rows(const Tensor& src, const int32_t* rows, int64_t count, const Tensor& dst) const override {
    MT_CHECK(src.dtype() == dst.dtype() && src.dim(1) == dst.dim(1) && dst.dim(0) >= count, "gather_rows shapes");
    const int64_t row_bytes = src.dim(1) * int64_t(dtype_size(src.dtype()));
    if (count > 0) gather_rows_bytes(src.raw(), rows, count, row_bytes, dst.raw());
  }

  void add_rows(const Tensor& dst, const int32_t* dst_rows, const Tensor& src, const int32_t* src_rows,
                const double* w, int64_t count) const override {
    MT_CHECK(src.dtype() == dst.dtype() && src.dim(1) == dst.dim(1), "add_rows shapes");
    with_float_type(dst.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::add_rows<T>(ptr<T>(dst), dst_rows, ptr<T>(src), src_rows, w, count, dst.dim(1));
    });
  }

  void dot_rows(const Tensor& a, const int32_t* a_rows, const Tensor& b, const int32_t* b_rows, double* out,
                int64_t count) const override {
    MT_CHECK(a.dtype() == b.dtype() && a.dim(1) == b.dim(1), "dot_rows shapes");
    with_float_type(a.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::dot_rows<T>(ptr<T>(a), a_rows, ptr<T>(b), b_rows, out, count, a.dim(1));
    });
  }

  double sum_in_order(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& ranges) const override {
    const double* p = x.data<double>();
    double total = 0;
    for (const auto& [begin, count] : ranges) {
      MT_CHECK(begin >= 0 && begin + count <= x.numel(), "sum_in_order: range outside ", x.numel(), " elements");
      for (int64_t i = 0; i < count; ++i) total += p[begin + i];
    }
    return total;
  }

  MoeRouting route(const MoeRoutingConfig& cfg, const Tensor& logits) const override {
    MT_CHECK(logits.rank() == 2 && logits.dim(1) == cfg.experts, "route: logits ", logits.shape().str(), " for ",
             cfg.experts, " experts");
    if (cfg.force_balance) return balanced_routing(cfg, logits.dim(0));
    if (logits.dtype() == DType::F64) return route_tokens(cfg, logits.data<double>(), logits.dim(0));
    const std::vector<double> wide(logits.span<float>().begin(), logits.span<float>().end());
    return route_tokens(cfg, wide.data(), logits.dim(0));
  }

  void router_backward(const MoeRouting& r, const MoeRoutingConfig& cfg, const double* dgate, double aux_scale,
                       const Tensor& dlogits) const override {
    const std::vector<double> g = router_logit_grads(r, cfg, dgate, aux_scale);
    MT_CHECK(int64_t(g.size()) == dlogits.numel(), "router_backward: ", g.size(), " gradients for ",
             dlogits.shape().str());
    if (dlogits.dtype() == DType::F64) std::copy(g.begin(), g.end(), dlogits.data<double>());
    else std::copy(g.begin(), g.end(), dlogits.data<float>());
  }

  void softmax_state_init(const SoftmaxStateRef& st) const override {
    with_float_type(st.o.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::softmax_state_init<T>(state_of<T>(st), st.a.numel(), st.a.numel() ? st.o.numel() / st.a.numel() : 0);
    });
  }

  void attention_partial_forward(const AttentionShape& s, const Tensor& q, AttentionSpan qs, const Tensor& k,
                                 const Tensor& v, AttentionSpan ks, double scale,
                                 const SoftmaxStateRef& st) const override {
    with_float_type(q.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::attention_partial_forward<T>(s, ptr<T>(q), qs, ptr<T>(k), ptr<T>(v), ks, T(scale), state_of<T>(st));
    });
  }

  void softmax_state_finalize(const AttentionShape& s, int64_t qs_len, const SoftmaxStateRef& st, const Tensor& out,
                              const Tensor& lse) const override {
    with_float_type(out.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::softmax_state_finalize<T>(s, qs_len, state_of<T>(st), ptr<T>(out), ptr<T>(lse));
    });
  }

  void attention_partial_backward(const AttentionShape& s, const Tensor& q, AttentionSpan qs, const Tensor& k,
                                  const Tensor& v, AttentionSpan ks, double scale, const Tensor& out,
                                  const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                  const Tensor& dv) const override {
    with_float_type(q.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::attention_partial_backward<T>(s, ptr<T>(q), qs, ptr<T>(k), ptr<T>(v), ks, T(scale), ptr<T>(out),
                                             ptr<T>(lse), ptr<T>(dout), ptr<T>(dq), ptr<T>(dk), ptr<T>(dv));
    });
  }

  void attention_chunk_tree_backward(const AttentionShape& s, const std::vector<AttentionChunkRef>& chunks,
                                     const Tensor& k, const Tensor& v, double scale, const Tensor& dk,
                                     const Tensor& dv) const override {
    with_float_type(k.dtype(), [&](auto z) {
      using T = decltype(z);
      std::vector<AttentionChunk<T>> typed;
      for (const AttentionChunkRef& c : chunks)
        typed.push_back({ptr<T>(c.q), c.qs, c.ks, ptr<T>(c.out), ptr<T>(c.lse), ptr<T>(c.dout), ptr<T>(c.dq),
                         nullptr, nullptr, c.leaf});
      kernels::attention_chunk_tree_backward<T>(s, typed.data(), int(typed.size()), ptr<T>(k), ptr<T>(v), T(scale),
                                                ptr<T>(dk), ptr<T>(dv));
    });
  }

  void fill(const Tensor& y, double value) const override {
    if (value == 0.0) {
      if (y.numel() > 0) parallel_zero_bytes(y.raw(), y.nbytes());
      return;
    }
    with_float_type(y.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::fill<T>(ptr<T>(y), T(value), y.numel());
    });
  }

  void scale(const Tensor& y, double a) const override {
    with_float_type(y.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::scale_inplace<T>(ptr<T>(y), T(a), y.numel());
    });
  }

  double sum_squares(const Tensor& x) const override {
    return with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      return kernels::sum_squares<T>(ptr<T>(x), x.numel());
    });
  }

  void block_sum_squares(const Tensor& x, int64_t block, double* out) const override {
    MT_CHECK(block > 0, "block_sum_squares needs a positive block");
    with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::block_sum_squares<T>(ptr<T>(x), x.numel(), block, out);
    });
  }

  bool all_finite(const Tensor& x) const override {
    return with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      return kernels::all_finite<T>(ptr<T>(x), x.numel());
    });
  }

  void embedding_forward(const int32_t* ids, const Tensor& table, const Tensor& out) const override {
    if (is_half(table.dtype())) {
      // Rows of a 16-bit table widened into f32 activations.
      const int64_t n = rows_of(out), d = cols_of(out), V = rows_of(table);
      const size_t es = dtype_size(table.dtype());
      parallel_range(n, n * d, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          MT_CHECK(ids[i] >= 0 && ids[i] < V, "token id ", ids[i], " outside the vocabulary of ", V);
          convert_n(static_cast<const char*>(table.raw()) + size_t(ids[i]) * size_t(d) * es, table.dtype(),
                    out.data<float>() + i * d, DType::F32, d);
        }
      });
      return;
    }
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
    with_output(x, y, [&](auto z, auto* yp) {
      using T = decltype(z);
      // 16-bit weights (mixed policies) are widened; the math is f32.
      std::vector<float> wk, bk;
      const T* wp = param_as<T>(w, wk);
      const T* bp = param_as<T>(b, bk);
      if (!mean.defined())
        rmsnorm_forward<T>(ptr<T>(x), wp, rows_of(x), cols_of(x), T(eps), yp, ptr<T>(rstd));
      else
        layernorm_forward<T>(ptr<T>(x), wp, bp, rows_of(x), cols_of(x), T(eps), yp, ptr<T>(mean), ptr<T>(rstd));
    });
  }

  void norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                     const Tensor& dx, const Tensor& dw, const Tensor& db) const override {
    with_float_type(x.dtype(), [&](auto z) {
      using T = decltype(z);
      std::vector<float> wk;
      const T* wp = param_as<T>(w, wk);
      if (!mean.defined())
        rmsnorm_backward<T>(ptr<T>(x), wp, ptr<T>(rstd), ptr<T>(dy), rows_of(x), cols_of(x), ptr<T>(dx), ptr<T>(dw));
      else
        layernorm_backward<T>(ptr<T>(x), wp, ptr<T>(mean), ptr<T>(rstd), ptr<T>(dy), rows_of(x), cols_of(x),
                              ptr<T>(dx), ptr<T>(dw), ptr<T>(db));
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
    with_output(gate, out, [&](auto z, auto* o) {
      using T = decltype(z);
      kernels::swiglu_forward<T>(ptr<T>(gate), ptr<T>(up), out.numel(), o);
    });
  }

  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
                       const Tensor& dup) const override {
    MT_CHECK(dgate.dtype() == dup.dtype(), "swiglu_backward: gradients of two dtypes");
    with_output(dout, dgate, [&](auto z, auto* dg) {
      using T = decltype(z);
      kernels::swiglu_backward<T>(ptr<T>(gate), ptr<T>(up), ptr<T>(dout), dout.numel(), dg,
                                  static_cast<decltype(dg)>(dup.raw()));
    });
  }

  void gelu_forward(const Tensor& x, const Tensor& y) const override {
    with_output(x, y, [&](auto z, auto* o) {
      using T = decltype(z);
      kernels::gelu_forward<T>(ptr<T>(x), y.numel(), o);
    });
  }

  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) const override {
    with_output(dy, dx, [&](auto z, auto* o) {
      using T = decltype(z);
      kernels::gelu_backward<T>(ptr<T>(x), ptr<T>(dy), dy.numel(), o);
    });
  }

  void attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const int32_t* segments, double scale, const Tensor& out, const Tensor& lse) const override {
    with_bf16_or_same(lse, q, "attention (softmax state, inputs)", [&](auto z, auto in) {
      using T = decltype(z);
      using In = decltype(in);
      kernels::attention_forward<T, In>(s, ptr<In>(q), ptr<In>(k), ptr<In>(v), segments, T(scale), ptr<In>(out),
                                        ptr<T>(lse));
    });
  }

  void attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                          const int32_t* segments, double scale, const Tensor& out, const Tensor& lse,
                          const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) const override {
    with_bf16_or_same(lse, q, "attention (softmax state, inputs)", [&](auto z, auto in) {
      using T = decltype(z);
      using In = decltype(in);
      kernels::attention_backward<T, In>(s, ptr<In>(q), ptr<In>(k), ptr<In>(v), segments, T(scale), ptr<In>(out),
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

  void embedding_slice_forward(const int32_t* ids, const Tensor& table, int64_t vocab_begin, int64_t vocab_size,
                               const Tensor& out) const override {
    if (is_half(table.dtype())) {
      // Rows of a 16-bit slice (mixed policies) widened into f32 activations.
      const int64_t n = rows_of(out), d = cols_of(out), Vl = rows_of(table);
      for (int64_t i = 0; i < n; ++i)
        MT_REQUIRE(DataError, ids[i] >= 0 && ids[i] < vocab_size, "embedding: token id ", ids[i], " at position ", i,
                   " is outside the vocabulary [0, ", vocab_size, ")");
      const size_t es = dtype_size(table.dtype());
      parallel_range(n, n * d, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          float* row = out.data<float>() + i * d;
          const int64_t r = int64_t(ids[i]) - vocab_begin;
          if (r >= 0 && r < Vl)
            convert_n(static_cast<const char*>(table.raw()) + size_t(r * d) * es, table.dtype(), row, DType::F32, d);
          else
            std::memset(row, 0, sizeof(float) * size_t(d));
        }
      });
      return;
    }
    with_float_type(out.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::embedding_slice_forward<T>(ids, rows_of(out), ptr<T>(table), vocab_begin, rows_of(table), vocab_size,
                                          cols_of(table), ptr<T>(out));
    });
  }

  void embedding_slice_backward(const int32_t* ids, const Tensor& dout, int64_t vocab_begin,
                                const Tensor& dtable) const override {
    with_float_type(dout.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::embedding_slice_backward<T>(ids, rows_of(dout), ptr<T>(dout), vocab_begin, rows_of(dtable),
                                           cols_of(dtable), ptr<T>(dtable));
    });
  }

  void vocab_ce_max(const Tensor& logits, const int32_t* targets, int64_t vocab_size,
                    const Tensor& row_max) const override {
    MT_CHECK(row_max.numel() == rows_of(logits), "vocab_ce_max: ", row_max.numel(), " maxima for ", rows_of(logits),
             " rows");
    with_float_type(logits.dtype(), [&](auto z) {
      using T = decltype(z);
      kernels::vocab_ce_max<T>(ptr<T>(logits), targets, rows_of(logits), cols_of(logits), vocab_size, ptr<T>(row_max));
    });
  }

  void vocab_ce_sums(const Tensor& logits, const int32_t* targets, int64_t vocab_begin, const Tensor& row_max,
                     const Tensor& sum_exp, const Tensor& target_logit, const Tensor& exps, int64_t col_begin,
                     int64_t col_end) const override {
    const int64_t ld = cols_of(logits);
    if (col_end < 0) col_end = ld;
    MT_CHECK(0 <= col_begin && col_begin <= col_end && col_end <= ld, "vocab_ce_sums: columns [", col_begin, ", ",
             col_end, ") of ", ld);
    with_float_type(logits.dtype(), [&](auto z) {
      using T = decltype(z);
      T* const g = ptr<T>(exps);
      kernels::vocab_ce_sums<T>(ptr<T>(logits) + col_begin, targets, rows_of(logits), col_end - col_begin, ld,
                                vocab_begin + col_begin, ptr<T>(row_max), ptr<T>(sum_exp), ptr<T>(target_logit),
                                g ? g + col_begin : nullptr);
    });
  }

  CrossEntropyResult vocab_ce_finish(const int32_t* targets, int64_t vocab_begin, const Tensor& row_max,
                                     const Tensor& sum_exp, const Tensor& target_logit, double grad_scale,
                                     const Tensor& dlogits) const override {
    return with_float_type(row_max.dtype(), [&](auto z) {
      using T = decltype(z);
      return kernels::vocab_ce_finish<T>(targets, row_max.numel(), dlogits.defined() ? cols_of(dlogits) : 0,
                                         vocab_begin, ptr<T>(row_max), ptr<T>(sum_exp), ptr<T>(target_logit),
                                         T(grad_scale), ptr<T>(dlogits));
    });
  }

  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWHyper& h,
             double grad_scale, const Tensor& compute_copy) const override {
    MT_CHECK(param.numel() == grad.numel() && param.numel() == m.numel() && param.numel() == v.numel(),
             "adamw slices differ in length");
    MT_CHECK(param.dtype() == grad.dtype() && param.dtype() == m.dtype() && param.dtype() == v.dtype(),
             "adamw: the CPU kernel runs one dtype for parameters, gradients and moments");
    // bf16 copies of f32 come out of the update's pass; others are converted after.
    const bool fused = compute_copy.defined() && compute_copy.dtype() == DType::BF16 && param.dtype() == DType::F32;
    MT_CHECK(!compute_copy.defined() || compute_copy.numel() == param.numel(), "adamw: a compute copy of ",
             compute_copy.numel(), " elements for ", param.numel());
    with_float_type(param.dtype(), [&](auto z) {
      using T = decltype(z);
      adamw_step<T>(ptr<T>(param), ptr<T>(grad), ptr<T>(m), ptr<T>(v), param.numel(), h, T(grad_scale),
                    fused ? static_cast<uint16_t*>(compute_copy.raw()) : nullptr);
    });
    if (compute_copy.defined() && !fused) convert(compute_copy, param);
  }
};

}  // namespace

const KernelTable& cpu_kernel_table() {
  static const CpuKernels table;
  return table;
}

}  // namespace meshtrain::kernels
