// SIGINT and SIGTERM while training: the first asks the run to stop after
// the step in progress, save a checkpoint and exit with a message (every
// rank agrees on the step through one small collective per step); a second
// one exits at once. Installed for the lifetime of a StopSignals object.
#pragma once

namespace meshtrain::train {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (0: none). Async-signal-safe to read.
  static int received();
  static const char* name(int sig);  // "SIGINT", "SIGTERM"
  // Forgets a received signal (tests).
  static void reset();
};

}  // namespace meshtrain::train
