#include "meshtrain/train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace meshtrain::train {
namespace {

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_count = 0;
struct sigaction g_old_int, g_old_term;

void write_err(const char* s) {
  const ssize_t n = ::write(2, s, std::strlen(s));
  (void)n;
}

void on_signal(int sig) {
  const sig_atomic_t seen = g_count;
  g_count = seen + 1;
  if (seen > 0) {
    write_err("\nmeshtrain: second signal: exiting now without saving\n");
    ::_exit(128 + sig);
  }
  g_signal = sig;
  write_err(sig == SIGINT ? "\nmeshtrain: SIGINT received: finishing this step and saving a checkpoint "
                            "(send it again to exit at once)\n"
                          : "\nmeshtrain: SIGTERM received: finishing this step and saving a checkpoint "
                            "(send it again to exit at once)\n");
}

}  // namespace

StopSignals::StopSignals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::received() { return g_signal; }

int StopSignals::relayed() {
  const char* path = std::getenv("MESHTRAIN_STOP_FILE");
  if (!path || !*path) return 0;
  std::FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  int sig = 0;
  if (std::fscanf(f, "%d", &sig) != 1) sig = 0;
  std::fclose(f);
  return sig == SIGINT || sig == SIGTERM ? sig : 0;
}

void StopSignals::agree(int sig) {
  if (g_signal == 0) g_signal = sig;
}

const char* StopSignals::name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

void StopSignals::reset() {
  g_signal = 0;
  g_count = 0;
}

}  // namespace meshtrain::train
