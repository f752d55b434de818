// Kernel microbenchmarks on the bench-small transformer shapes (Llama-style:
// d_model 512, 8 heads of 64, 4 KV heads, SwiGLU hidden 1408, vocab 8192,
// 8 x 256 = 2048 tokens per micro-batch). GEMMs report FLOPS (2 M N K per
// call), the other kernels bytes/s (compulsory traffic: each array read or
// written once). Every benchmark takes the OpenMP team size as its last arg.
// The f32 GEMMs run both implementations (packed and oneDNN, gemm.h: the
// `impl` arg, 1 = packed); bf16 runs oneDNN (or its widened fallback).
//
//   build-kernels/bench/kernels_bench --benchmark_filter='Gemm'
#include <benchmark/benchmark.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "meshtrain/kernels/cpu/fma_peak.h"
#include "meshtrain/core/dtype.h"
#include "meshtrain/kernels/cpu/activation.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/cross_entropy.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/embedding.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/norm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "meshtrain/kernels/cpu/vocab_parallel.h"

namespace mk = meshtrain::kernels;
using meshtrain::bf16;

namespace {

constexpr int64_t kTokens = 2048, kModel = 512, kHeads = 8, kKvHeads = 4, kHeadDim = 64, kHidden = 1408,
                  kVocab = 8192;

struct Linear {
  const char* name;
  int64_t in, out;
};
// Distinct linear shapes; `count` in kLayerMix gives how often each occurs.
const Linear kLinears[] = {{"qo", kModel, kModel},
                           {"kv", kModel, kKvHeads * kHeadDim},
                           {"gate_up", kModel, kHidden},
                           {"down", kHidden, kModel},
                           {"head", kModel, kVocab}};
// One transformer layer (q, k, v, o, gate, up, down) plus the LM head.
const int kLayerMix[] = {2, 2, 2, 1, 1};

enum Pass { kForward = 0, kGradInput = 1, kGradWeight = 2 };
const char* kPassNames[] = {"fwd", "dX", "dW"};

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(gen);
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16(v[i]);
  return b;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Buffers for one linear layer: x [T,in], W [out,in], y/dy [T,out], dx [T,in], dW [out,in].
template <typename In>
struct LinearBuffers {
  std::vector<In> x, w, dy;
  std::vector<float> y, dx, dw;
  explicit LinearBuffers(const Linear& l) {
    auto conv = [](std::vector<float> v) {
      if constexpr (std::is_same_v<In, float>)
        return v;
      else
        return to_bf16(v);
    };
    x = conv(random_floats(kTokens * l.in, 1));
    w = conv(random_floats(l.out * l.in, 2));
    dy = conv(random_floats(kTokens * l.out, 3));
    y.resize(static_cast<size_t>(kTokens * l.out));
    dx.resize(static_cast<size_t>(kTokens * l.in));
    dw.assign(size_t(l.out * l.in), 0.0f);
  }
};

template <typename In>
void gemm_any(mk::GemmImpl impl, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const In* A,
              const In* B, float beta, float* C) {
  if constexpr (std::is_same_v<In, float>)
    mk::gemm_f32_using(impl, ta, tb, M, N, K, alpha, A, B, beta, C);
  else
    mk::gemm_bf16_using(impl, ta, tb, M, N, K, alpha, A, B, beta, C);
}

// Args of the GEMM benchmarks: implementation, then threads. bf16 packed
// only where the CPU has AVX-512 BF16.
std::vector<mk::GemmImpl> impls_of(bool f32) {
  if (f32 || mk::packed_gemm_bf16_available()) return {mk::GemmImpl::kPacked, mk::GemmImpl::kOnednn};
  return {mk::GemmImpl::kOnednn};
}

// The three GEMMs of a linear layer y = x W^T (gemm.h).
template <typename In>
void run_pass(const Linear& l, Pass p, LinearBuffers<In>& b, mk::GemmImpl impl) {
  switch (p) {
    case kForward:  // y = x W^T
      gemm_any<In>(impl, false, true, kTokens, l.out, l.in, 1.0f, b.x.data(), b.w.data(), 0.0f, b.y.data());
      break;
    case kGradInput:  // dx = dy W
      gemm_any<In>(impl, false, false, kTokens, l.in, l.out, 1.0f, b.dy.data(), b.w.data(), 0.0f, b.dx.data());
      break;
    case kGradWeight:  // dW += dy^T x
      gemm_any<In>(impl, true, false, l.out, l.in, kTokens, 1.0f, b.dy.data(), b.x.data(), 1.0f, b.dw.data());
      break;
  }
}

// Args: linear index, pass, implementation (f32), threads.
template <typename In>
void BM_Gemm(benchmark::State& state) {
  const Linear& l = kLinears[state.range(0)];
  const Pass p = Pass(state.range(1));
  const mk::GemmImpl impl = mk::GemmImpl(state.range(2));
  omp_set_num_threads(int(state.range(3)));
  LinearBuffers<In> b(l);
  run_pass(l, p, b, impl);  // primitive creation, buffer growth and first touch outside the timing
  const long faults0 = minor_faults();
  for (auto _ : state) run_pass(l, p, b, impl);
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * double(kTokens) * double(l.in) * double(l.out), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["faults/iter"] =
      benchmark::Counter(double(minor_faults() - faults0), benchmark::Counter::kAvgIterations);
  state.SetLabel(std::string(l.name) + "/" + kPassNames[p] + "/" + mk::gemm_impl_name(impl));
}

template <typename In>
void gemm_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (mk::GemmImpl impl : impls_of(std::is_same_v<In, float>))
      for (int64_t li = 0; li < int64_t(std::size(kLinears)); ++li)
        for (int p = 0; p < 3; ++p) b->Args({li, p, int64_t(impl), threads});
}
BENCHMARK_TEMPLATE(BM_Gemm, float)->Apply(gemm_args<float>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_Gemm, bf16)->Apply(gemm_args<bf16>)->Unit(benchmark::kMillisecond)->UseRealTime();

