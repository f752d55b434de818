// Named fault points: places where a test, or the fault-injection suite
// (tests/faults), makes one rank die to check that failure is a group
// event and that a restart resumes exactly (docs/math.md, "Rule: failure
// is a group event"), or makes it slow or hang to check that stragglers
// and hung ranks are named (docs/comm.md, "Stragglers and hangs").
// Unarmed, a point costs one relaxed atomic load.
//
// Armed by arm() or, at the first point reached, by the environment:
//   MESHTRAIN_FAULT="SITE[@RANK][#HIT][:ACTION]"   e.g. "backward@1#3:throw"
//   MESHTRAIN_FAULT="RULE;RULE..."                 several, each counting its own hits
//   MESHTRAIN_FAULT=count                          per (site, rank) counts on stderr at exit
// SITE matches a point of that name or any point below it ("commit" matches
// "commit.rename"); RANK (default: any) is the rank reaching it; the fault
// fires at the HIT-th (default 1st) matching point of the process, once.
// ACTION: throw (the rank fails with InjectedFault: an in-process death
// under the threads backend), kill (SIGKILL of the whole process, as a
// crash or the OOM killer would), exit (_exit(86) without cleanup), term
// (SIGTERM to the process, as a scheduler preempting the job; then go on),
// delay=SECONDS (sleep, then go on: at the HIT-th matching point and at
// every later one, as a straggler stays slow), hang (sleep for ever, as a
// rank stuck outside communication: only the heartbeat or the process's
// end stops it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/error.h"

namespace meshtrain::fault {

// Thrown by a point armed with the throw action: the rank dies.
class InjectedFault : public Error {
 public:
  using Error::Error;
};

enum class Action { Throw, Kill, Exit, Term, Delay, Hang };

struct Rule {
  std::string site;
  int rank = -1;     // -1: any rank
  int64_t hit = 1;   // fire at the hit-th matching point
  Action action = Action::Throw;
  double delay_s = 0;  // Delay: seconds slept at each matching point from the hit on
};

// "SITE[@RANK][#HIT][:ACTION]"; ConfigError naming the text when malformed.
Rule parse_rule(const std::string& text);

// "RULE;RULE...": each as parse_rule reads it.
std::vector<Rule> parse_rules(const std::string& text);

void arm(const Rule& rule);  // replaces any armed rule; resets the count
void arm(const std::vector<Rule>& rules);  // the same, several rules
void disarm();
bool fired();                // the armed rule has fired (since arm; a delay keeps firing)

// The rank points on this thread belong to (launchers set it per rank).
void set_thread_rank(int rank);
int thread_rank();

// A fault point named `site` (dotted, e.g. "commit.rename"), reached by
// this thread's rank or by `rank`.
void point(const char* site);
void point(const char* site, int rank);

// While one is alive, the points this thread reaches neither count nor
// fire: the step recorded on the meta device (the planner, the pre-run
// memory check) runs the trainer's code without being the run.
class Quiet {
 public:
  Quiet();
  ~Quiet();
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;
};

}  // namespace meshtrain::fault
