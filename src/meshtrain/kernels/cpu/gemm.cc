// GEMM. Row-major: A [M,K] (or [K,M] when trans_a), B [K,N] (or [N,K] when
// trans_b), C [M,N].  C = alpha * op(A) @ op(B) + beta * C.
// f32 runs the packed GEMM (packed_gemm.h) or oneDNN (gemm_choice.cc picks);
// bf16 goes through oneDNN's matmul primitive; transposes are memory
// formats (ab / ba), alpha an output scale, beta a sum post-op. bf16 falls
// back to widening + the f32 GEMM where oneDNN has no bf16 matmul (probed once).
// f64 is a blocked reference loop for gradient-check tests.
#include "meshtrain/kernels/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <type_traits>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/isa.h"
#include "meshtrain/kernels/cpu/packed_gemm.h"
#include "meshtrain/kernels/cpu/scratch.h"

namespace meshtrain::kernels {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Key {
  int64_t m, n, k, lda;
  uint32_t alpha_bits, beta_bits;
  int threads;
  bool trans_a, trans_b, bf16;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.m));
    mix(uint64_t(k.n));
    mix(uint64_t(k.k));
    mix(uint64_t(k.lda));
    mix(k.alpha_bits);
    mix(k.beta_bits);
    mix(uint64_t(k.threads));
    mix(uint64_t(k.trans_a) | uint64_t(k.trans_b) << 1 | uint64_t(k.bf16) << 2);
    return size_t(h);
  }
};

struct Entry {
  dnnl::matmul prim;
  memory a, b, c, scratch;
  size_t scratch_bytes = 0;
};

// MESHTRAIN_ISA caps oneDNN too (so one variable forces a whole ISA level),
// unless oneDNN's own variable is set. oneDNN reads its cap once, before
// its first primitive, so this runs before any engine is created.
void cap_onednn_isa_once() {
  static const bool done = [] {
    if (std::getenv("MESHTRAIN_ISA") == nullptr || std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr ||
        std::getenv("DNNL_MAX_CPU_ISA") != nullptr)
      return true;
    const Isa isa = active_isa();
    if (isa == Isa::kAvx2) dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    if (isa == Isa::kScalar) dnnl::set_max_cpu_isa(dnnl::cpu_isa::sse41);  // oneDNN's lowest level
    return true;
  }();
  (void)done;
}

// Per thread: with the threads backend every rank is a thread with its own
// OpenMP team size, and a primitive is created for the team size it runs with.
struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache;
  Scratch scratch;
};

ThreadState& thread_state() {
  cap_onednn_isa_once();
  thread_local ThreadState state;
  return state;
}

// Varying alpha/beta values would grow the cache without bound; cap it.
constexpr size_t kMaxCachedPrimitives = 512;

Entry& get_entry(ThreadState& st, const Key& key, float alpha, float beta) {
  auto it = st.cache.find(key);
  if (it != st.cache.end()) return *it->second;
  if (st.cache.size() >= kMaxCachedPrimitives) st.cache.clear();

  const dt in_dt = key.bf16 ? dt::bf16 : dt::f32;
  // op(A) rows are `lda` apart (trans_a: columns of A, one element apart):
  // the dense formats ab / ba, or a block of rows of a larger op(A).
  const memory::dims a_strides = key.trans_a ? memory::dims{1, key.lda} : memory::dims{key.lda, 1};
  memory::desc a_md({key.m, key.k}, in_dt, a_strides);
  memory::desc b_md({key.k, key.n}, in_dt, key.trans_b ? tag::ba : tag::ab);
  memory::desc c_md({key.m, key.n}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, st.engine);
  } catch (const dnnl::error& e) {
    MT_THROW(InternalError, "oneDNN matmul unavailable for M=", key.m, " N=", key.n, " K=", key.k,
             key.bf16 ? " bf16" : " f32", ": ", e.what());
  }
  auto entry = std::make_unique<Entry>();
  entry->prim = dnnl::matmul(pd);
  entry->a = memory(a_md, st.engine, nullptr);
  entry->b = memory(b_md, st.engine, nullptr);
  entry->c = memory(c_md, st.engine, nullptr);
  entry->scratch_bytes = pd.scratchpad_desc().get_size();
  entry->scratch = memory(pd.scratchpad_desc(), st.engine, nullptr);
  return *st.cache.emplace(key, std::move(entry)).first->second;
}

