// Generated pipeline schedules (schedule.h), one chunk per rank (chunk c on
// rank c), micro-batches in order so every parameter accumulates its
// gradient in micro-batch order under every schedule:
//   gpipe: all forwards, then all backwards (fill-drain, (29.13));
//   1f1b:  p - r - 1 warm-up forwards on rank r, then one forward and one
//          backward alternately, then the remaining backwards; with p = 1
//          it is the plain loop F0 BW0 F1 BW1 ... of a single device.
// forward_only: the same order without backwards (evaluation).
#pragma once

#include <string>

#include "meshtrain/parallel/schedule.h"

namespace meshtrain::parallel {

Schedule gpipe_schedule(int p, int m, bool forward_only = false);
Schedule one_f_one_b_schedule(int p, int m);
// By name: "gpipe" | "1f1b"; ConfigError naming the choices otherwise.
Schedule make_schedule(const std::string& name, int p, int m);

}  // namespace meshtrain::parallel
