#include "meshtrain/core/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace meshtrain::fault {
namespace {

struct State {
  std::atomic<bool> active{false};  // a rule is armed or points are counted
  std::once_flag env_once;
  std::mutex mu;
  struct Armed {
    Rule rule;
    int64_t seen = 0;
    bool fired = false;
  };
  std::vector<Armed> rules;  // each counts its own hits
  bool counting = false;
  std::map<std::pair<std::string, int>, int64_t> counts;
};

State& st() {
  static State* s = new State();  // never destroyed: points may run during exit
  return *s;
}

thread_local int t_rank = -1;

void print_counts() {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  std::string line = "meshtrain fault points:";
  for (const auto& [key, n] : s.counts) line += " " + key.first + "@" + std::to_string(key.second) + "=" + std::to_string(n);
  std::fprintf(stderr, "%s\n", line.c_str());
}

void read_environment() {
  const char* v = std::getenv("MESHTRAIN_FAULT");
  if (!v || !*v) return;
  State& s = st();
  if (std::string(v) == "count") {
    std::lock_guard<std::mutex> lock(s.mu);
    s.counting = true;
    s.active = true;
    std::atexit(print_counts);
    return;
  }
  arm(parse_rules(v));
}

// "commit" matches "commit" and "commit.rename", not "committed".
bool matches(const std::string& site, std::string_view point) {
  return point.substr(0, site.size()) == site && (point.size() == site.size() || point[site.size()] == '.');
}

}  // namespace

Rule parse_rule(const std::string& text) {
  Rule r;
  std::string rest = text;
  auto take_number = [&](char mark, int64_t& out) {
    const auto at = rest.find(mark);
    if (at == std::string::npos) return;
    size_t end = at + 1;
    while (end < rest.size() && std::isdigit(static_cast<unsigned char>(rest[end]))) ++end;
    MT_REQUIRE(ConfigError, end > at + 1, "MESHTRAIN_FAULT='", text, "': '", mark, "' needs a number");
    out = std::stoll(rest.substr(at + 1, end - at - 1));
    rest.erase(at, end - at);
  };
  const auto colon = rest.find(':');
  if (colon != std::string::npos) {
    const std::string action = rest.substr(colon + 1);
    rest.erase(colon);
    if (action == "throw") r.action = Action::Throw;
    else if (action == "kill") r.action = Action::Kill;
    else if (action == "exit") r.action = Action::Exit;
    else if (action == "term") r.action = Action::Term;
    else if (action == "hang") r.action = Action::Hang;
    else if (action.rfind("delay=", 0) == 0) {
      r.action = Action::Delay;
      const std::string secs = action.substr(6);
      size_t used = 0;
      try {
        r.delay_s = std::stod(secs, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      MT_REQUIRE(ConfigError, used > 0 && used == secs.size() && r.delay_s > 0 && r.delay_s <= 3600,
                 "MESHTRAIN_FAULT='", text, "': delay=SECONDS needs a number of seconds in (0, 3600], got '", secs,
                 "'");
    } else {
      MT_THROW(ConfigError, "MESHTRAIN_FAULT='", text, "': action '", action,
               "' (throw | kill | exit | term | delay=SECONDS | hang)");
    }
  }
  int64_t rank = -1;
  take_number('@', rank);
  take_number('#', r.hit);
  r.rank = int(rank);
  r.site = rest;
  MT_REQUIRE(ConfigError, !r.site.empty() && r.hit >= 1, "MESHTRAIN_FAULT='", text,
             "': expected SITE[@RANK][#HIT][:ACTION] with HIT >= 1");
  return r;
}

std::vector<Rule> parse_rules(const std::string& text) {
  std::vector<Rule> rules;
  for (size_t start = 0;;) {
    const size_t end = text.find(';', start);
    rules.push_back(parse_rule(text.substr(start, end == std::string::npos ? end : end - start)));
    if (end == std::string::npos) return rules;
    start = end + 1;
  }
}

void arm(const Rule& rule) { arm(std::vector<Rule>{rule}); }

void arm(const std::vector<Rule>& rules) {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  s.rules.clear();
  for (const Rule& r : rules) s.rules.push_back({r, 0, false});
  s.active = true;
}

void disarm() {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  s.rules.clear();
  s.active = s.counting;
}

bool fired() {
  std::lock_guard<std::mutex> lock(st().mu);
  for (const auto& a : st().rules)
    if (a.fired) return true;
  return false;
}

void set_thread_rank(int rank) { t_rank = rank; }
int thread_rank() { return t_rank; }

namespace {
thread_local int t_quiet = 0;
}  // namespace

Quiet::Quiet() { ++t_quiet; }
Quiet::~Quiet() { --t_quiet; }

void point(const char* site) { point(site, t_rank); }

void point(const char* site, int rank) {
  State& s = st();
  std::call_once(s.env_once, read_environment);
  if (!s.active.load(std::memory_order_relaxed) || t_quiet > 0) return;
  Action action = Action::Delay;
  int64_t hit = 0;
  double delay_s = 0;
  bool first = false, fires = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.counting) ++s.counts[{site, rank}];
    // Every matching rule counts the point; the first that fires acts.
    for (State::Armed& a : s.rules) {
      // A delay keeps firing after its hit (a straggler stays slow); the rest fire once.
      const bool again = a.fired && a.rule.action == Action::Delay;
      if ((a.fired && !again) || !matches(a.rule.site, site) || (a.rule.rank >= 0 && a.rule.rank != rank)) continue;
      if (++a.seen < a.rule.hit || fires) continue;
      fires = true;
      first = !a.fired;
      a.fired = true;
      action = a.rule.action;
      delay_s = a.rule.delay_s;
      hit = a.seen;
    }
    if (!fires) return;
  }
  if (first) {
    const char* name = action == Action::Throw  ? "throw"
                       : action == Action::Kill ? "kill"
                       : action == Action::Exit ? "exit"
                       : action == Action::Term ? "term"
                       : action == Action::Hang ? "hang"
                                                : "delay (here and at every later hit)";
    std::fprintf(stderr, "meshtrain fault injection: %s at rank %d (hit %lld): %s\n", site, rank,
                 static_cast<long long>(hit), name);
    std::fflush(stderr);
  }
  switch (action) {
    case Action::Kill: ::kill(::getpid(), SIGKILL); ::pause(); break;
    case Action::Exit: ::_exit(86);
    case Action::Term: ::kill(::getpid(), SIGTERM); return;
    case Action::Delay: std::this_thread::sleep_for(std::chrono::duration<double>(delay_s)); return;
    case Action::Hang:
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    case Action::Throw: break;
  }
  throw InjectedFault(detail::concat("injected fault at ", site, " on rank ", rank, " (hit ", hit, ")"));
}

}  // namespace meshtrain::fault