// C = beta * C for the degenerate K == 0 case (oneDNN rejects empty K).
void scale_c(int64_t M, int64_t N, float beta, float* C) {
  for (int64_t i = 0; i < M * N; ++i) C[i] = beta == 0.0f ? 0.0f : beta * C[i];
}

// One oneDNN matmul on this thread's team: C[M,N] = alpha op(A) op(B) + beta C,
// op(A)'s rows `lda` elements apart.
void run_matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda, int threads, float alpha,
                const void* A, const void* B, float beta, float* C, bool bf16) {
  ThreadState& st = thread_state();
  const Key key{M, N, K, lda, std::bit_cast<uint32_t>(alpha), std::bit_cast<uint32_t>(beta), threads,
                trans_a, trans_b, bf16};
  Entry& e = get_entry(st, key, alpha, beta);
  e.a.set_data_handle(const_cast<void*>(A));
  e.b.set_data_handle(const_cast<void*>(B));
  e.c.set_data_handle(C);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
  if (e.scratch_bytes > 0) {
    e.scratch.set_data_handle(st.scratch.get(e.scratch_bytes));
    args.emplace(DNNL_ARG_SCRATCHPAD, e.scratch);
  }
  e.prim.execute(st.stream, args);
  st.stream.wait();
}

thread_local bool t_thread_invariant = false;

// Thread-count-invariant GEMM: C in fixed blocks of kInvariantRows rows, each
// computed whole (all of K) by one thread (a piece of the team, compute_team.h),
// so no sum is ever split by team size. In a piece oneDNN runs single-threaded.
constexpr int64_t kInvariantRows = 256;

void invariant_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                    const void* B, float beta, float* C, bool bf16) {
  const size_t in_size = bf16 ? sizeof(uint16_t) : sizeof(float);
  const int64_t lda = trans_a ? M : K, blocks = (M + kInvariantRows - 1) / kInvariantRows;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  run_pieces(blocks, [&](int64_t b, int) {
    const int64_t i0 = b * kInvariantRows, rows = std::min(kInvariantRows, M - i0);
    const char* a = static_cast<const char*>(A) + size_t(trans_a ? i0 : i0 * K) * in_size;
    try {
      run_matmul(trans_a, trans_b, rows, N, K, lda, 1, alpha, a, B, beta, C + i0 * N, bf16);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
}

// False when there is nothing to multiply (C was scaled by beta if K == 0).
bool has_products(int64_t M, int64_t N, int64_t K, float beta, float* C) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  if (M == 0 || N == 0) return false;
  if (K == 0) scale_c(M, N, beta, C);
  return K > 0;
}

void onednn_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                 const void* B, float beta, float* C, bool bf16) {
  if (!has_products(M, N, K, beta, C)) return;
  if (t_thread_invariant) return invariant_gemm(trans_a, trans_b, M, N, K, alpha, A, B, beta, C, bf16);
  run_matmul(trans_a, trans_b, M, N, K, trans_a ? M : K, omp_get_max_threads(), alpha, A, B, beta, C, bf16);
}

}  // namespace

void set_thread_invariant_gemm(bool on) { t_thread_invariant = on; }
bool thread_invariant_gemm() { return t_thread_invariant; }

bool bf16_gemm_is_native() {
  static const bool native = [] {
    ThreadState& st = thread_state();
    const memory::desc a({64, 64}, dt::bf16, tag::ab), b({64, 64}, dt::bf16, tag::ab), c({64, 64}, dt::f32, tag::ab);
    // The C API answers with a status; the C++ constructor would throw.
    dnnl_primitive_desc_t pd = nullptr;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &a.data, &b.data, nullptr, &c.data) != dnnl_success) return false;
    const bool ok = dnnl_primitive_desc_create(&pd, &md, nullptr, st.engine.get(), nullptr) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    return ok;
  }();
  return native;
}