// The whole GEMM mix of one layer plus the head, forward and backward: the
// FLOP-weighted throughput a training step sees from its linear layers.
// Args: implementation (f32), threads.
template <typename In>
void BM_GemmLayerMix(benchmark::State& state) {
  const mk::GemmImpl impl = mk::GemmImpl(state.range(0));
  omp_set_num_threads(int(state.range(1)));
  std::vector<LinearBuffers<In>> bufs;
  double flops = 0;
  for (const Linear& l : kLinears) bufs.emplace_back(l);
  auto run_all = [&] {
    for (size_t li = 0; li < std::size(kLinears); ++li)
      for (int rep = 0; rep < kLayerMix[li]; ++rep)
        for (int p = 0; p < 3; ++p) run_pass(kLinears[li], Pass(p), bufs[li], impl);
  };
  for (size_t li = 0; li < std::size(kLinears); ++li)
    flops += kLayerMix[li] * 3 * 2.0 * double(kTokens) * double(kLinears[li].in) * double(kLinears[li].out);
  run_all();
  for (auto _ : state) run_all();
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(mk::gemm_impl_name(impl));
}

template <typename In>
void mix_args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (mk::GemmImpl impl : impls_of(std::is_same_v<In, float>)) b->Args({int64_t(impl), threads});
}
BENCHMARK_TEMPLATE(BM_GemmLayerMix, float)->Apply(mix_args<float>)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_GemmLayerMix, bf16)->Apply(mix_args<bf16>)->Unit(benchmark::kMillisecond)->UseRealTime();

