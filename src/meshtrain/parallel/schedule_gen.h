// Generated pipeline schedules (schedule.h), micro-batches in order through
// every chunk so every parameter accumulates its gradient in micro-batch
// order under every schedule. One chunk per rank (chunk c on rank c):
//   gpipe: all forwards, then all backwards (fill-drain, docs/math.md (M.41));
//   1f1b:  p - r - 1 warm-up forwards on rank r, then one forward and one
//          backward alternately, then the remaining backwards; with p = 1
//          it is the plain loop F0 BW0 F1 BW1 ... of a single device.
// forward_only: the same order without backwards (evaluation).
#pragma once

#include <string>
#include <vector>

#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/schedule.h"

namespace meshtrain::parallel {

Schedule gpipe_schedule(int p, int m, bool forward_only = false);
Schedule one_f_one_b_schedule(int p, int m);
// Interleaved 1F1B (list policy, schedule_list.h): v chunks per rank,
// chunk c on rank c % p; forwards in groups of p micro-batches chunk by
// chunk, backwards the same with chunks reversed; rank r holds at most
// 2(p - r - 1) + (v - 1)p + 1 live chunk activations. v = 1 is 1F1B.
Schedule interleaved_schedule(int p, int m, int v);
// Forward-only over any chunk placement (evaluation): each micro-batch
// through the chunks in order.
Schedule forward_schedule(int p, int m, const std::vector<int>& chunk_rank);

// The schedules by name: gpipe | 1f1b | interleaved | zb-h1 | zb-v.
const std::vector<std::string>& schedule_names();
// The chunk placement a schedule runs on (zb-v: V, the others: loop).
ChunkPlacement placement_of(const std::string& name);
// Whether the schedule runs B and W as separate actions (zb-h1, zb-v): a
// micro-batch's weight gradients then land after the next one's input
// gradients began writing the same units.
bool splits_backward(const std::string& name);
// ConfigError, naming the key and the numbers, when the schedule cannot run
// p stages x v chunks with m micro-batches (checked before anything runs).
void check_schedule(const std::string& name, int p, int m, int v);
// By name; ConfigError naming the choices otherwise.
Schedule make_schedule(const std::string& name, int p, int m, int v = 1);
// make_schedule, validated (schedule.h validate) the first time this
// process asks for (name, p, m, v): the generators are deterministic, so
// the planner's many steps of one layout validate it once.
Schedule checked_schedule(const std::string& name, int p, int m, int v = 1);
// The unit-time bubble fraction (every chunk's F = B = W = 1) by the
// schedule's formula (docs/math.md (M.44)): gpipe, 1f1b (p-1)/(m+p-1);
// interleaved (p-1)/(vm+p-1) for m a multiple of p; zb-h1 (p-1)/(3m+p-1)
// for m >= p and (2p-1-m)/(2m+2p-1) below; zb-v (p-1)/(6m+p-1) for m >= p;
// where no closed form is stated, the unit-time simulation of the schedule.
double bubble_formula(const std::string& name, int p, int m, int v);

}  // namespace meshtrain::parallel
