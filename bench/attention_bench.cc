// Causal attention forward/backward at the end-to-end model's shape
// (B=8, T=256, Hq=8, Hkv=4, D=64) with 1 and 2 OpenMP threads, f32 inputs or
// the bf16 policy's bf16 q, k, v and output (bf16:1), and the backward of one
// long row.
// FLOPs: 4 * B * Hq * T^2 * D / 2 for the causal forward, 2.5x that for backward.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "meshtrain/core/dtype.h"
#include "meshtrain/kernels/cpu/attention.h"

using namespace meshtrain::kernels;

namespace {

struct Problem {
  AttentionShape s;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<uint16_t> q16, k16, v16, out16;  // the bf16 policy's inputs and output (bf16 bits)
  std::vector<int32_t> seg;
  float scale;
  bool bf16 = false;

  Problem(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t doc_len, bool bf16_inputs = false)
      : s{B, T, Hq, Hkv, D}, bf16(bf16_inputs) {
    std::mt19937 rng(1);
    std::normal_distribution<float> n(0.f, 1.f);
    auto fill = [&](std::vector<float>& x, int64_t size) {
      x.resize(size);
      for (auto& e : x) e = n(rng);
    };
    fill(q, B * T * Hq * D);
    fill(dout, B * T * Hq * D);
    fill(k, B * T * Hkv * D);
    fill(v, B * T * Hkv * D);
    out.resize(q.size());
    dq.resize(q.size());
    dk.resize(k.size());
    dv.resize(k.size());
    lse.resize(B * Hq * T);
    if (doc_len > 0)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) seg.push_back(static_cast<int32_t>(t / doc_len));
    scale = 1.f / std::sqrt(static_cast<float>(D));
    auto bits = [](const std::vector<float>& x) {
      std::vector<uint16_t> b(x.size());
      for (size_t i = 0; i < x.size(); ++i) b[i] = meshtrain::bf16::from_float(x[i]);
      return b;
    };
    q16 = bits(q), k16 = bits(k), v16 = bits(v), out16.resize(q.size());
  }
  const int32_t* segp() const { return seg.empty() ? nullptr : seg.data(); }
  double fwd_flops() const {
    return 4.0 * s.batch * s.q_heads * double(s.seq) * double(s.seq) * s.head_dim / 2;
  }
  void forward() {
    if (bf16)
      attention_forward<float>(s, q16.data(), k16.data(), v16.data(), segp(), scale, out16.data(), lse.data());
    else
      attention_forward<float>(s, q.data(), k.data(), v.data(), segp(), scale, out.data(), lse.data());
  }
  void backward() {
    if (bf16)
      attention_backward<float>(s, q16.data(), k16.data(), v16.data(), segp(), scale, out16.data(), lse.data(),
                                dout.data(), dq.data(), dk.data(), dv.data());
    else
      attention_backward<float>(s, q.data(), k.data(), v.data(), segp(), scale, out.data(), lse.data(), dout.data(),
                                dq.data(), dk.data(), dv.data());
  }
};

// args: threads, doc_len (0 = one document per row), bf16 (1: bf16 inputs)
void BM_AttentionForward(benchmark::State& st) {
  omp_set_num_threads(static_cast<int>(st.range(0)));
  Problem p(8, 256, 8, 4, 64, st.range(1), st.range(2) != 0);
  for (auto _ : st) {
    p.forward();
    benchmark::DoNotOptimize(p.out.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(p.fwd_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Times p's backward (after one forward for out and lse).
void time_backward(benchmark::State& st, Problem& p) {
  p.forward();
  for (auto _ : st) {
    p.backward();
    benchmark::DoNotOptimize(p.dq.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.5 * p.fwd_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionBackward(benchmark::State& st) {
  omp_set_num_threads(static_cast<int>(st.range(0)));
  Problem p(8, 256, 8, 4, 64, st.range(1), st.range(2) != 0);
  time_backward(st, p);
}

void BM_AttentionForwardBackward(benchmark::State& st) {
  omp_set_num_threads(static_cast<int>(st.range(0)));
  Problem p(8, 256, 8, 4, 64, st.range(1), st.range(2) != 0);
  for (auto _ : st) {
    p.forward();
    p.backward();
    benchmark::DoNotOptimize(p.dq.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(3.5 * p.fwd_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// One long row (T = 8192, Hq = 8, Hkv = 2, D = 128): the backward packs its
// kv group's Q and dO per span of queries (attention.cc, kPackedGroupBytes).
// args: threads
void BM_AttentionBackwardLongRow(benchmark::State& st) {
  omp_set_num_threads(static_cast<int>(st.range(0)));
  Problem p(1, 8192, 8, 2, 128, 0);
  time_backward(st, p);
}
BENCHMARK(BM_AttentionBackwardLongRow)->ArgNames({"threads"})->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// GFLOP/s counts the dense causal FLOPs even with documents (skipped tiles
// show up as a higher rate).
#define MT_ATTENTION_ARGS                                                                                  \
  ->ArgNames({"threads", "doc_len", "bf16"})->Args({1, 0, 0})->Args({1, 0, 1})->Args({2, 0, 0})->Args({2, 0, 1}) \
      ->Args({2, 64, 0})->UseRealTime()->Unit(benchmark::kMillisecond)
BENCHMARK(BM_AttentionForward) MT_ATTENTION_ARGS;
BENCHMARK(BM_AttentionBackward) MT_ATTENTION_ARGS;
BENCHMARK(BM_AttentionForwardBackward) MT_ATTENTION_ARGS;

}  // namespace

BENCHMARK_MAIN();
