// Compute time of one micro-batch through one segment on a machine
// profile: the GEMMs the layers run (forward y = x W^T, input gradient
// dx = dy W, weight gradient dW = dy^T x; causal attention's score and value
// products), each at the profile's rate for its shape class, plus the
// elementwise passes (norms, RoPE, activations, residual copies, loss,
// dtype conversions) at the memory bandwidth. Also the FLOPs themselves:
// the planner reports FLOPs per step from the same list. What one rank
// computes: its context-parallel share of each row, its experts over the
// tokens dispatched to them (docs/math.md, "Segment costs").
#pragma once

#include <cstdint>

#include <map>
#include <utility>
#include <vector>

#include "meshtrain/core/precision.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/parallel/schedule.h"
#include "meshtrain/plan/hardware.h"
#include "meshtrain/plan/step_inputs.h"

namespace meshtrain::plan {

// A micro-batch's shape: rows x seq positions, of which a rank of cp
// context-parallel ranks computes seq / cp of each row (its two chunks,
// docs/math.md (M.48)).
struct TraceBatch {
  int64_t rows = 0, seq = 0, cp = 1;
  int64_t n() const { return rows * seq / cp; }  // positions the rank computes
};
// The micro-batch of `in` as each of its ranks computes it.
TraceBatch trace_batch(const StepInputs& in);

// The sizes a rank's layers take from its local spec (bind_linear): per
// block the local q, k/v and MLP hidden rows and query heads; the LM
// head's rows. Zero where the rank does not hold the block. A
// mixture-of-experts block (docs/moe.md) has no dense ffn: the router's
// experts, the routed experts the rank holds (whole, of expert_ffn rows)
// out of `sources` ep ranks' tokens, the shared expert's rows.
struct LocalBlockDims {
  int64_t q = 0, kv = 0, ffn = 0, q_heads = 0;
  int64_t router = 0, expert_ffn = 0, shared_ffn = 0, sources = 1;
  std::vector<int> experts;
};
struct LocalDims {
  std::vector<LocalBlockDims> blocks;
  int64_t vocab_rows = 0;
};
LocalDims local_dims(const model::ModelConfig& cfg, const model::ModelSpec& local);

struct PassCost {
  double flops = 0;    // multiply-adds counted twice
  double seconds = 0;  // on one device
  PassCost& operator+=(const PassCost& o) {
    flops += o.flops, seconds += o.seconds;
    return *this;
  }
};

// F, B (input gradient, with the forward replay under recomputation) and
// W (weight gradients) of one segment for one micro-batch.
struct SegmentCost {
  PassCost f, b, w;
};
// What a compute action of a program costs: F, B (+ W), B or W.
PassCost action_cost(const SegmentCost& c, parallel::Op op);

class ComputeModel {
 public:
  // speed: this rank's share of its device (1 for a GPU; cores per rank
  // over cores per device for CPU ranks sharing a node). hw null: FLOPs
  // only (every time 0).
  ComputeModel(const model::ModelConfig& cfg, const LocalDims& dims, const PrecisionPolicy& precision,
               const HardwareProfile* hw, double speed = 1.0, bool fused_attention = true);
  // The execution options that move work between passes come from `exec`:
  // recomputation, the head in row chunks (its GEMMs, loss and weight
  // gradient all in B).
  SegmentCost segment(int s, const TraceBatch& b, const StepInputs& exec) const;
  // AdamW over `owned` elements (memory-bound: master or parameters, the
  // gradient, both moments, the 16-bit copy).
  double optimizer_seconds(int64_t owned) const;

 private:
  PassCost gemm(int64_t m, int64_t n, int64_t k) const;
  PassCost attention(const TraceBatch& b, int64_t heads, double factor) const;
  PassCost elementwise(double bytes) const;
  // A linear layer of `out` x `in` over n tokens: forward, dX and dW.
  void linear(SegmentCost& c, int64_t n, int64_t out, int64_t in) const;
  // A feed-forward of f hidden units over n tokens.
  void ffn(SegmentCost& c, int64_t n, int64_t f) const;
  // The routed experts of block k over the rows dispatched to them; returns
  // those rows (every source's blocks, padding included).
  int64_t experts(SegmentCost& c, const LocalBlockDims& k, const TraceBatch& b) const;
  // Rows of each expert's block in one source's micro-batch under the
  // planner's balanced routing (begin[e + 1] - begin[e]).
  const std::vector<int64_t>& expert_blocks(const TraceBatch& b) const;

  model::ModelConfig cfg_;
  LocalDims dims_;
  PrecisionPolicy precision_;
  const HardwareProfile* hw_;
  double speed_;
  bool fused_attention_;
  mutable std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> blocks_;  // per (rows, seq): expert_blocks
};

}  // namespace meshtrain::plan
