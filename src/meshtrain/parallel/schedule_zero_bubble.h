// Zero-bubble schedules (the backward split into B, the input gradient on
// the critical path, and W, the weight gradient, which has no dependants
// and fills the time a rank would otherwise wait), as list policies
// (schedule_list.h):
//   ZB-H1: one chunk per rank (chunk c on rank c); every rank holds at
//     most p live micro-batches (1F1B's peak, on its first stage); after
//     the warm-up a rank alternates F and B and runs a W only when neither
//     is ready. Unit-time (F = B = W = 1) makespan 3m + p - 1 + max(0, p - m):
//     for m >= p an idle of (p-1)(F + B - W) per rank against 1F1B's
//     (p-1)(F + B + W), bubble (p-1)/(3m + p-1).
//   ZB-V: two chunks per rank in a V (chunk c on rank c, chunk 2p-1-c on
//     rank c), so rank 0 holds the first and the last chunk and a micro-
//     batch goes down the ranks and back; every rank holds at most 2p live
//     chunk activations (p stages' worth). Unit-time makespan per chunk
//     action 6m + p - 1 for m >= p: only the start-up (rank r's first F
//     waits r) is idle, bubble (p-1)/(6m + p-1).
#pragma once

#include "meshtrain/parallel/schedule.h"

namespace meshtrain::parallel {

Schedule zb_h1_schedule(int p, int m);
Schedule zb_v_schedule(int p, int m);

}  // namespace meshtrain::parallel
