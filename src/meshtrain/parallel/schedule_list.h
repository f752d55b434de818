// A list scheduler for pipeline schedules (schedule.h): every rank runs the
// compute actions of its chunks in unit time (F = B = W = 1, fused BW = 2),
// and whenever it is free picks the next one by a policy — backward first
// (it is on the critical path), then a forward while the rank holds fewer
// live activations than its limit, then a deferred weight gradient (W fills
// what would be idle time). Micro-batches enter every chunk's F, B and W in
// ascending order, so each parameter accumulates its gradient in the same
// micro-batch order under every schedule (the bitwise claim). The chosen
// order is emitted with its transfers, and validate() then proves it.
// Interleaved 1F1B, ZB-H1 and ZB-V are such policies over a chunk placement.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "meshtrain/parallel/schedule.h"

namespace meshtrain::parallel {

struct ListPolicy {
  bool split_backward = false;  // B and W as separate actions
  bool forward_only = false;    // no backward at all (evaluation)
  bool backward_first = true;   // a ready backward goes before a ready forward (false: fill-drain)
  // When both are ready, the kind the rank did not run last goes first
  // (the steady one-forward-one-backward beat), over backward_first.
  bool alternate = false;
  // Per rank: at most this many (micro-batch, chunk) activations held at
  // once (F started, its BW or W not); 0 = no limit.
  std::vector<int> max_live;
  // Among ready forwards / backwards of a rank the smallest key goes first
  // (default: micro-batch, then chunk).
  std::function<std::array<int, 3>(int micro, int chunk)> forward_key, backward_key;
};

// The schedule `policy` produces for p ranks, m micro-batches and chunks
// placed on ranks by `chunk_rank`. InternalError if the policy stalls (a
// limit too small for the placement), which no generator below does.
Schedule list_schedule(const std::string& name, int p, int m, const std::vector<int>& chunk_rank,
                       const ListPolicy& policy);

// Inserts the transfers a list of compute actions needs: a receive right
// before the action that consumes a remote input, a (non-blocking) send
// right after the action that produces it.
void add_transfers(Schedule& s);

}  // namespace meshtrain::parallel
