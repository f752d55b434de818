// The closed forms of docs/math.md the planner prints next to its recorded
// figures, each with docs/math.md's worked example in tests/plan/formulas_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/comm/types.h"

namespace meshtrain::plan {

// ---- (M.26): persistent state per rank ---------------------------------------
struct StateBytes {
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};
// P, G, O: bytes of parameters, gradients and optimizer state of the whole
// model; R: the sharding group's size.
StateBytes zero_state(double P, double G, double O, int R, int stage);

// Bytes per parameter of a precision name: "fp32" 4 + 4 + 8; "bf16" and
// "fp16-mixed" 2 + 2 + 12 (two f32 moments and an f32 master).
struct BytesPerParam {
  double params = 0, grads = 0, optimizer = 0;
};
BytesPerParam bytes_per_param(const std::string& precision);

// (M.28): what sits on top of the persistent state at the peak.
struct PeakTerms {
  double activations = 0, workspace = 0, gathered = 0, prefetch = 0;
};
double peak_bytes(const StateBytes& state, const PeakTerms& terms);

// ---- (M.30): checkpoint every k of L layers ---------------------------------------
// M_act(k) = A (ceil(L / k) + k): the boundaries kept plus one segment
// replayed. The continuous optimum is k = sqrt(L); the integer k is the
// best of its neighbours (ties go to the smaller k).
struct RecomputeChoice {
  int64_t k = 1;
  double bytes = 0;
  struct Candidate {
    int64_t k;
    double bytes;
  };
  std::vector<Candidate> compared;  // the integers around sqrt(L)
};
double recompute_memory(int64_t L, int64_t k, double A);
RecomputeChoice best_checkpoint_interval(int64_t L, double A);

// ---- (M.41)-(M.42): fill-drain pipelines --------------------------------------------
double pipeline_time(int p, int m, double f, double b);  // (m + p - 1)(f + b)
double pipeline_utilization(int p, int m);               // m / (m + p - 1)
double pipeline_bubble(int p, int m);                    // (p - 1) / (m + p - 1)
// The smallest m whose bubble is at most `target` (0 < target < 1).
int64_t micro_batches_for_bubble(int p, double target);

// ---- (M.20): ring collectives -----------------------------------------------------------
// Time of `kind` over R ranks for M logical bytes: all-reduce 2(R-1) rounds
// and 2(R-1)/R M on the wire; reduce-scatter and all-gather R-1 rounds and
// (R-1)/R M; send/recv one round and M; all-to-all R-1 rounds and (R-1)/R M.
double ring_time(comm::OpKind kind, int R, double M, double alpha_s, double beta_s_per_byte);
double ring_rounds(comm::OpKind kind, int R);
double ring_wire_bytes(comm::OpKind kind, int R, double M);  // what each rank sends

// ---- (M.68): strong scaling ----------------------------------------------------------
struct Scaling {
  double speedup = 0, efficiency = 0;
};
Scaling scaling_efficiency(double t0, int64_t D0, double t1, int64_t D1);

// ---- (M.66): model FLOPs ----------------------------------------------------------------
// Per iteration of B sequences of s tokens through l layers of hidden h with
// vocabulary V, counting one forward recomputation (Narayanan et al. 2021):
// 96 B s l h^2 (1 + s / 6h + V / 16 l h). Without recomputation the factor
// is 72 and the vocabulary term V / 12 l h (the model FLOPs of MFU).
double megatron_flops(double B, double s, double l, double h, double V, bool recompute);

}  // namespace meshtrain::plan
