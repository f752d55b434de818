// Causal attention forward/backward at the end-to-end model's shape
// (B=8, T=256, Hq=8, Hkv=4, D=64, f32) with 1 and 2 OpenMP threads, and the
// backward of one long row.
// FLOPs: 4 * B * Hq * T^2 * D / 2 for the causal forward, 2.5x that for backward.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "meshtrain/kernels/cpu/attention.h"

using namespace meshtrain::kernels;

namespace {

struct Problem {
  AttentionShape s;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<int32_t> seg;
  float scale;

  Problem(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t doc_len) : s{B, T, Hq, Hkv, D} {
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
  }
  const int32_t* segp() const { return seg.empty() ? nullptr : seg.data(); }
  double fwd_flops() const {
    return 4.0 * s.batch * s.q_heads * double(s.seq) * double(s.seq) * s.head_dim / 2;
  }
  void forward() {
    attention_forward<float>(s, q.data(), k.data(), v.data(), segp(), scale, out.data(), lse.data());
  }
  void backward() {
    attention_backward<float>(s, q.data(), k.data(), v.data(), segp(), scale, out.data(), lse.data(), dout.data(),
                              dq.data(), dk.data(), dv.data());
  }
};

// args: threads, doc_len (0 = one document per row)
void BM_AttentionForward(benchmark::State& st) {
  omp_set_num_threads(static_cast<int>(st.range(0)));
  Problem p(8, 256, 8, 4, 64, st.range(1));
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
  Problem p(8, 256, 8, 4, 64, st.range(1));
  time_backward(st, p);
}

void BM_AttentionForwardBackward(benchmark::State& st) {
  omp_set_num_threads(static_cast<int>(st.range(0)));
  Problem p(8, 256, 8, 4, 64, st.range(1));
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
#define MT_ATTENTION_ARGS ->ArgNames({"threads", "doc_len"})->Args({1, 0})->Args({2, 0})->Args({2, 64})->UseRealTime()->Unit(benchmark::kMillisecond)
BENCHMARK(BM_AttentionForward) MT_ATTENTION_ARGS;
BENCHMARK(BM_AttentionBackward) MT_ATTENTION_ARGS;
BENCHMARK(BM_AttentionForwardBackward) MT_ATTENTION_ARGS;

}  // namespace

BENCHMARK_MAIN();