void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                       const bf16* B, float beta, float* C) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  thread_local std::vector<float> a32, b32;  // grow-only: repeated shapes touch no fresh pages
  if (a32.size() < size_t(M * K)) a32.resize(size_t(M * K));
  if (b32.size() < size_t(K * N)) b32.resize(size_t(K * N));
  convert_bf16_to_f32(reinterpret_cast<const uint16_t*>(A), a32.data(), M * K);
  convert_bf16_to_f32(reinterpret_cast<const uint16_t*>(B), b32.data(), K * N);
  gemm<float>(trans_a, trans_b, M, N, K, alpha, a32.data(), b32.data(), beta, C);
}

void gemm_f32_using(GemmImpl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, const float* B, float beta, float* C) {
  if (impl == GemmImpl::kOnednn) return onednn_gemm(trans_a, trans_b, M, N, K, alpha, A, B, beta, C, false);
  // Thread-count invariant by construction: reproducible mode needs no row blocks.
  if (has_products(M, N, K, beta, C)) packed_gemm_f32(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

namespace {

// Products sharing op(B) through the packed GEMM of their input type.
void packed_rows(bool trans_a, bool trans_b, const PackedGemmRows* rows, int count, int64_t N, int64_t K, float alpha,
                 const float* B) {
  packed_gemm_f32_rows(trans_a, trans_b, rows, count, N, K, alpha, B);
}
void packed_rows(bool trans_a, bool trans_b, const PackedGemmRowsBf16* rows, int count, int64_t N, int64_t K,
                 float alpha, const bf16* B) {
  packed_gemm_bf16_rows(trans_a, trans_b, rows, count, N, K, alpha, B);
}
bool packed_for(const float*) { return active_gemm_impl() == GemmImpl::kPacked; }
bool packed_for(const bf16*) { return bf16_gemm_is_packed(); }
// One product the other way (oneDNN, or the widened bf16 fallback).
void unpacked_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   const float* B, float beta, float* C) {
  onednn_gemm(trans_a, trans_b, M, N, K, alpha, A, B, beta, C, false);
}
void unpacked_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
                   const bf16* B, float beta, float* C) {
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

}  // namespace

// Each set's C = alpha op(A_i) op(B) + beta_i C_in (C_in: C unless set):
// one pass over op(B) in the packed GEMM, one product per set otherwise.
template <typename In>
void gemm_shared_b(bool trans_a, bool trans_b, const PackedGemmRowsOf<In>* rows, int count, int64_t N, int64_t K,
                   float alpha, const In* B) {
  const bool packed = packed_for(B);
  bool products = false;
  for (int s = 0; s < count; ++s) {
    const PackedGemmRowsOf<In>& r = rows[s];
    // Only the packed GEMM reads C_in in place (and only when it has k blocks).
    if ((!packed || K == 0) && r.C_in && r.C_in != r.C && r.beta != 0.0f)
      std::memcpy(r.C, r.C_in, size_t(r.M * N) * sizeof(float));
    if (!packed)
      unpacked_gemm(trans_a, trans_b, r.M, N, K, alpha, r.A, B, r.beta, r.C);
    else
      products = has_products(r.M, N, K, r.beta, r.C) || products;
  }
  if (products) packed_rows(trans_a, trans_b, rows, count, N, K, alpha, B);
}

template <typename In>
void gemm_onto(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const In* A, const In* B,
               const float* C_in, float* C) {
  const PackedGemmRowsOf<In> rows{M, A, 1.0f, C, C_in};
  gemm_shared_b(trans_a, trans_b, &rows, 1, N, K, alpha, B);
}

#define MT_INSTANTIATE(In)                                                                                         \
  template void gemm_shared_b<In>(bool, bool, const PackedGemmRowsOf<In>*, int, int64_t, int64_t, float, const In*); \
  template void gemm_onto<In>(bool, bool, int64_t, int64_t, int64_t, float, const In*, const In*, const float*, float*);
MT_INSTANTIATE(float)
MT_INSTANTIATE(bf16)
#undef MT_INSTANTIATE

bool bf16_gemm_is_packed() { return bf16_gemm_is_packed(thread_invariant_gemm()); }

bool bf16_gemm_is_packed(bool reproducible) {
  // Where the CPU has AMX, oneDNN's bf16 kernels use it and are the faster
  // ones (about 2x the packed GEMM's VDPBF16PS tile per core), but the order
  // of their sums over k follows the shape, which tensor and context
  // parallelism split: reproducible mode keeps the packed GEMM, whose sums
  // over k do not depend on M or N.
  static const bool amx = __builtin_cpu_supports("amx-bf16");
  return packed_gemm_bf16_available() && active_gemm_impl() == GemmImpl::kPacked &&
         (!amx || reproducible);
}

const char* bf16_gemm_name() {
  return bf16_gemm_is_packed() ? "packed" : bf16_gemm_is_native() ? "onednn" : "widened";
}

void gemm_bf16_using(GemmImpl impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const bf16* A, const bf16* B, float beta, float* C) {
  if (impl == GemmImpl::kPacked && packed_gemm_bf16_available()) {
    if (has_products(M, N, K, beta, C)) {
      const PackedGemmRowsBf16 rows{M, A, beta, C};
      packed_gemm_bf16_rows(trans_a, trans_b, &rows, 1, N, K, alpha, B);
    }
  } else if (bf16_gemm_is_native()) {
    onednn_gemm(trans_a, trans_b, M, N, K, alpha, A, B, beta, C, true);
  } else {
    gemm_bf16_widened(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
  }
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               const bf16* B, float beta, float* C) {
  gemm_bf16_using(bf16_gemm_is_packed() ? GemmImpl::kPacked : GemmImpl::kOnednn, trans_a, trans_b, M, N, K, alpha, A,
                  B, beta, C);
}

const char* gemm_library_version() {
  static const std::string v = [] {
    const dnnl_version_t* ver = dnnl_version();
    return "oneDNN " + std::to_string(ver->major) + "." + std::to_string(ver->minor) + "." +
           std::to_string(ver->patch);
  }();
  return v.c_str();
}

namespace {

// Reference path: i-k-j loop over cache blocks of op(B) rows, so the inner
// loop streams a row of C and a row of op(B) when B is not transposed.
void reference_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                    const double* B, double beta, double* C) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  // beta == 0 never reads C (it may hold garbage or NaN).
  for (int64_t i = 0; i < M * N; ++i) C[i] = beta == 0.0 ? 0.0 : beta * C[i];
  auto a_at = [&](int64_t i, int64_t k) { return trans_a ? A[k * M + i] : A[i * K + k]; };
  auto b_at = [&](int64_t k, int64_t j) { return trans_b ? B[j * K + k] : B[k * N + j]; };
  constexpr int64_t kBlock = 64;
  for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
    const int64_t k1 = std::min(K, k0 + kBlock);
    for (int64_t j0 = 0; j0 < N; j0 += kBlock) {
      const int64_t j1 = std::min(N, j0 + kBlock);
      for (int64_t i = 0; i < M; ++i) {
        double* c = C + i * N;
        for (int64_t k = k0; k < k1; ++k) {
          const double a = alpha * a_at(i, k);
          for (int64_t j = j0; j < j1; ++j) c[j] += a * b_at(k, j);
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B, T beta,
          T* C) {
  if constexpr (std::is_same_v<T, float>)
    gemm_f32_using(active_gemm_impl(), trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
  else
    reference_gemm(trans_a, trans_b, M, N, K, alpha, A, B, beta, C);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, const float*, float, float*);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, const double*, double,
                           double*);

}  // namespace meshtrain::kernels