// Weight gradients of layers that read one input: q, k, v (set 0) or gate,
// up (set 1); mode 0 one packed GEMM each, mode 1 one pass over the input
// (gemm_shared_b). Args: set, mode, threads.
void BM_GemmSharedInput(benchmark::State& state) {
  const std::vector<int64_t> outs =
      state.range(0) == 0 ? std::vector<int64_t>{kModel, kKvHeads * kHeadDim, kKvHeads * kHeadDim}
                          : std::vector<int64_t>{kHidden, kHidden};
  const bool shared = state.range(1) == 1;
  omp_set_num_threads(int(state.range(2)));
  const auto x = random_floats(kTokens * kModel, 1);
  std::vector<std::vector<float>> dy, dw;
  std::vector<mk::PackedGemmRows> rows;
  double flops = 0;
  for (int64_t o : outs) {
    dy.push_back(random_floats(kTokens * o, uint32_t(2 + dy.size())));
    dw.push_back(std::vector<float>(size_t(o * kModel)));
    flops += 2.0 * double(kTokens * o * kModel);
  }
  for (size_t i = 0; i < outs.size(); ++i) rows.push_back({outs[i], dy[i].data(), 0.0f, dw[i].data()});
  for (auto _ : state) {
    if (shared)
      mk::gemm_shared_b(true, false, rows.data(), int(rows.size()), kModel, kTokens, 1.0f, x.data());
    else
      for (const auto& r : rows)
        mk::gemm_f32_using(mk::GemmImpl::kPacked, true, false, r.M, kModel, kTokens, 1.0f, r.A, x.data(), 0.0f, r.C);
  }
  state.counters["GFLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GemmSharedInput)
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Forward of layers that read one input, q, k, v (set 0) or gate, up
// (set 1): mode 0 one GEMM per layer, mode 1 one GEMM over the weights
// stacked (their rows are contiguous in a unit), N the sum of the layers'.
// The packed GEMM reads x in place (no pack of the activation), so the two
// differ only in how often x streams through the cache. Args: set, mode, threads.
void BM_GemmFusedProjection(benchmark::State& state) {
  const std::vector<int64_t> outs =
      state.range(0) == 0 ? std::vector<int64_t>{kModel, kKvHeads * kHeadDim, kKvHeads * kHeadDim}
                          : std::vector<int64_t>{kHidden, kHidden};
  const bool fused = state.range(1) == 1;
  omp_set_num_threads(int(state.range(2)));
  int64_t total = 0;
  for (int64_t o : outs) total += o;
  const auto x = random_floats(kTokens * kModel, 1), w = random_floats(total * kModel, 2);
  std::vector<float> y(size_t(kTokens * total));
  for (auto _ : state) {
    if (fused) {
      mk::gemm<float>(false, true, kTokens, total, kModel, 1.0f, x.data(), w.data(), 0.0f, y.data());
      continue;
    }
    int64_t row = 0;
    for (int64_t o : outs) {
      mk::gemm<float>(false, true, kTokens, o, kModel, 1.0f, x.data(), w.data() + row * kModel, 0.0f,
                      y.data() + row * kTokens);
      row += o;
    }
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * double(kTokens * total * kModel), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GemmFusedProjection)
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// An output projection plus the residual: mode 0 copies the residual into y
// and adds with beta 1, mode 1 reads it inside the GEMM (gemm_onto).
// Args: the projection's input width (512: o_proj, 1408: down_proj), mode, threads.
void BM_GemmOntoResidual(benchmark::State& state) {
  const int64_t in = state.range(0);
  const bool onto = state.range(1) == 1;
  omp_set_num_threads(int(state.range(2)));
  const auto x = random_floats(kTokens * in, 1), w = random_floats(kModel * in, 2);
  const auto res = random_floats(kTokens * kModel, 3);
  std::vector<float> y(size_t(kTokens * kModel));
  for (auto _ : state) {
    if (onto) {
      mk::gemm_onto(false, true, kTokens, kModel, in, 1.0f, x.data(), w.data(), res.data(), y.data());
    } else {
      std::copy(res.begin(), res.end(), y.begin());
      mk::gemm<float>(false, true, kTokens, kModel, in, 1.0f, x.data(), w.data(), 1.0f, y.data());
    }
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * double(kTokens * kModel * in), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GemmOntoResidual)
    ->ArgsProduct({{kModel, kHidden}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_FmaPeak(benchmark::State& state) {
  const int threads = int(state.range(0));
  double g = 0;
  for (auto _ : state) g = meshtrain::kernels::measure_fma_peak_gflops(threads);
  state.counters["GFLOPS"] = g;
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- Memory-bound kernels: bytes/s of compulsory traffic. ----

void set_threads(benchmark::State& state) { omp_set_num_threads(int(state.range(0))); }
void bytes(benchmark::State& state, double per_iter) {
  state.SetBytesProcessed(int64_t(per_iter * double(state.iterations())));
}
#define MT_BENCH_THREADS(fn) BENCHMARK(fn)->Arg(1)->Arg(2)->UseRealTime()

void BM_AddInplace(benchmark::State& state) {
  set_threads(state);
  const int64_t n = kTokens * kModel;
  auto x = random_floats(n, 1), y = random_floats(n, 2);
  for (auto _ : state) mk::add_inplace(y.data(), x.data(), n);
  bytes(state, 3.0 * 4 * n);
}
MT_BENCH_THREADS(BM_AddInplace);

void BM_SumSquares(benchmark::State& state) {
  set_threads(state);
  const int64_t n = 16 << 20;  // a 16M-parameter gradient
  auto x = random_floats(n, 1);
  double s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s += mk::sum_squares(x.data(), n));
  bytes(state, 4.0 * n);
}
MT_BENCH_THREADS(BM_SumSquares);

void BM_ConvertF32ToBf16(benchmark::State& state) {
  set_threads(state);
  const int64_t n = 16 << 20;
  auto x = random_floats(n, 1);
  std::vector<uint16_t> y(static_cast<size_t>(n));
  for (auto _ : state) mk::convert_f32_to_bf16(x.data(), y.data(), n);
  bytes(state, 6.0 * n);
}
MT_BENCH_THREADS(BM_ConvertF32ToBf16);

void BM_EmbeddingForward(benchmark::State& state) {
  set_threads(state);
  auto table = random_floats(kVocab * kModel, 1);
  std::vector<int32_t> ids(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) ids[size_t(i)] = int32_t((i * 7919) % kVocab);
  std::vector<float> out(static_cast<size_t>(kTokens * kModel));
  for (auto _ : state) mk::embedding_forward(ids.data(), kTokens, table.data(), kVocab, kModel, out.data());
  bytes(state, 2.0 * 4 * kTokens * kModel);
}
MT_BENCH_THREADS(BM_EmbeddingForward);

void BM_EmbeddingBackward(benchmark::State& state) {
  set_threads(state);
  std::vector<float> dtable(static_cast<size_t>(kVocab * kModel));
  auto dout = random_floats(kTokens * kModel, 1);
  std::vector<int32_t> ids(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) ids[size_t(i)] = int32_t((i * 7919) % kVocab);
  for (auto _ : state) mk::embedding_backward(ids.data(), kTokens, dout.data(), kVocab, kModel, dtable.data());
  bytes(state, 3.0 * 4 * kTokens * kModel);
}
MT_BENCH_THREADS(BM_EmbeddingBackward);

void BM_RmsNormForward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(kTokens * kModel, 1), w = random_floats(kModel, 2);
  std::vector<float> y(x.size()), r(static_cast<size_t>(kTokens));
  for (auto _ : state) mk::rmsnorm_forward(x.data(), w.data(), kTokens, kModel, 1e-5f, y.data(), r.data());
  bytes(state, 2.0 * 4 * kTokens * kModel);
}
MT_BENCH_THREADS(BM_RmsNormForward);

void BM_RmsNormBackward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(kTokens * kModel, 1), w = random_floats(kModel, 2), dy = random_floats(kTokens * kModel, 3);
  std::vector<float> y(x.size()), r(static_cast<size_t>(kTokens)), dx(x.size()), dw(static_cast<size_t>(kModel));
  mk::rmsnorm_forward(x.data(), w.data(), kTokens, kModel, 1e-5f, y.data(), r.data());
  for (auto _ : state) mk::rmsnorm_backward(x.data(), w.data(), r.data(), dy.data(), kTokens, kModel, dx.data(), dw.data());
  bytes(state, 4.0 * 4 * kTokens * kModel);  // x, dy, dx read + dx written
}
MT_BENCH_THREADS(BM_RmsNormBackward);

void BM_LayerNormForward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(kTokens * kModel, 1), w = random_floats(kModel, 2), b = random_floats(kModel, 3);
  std::vector<float> y(x.size()), m(static_cast<size_t>(kTokens)), r(static_cast<size_t>(kTokens));
  for (auto _ : state)
    mk::layernorm_forward(x.data(), w.data(), b.data(), kTokens, kModel, 1e-5f, y.data(), m.data(), r.data());
  bytes(state, 2.0 * 4 * kTokens * kModel);
}
MT_BENCH_THREADS(BM_LayerNormForward);

void BM_LayerNormBackward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(kTokens * kModel, 1), w = random_floats(kModel, 2), b = random_floats(kModel, 3),
       dy = random_floats(kTokens * kModel, 4);
  std::vector<float> y(x.size()), m(static_cast<size_t>(kTokens)), r(static_cast<size_t>(kTokens)), dx(x.size()),
      dw(static_cast<size_t>(kModel)), db(static_cast<size_t>(kModel));
  mk::layernorm_forward(x.data(), w.data(), b.data(), kTokens, kModel, 1e-5f, y.data(), m.data(), r.data());
  for (auto _ : state)
    mk::layernorm_backward(x.data(), w.data(), m.data(), r.data(), dy.data(), kTokens, kModel, dx.data(), dw.data(),
                           db.data());
  bytes(state, 4.0 * 4 * kTokens * kModel);  // x, dy, dx read + dx written
}
MT_BENCH_THREADS(BM_LayerNormBackward);

void BM_RopeForward(benchmark::State& state) {
  set_threads(state);
  auto table = mk::make_rope_table(256, kHeadDim, 10000.0);
  auto q = random_floats(kTokens * kHeads * kHeadDim, 1);
  std::vector<int32_t> pos(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) pos[size_t(i)] = int32_t(i % 256);
  for (auto _ : state) mk::rope_apply(q.data(), pos.data(), kTokens, kHeads, kHeadDim, table, false);
  bytes(state, 2.0 * 4 * kTokens * kHeads * kHeadDim);
}
MT_BENCH_THREADS(BM_RopeForward);

void BM_SwigluForward(benchmark::State& state) {
  set_threads(state);
  const int64_t n = kTokens * kHidden;
  auto g = random_floats(n, 1), u = random_floats(n, 2);
  std::vector<float> o(static_cast<size_t>(n));
  for (auto _ : state) mk::swiglu_forward(g.data(), u.data(), n, o.data());
  bytes(state, 3.0 * 4 * n);
}
MT_BENCH_THREADS(BM_SwigluForward);

void BM_SwigluBackward(benchmark::State& state) {
  set_threads(state);
  const int64_t n = kTokens * kHidden;
  auto g = random_floats(n, 1), u = random_floats(n, 2), d = random_floats(n, 3);
  std::vector<float> dg(static_cast<size_t>(n)), du(static_cast<size_t>(n));
  for (auto _ : state) mk::swiglu_backward(g.data(), u.data(), d.data(), n, dg.data(), du.data());
  bytes(state, 5.0 * 4 * n);
}
MT_BENCH_THREADS(BM_SwigluBackward);

void BM_GeluForward(benchmark::State& state) {
  set_threads(state);
  const int64_t n = kTokens * 4 * kModel;
  auto x = random_floats(n, 1);
  std::vector<float> y(static_cast<size_t>(n));
  for (auto _ : state) mk::gelu_forward(x.data(), n, y.data());
  bytes(state, 2.0 * 4 * n);
}
MT_BENCH_THREADS(BM_GeluForward);

void BM_CrossEntropyFused(benchmark::State& state) {
  set_threads(state);
  auto logits = random_floats(kTokens * kVocab, 1);
  std::vector<float> g(logits.size());
  std::vector<int32_t> t(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) t[size_t(i)] = int32_t((i * 131) % kVocab);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        mk::cross_entropy_forward_backward(logits.data(), t.data(), kTokens, kVocab, 1.0f / kTokens, g.data()));
  bytes(state, 2.0 * 4 * kTokens * kVocab);
}
MT_BENCH_THREADS(BM_CrossEntropyFused);

// The same loss and gradient as three passes over the logits (max, sums,
// finish: the vocabulary-parallel kernels on one slice), for comparison
// with BM_CrossEntropyFused's one read and one write.
void BM_CrossEntropyPasses(benchmark::State& state) {
  set_threads(state);
  auto logits = random_floats(kTokens * kVocab, 1);
  std::vector<float> g(logits.size()), stats(3 * kTokens);
  std::vector<int32_t> t(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) t[size_t(i)] = int32_t((i * 131) % kVocab);
  float *row_max = stats.data(), *sum_exp = row_max + kTokens, *target_logit = sum_exp + kTokens;
  for (auto _ : state) {
    mk::vocab_ce_max(logits.data(), t.data(), kTokens, kVocab, kVocab, row_max);
    mk::vocab_ce_sums(logits.data(), t.data(), kTokens, kVocab, kVocab, int64_t(0), row_max, sum_exp, target_logit, g.data());
    benchmark::DoNotOptimize(mk::vocab_ce_finish(t.data(), kTokens, kVocab, int64_t(0), row_max, sum_exp,
                                                 target_logit, 1.0f / kTokens, g.data()));
  }
  bytes(state, 2.0 * 4 * kTokens * kVocab);
}
MT_BENCH_THREADS(BM_CrossEntropyPasses);

// What a window's zero fill of the gradients cost before they were zeroed
// lazily (model/parameters.h): bench-small's 31.9M f32 gradients.
void BM_GradientZeroFill(benchmark::State& state) {
  set_threads(state);
  const int64_t n = 122 << 18;  // 122 MiB of f32
  std::vector<float> g(static_cast<size_t>(n), 1.0f);
  for (auto _ : state) mk::fill(g.data(), 0.0f, n);
  bytes(state, 4.0 * n);
}
MT_BENCH_THREADS(BM_GradientZeroFill);

// range(1) = 1: the update also writes the bf16 compute copy (the bf16
// policy's optimizer pass).
void BM_AdamW(benchmark::State& state) {
  set_threads(state);
  const int64_t n = 16 << 20;
  const bool with_copy = state.range(1) != 0;
  auto p = random_floats(n, 1), g = random_floats(n, 2);
  std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  std::vector<uint16_t> copy(with_copy ? static_cast<size_t>(n) : 0);
  mk::AdamWHyper h;
  h.weight_decay = 0.1;
  uint16_t* copy_out = with_copy ? copy.data() : nullptr;
  for (auto _ : state) mk::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h, 1.0f, copy_out);
  bytes(state, (7.0 * 4 + (with_copy ? 2.0 : 0.0)) * n);  // p, g, m, v read; p, m, v (and the copy) written
}
BENCHMARK(BM_AdamW)->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
