// Routing decisions of the mixture-of-experts layer (moe_layer.h), a pure
// function of the router probabilities of whole rows, so they never depend
// on the layout (docs/moe.md):
//  - top-k per token by (probability descending, expert index ascending);
//  - a kept assignment's gate is its probability, or with `renormalize`
//    (Mixtral's rule) its probability over the sum of the token's top-k
//    probabilities (before capacity drops);
//  - the routing unit is one row (sequence): every layout, micro-batch size
//    and dp / ep degree keeps a row whole on one rank, so capacity, drops
//    and the load-balancing statistics are the same under all of them;
//  - capacity per (row, expert) C = ceil(f * seq * k / E) (f = 0: no limit),
//    kept assignments chosen by (probability descending, token ascending);
//  - aux loss SUM = coeff * E * sum_rows sum_e f_e * sum_{t in row} p_te,
//    f_e the row's fraction of assignments (before drops) to e: per token the
//    Switch loss E sum_e f_e P_e of its row, so it is normalized by the same
//    global count N as the cross-entropy sum (docs/math.md (M.5), (M.56)).
// Expert e's tokens sit in rows [begin[e], begin[e] + count[e]) of the
// expert-major buffer, in token order; its block is padded to a bucketed
// size (expert_rows_bucket) so variable counts reuse a bounded set of
// allocator sizes.
#pragma once

#include <cstdint>
#include <vector>

namespace meshtrain::kernels {

struct MoeRoutingConfig {
  int64_t experts = 0, top_k = 1, seq = 0;
  double capacity_factor = 0.0;
  double aux_coeff = 0.0;
  bool renormalize = false;  // gates divided by the token's top-k probability sum
  bool force_balance = false;  // balanced_routing whatever the logits (model.moe_force_balance)
};

struct MoeRouting {
  int64_t n = 0, seq = 0, experts = 0, top_k = 0;
  std::vector<double> probs;         // [n, E] softmax of the router logits
  std::vector<int32_t> slot_expert;  // [n, k] chosen experts
  std::vector<uint8_t> slot_kept;    // [n, k] 0: dropped by capacity
  std::vector<int64_t> count;        // [E] kept rows per expert
  std::vector<int64_t> begin;        // [E + 1] padded block starts; begin[E]: rows of the buffer
  std::vector<int32_t> rows_of_expert;  // tokens of the kept rows, expert-major, token order within
  // Kept assignments in (token, slot) order: the combine's order.
  std::vector<int32_t> comb_token, comb_row;
  std::vector<double> comb_gate;
  std::vector<double> row_fraction;  // [rows, E] f_e of each row (the aux loss gradient's factor)
  int64_t assigned = 0, dropped = 0;
  double aux_sum = 0.0;
  int64_t capacity = 0;  // per (row, expert); 0: dropless
};

// Rows of an expert block holding `count` tokens: count rounded up to a
// multiple of max(8, 2^(floor(log2 count) - 2)) (at most 25% padding).
int64_t expert_rows_bucket(int64_t count);

// Sum of token t's top-k probabilities (the renormalizing denominator).
double top_k_sum(const MoeRouting& r, int64_t t);

// Routes n = rows * seq tokens from their router logits [n, E] (row-major).
MoeRouting route_tokens(const MoeRoutingConfig& cfg, const double* logits, int64_t n);

// The routing the planner assumes (the meta device's route): token t prefers
// experts t k, t k + 1, ... (mod E) in that order, so every expert receives
// n k / E assignments when E divides n k; capacity, buckets and the combine
// order follow route_tokens's rules.
MoeRouting balanced_routing(const MoeRoutingConfig& cfg, int64_t n);

// d(loss)/d(logits) [n, E] from the gates' gradients (dgate per kept
// assignment, in comb order) and the aux loss scaled by `aux_scale` (the
// step's loss coefficient): softmax backward of dp = dgate + aux_scale *
// coeff * E * f_e.
std::vector<double> router_logit_grads(const MoeRouting& r, const MoeRoutingConfig& cfg, const double* dgate,
                                       double aux_scale);

}  // namespace meshtrain::kernels
