// SIGINT and SIGTERM while training: the first asks the run to stop after
// the step in progress, save a checkpoint and exit with a message (every
// rank agrees on the step through one small collective per step); a second
// one exits at once. Installed for the lifetime of a StopSignals object.
// A supervisor that runs the job under mpirun (`meshtrain launch`) relays
// the signals it receives through a file named by MESHTRAIN_STOP_FILE,
// which rank 0 reads once per step (supervisor.h).
#pragma once

namespace meshtrain::train {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received or agreed on (0: none). Async-signal-safe to read.
  static int received();
  // A signal number a supervisor wrote into MESHTRAIN_STOP_FILE (0: none,
  // or no such file); read by the rank that logs, once per step.
  static int relayed();
  // Records the stop every rank agreed on, so each one exits with it.
  static void agree(int sig);
  static const char* name(int sig);  // "SIGINT", "SIGTERM"
  // Forgets a received signal (tests).
  static void reset();
};

}  // namespace meshtrain::train
