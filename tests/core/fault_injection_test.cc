// Fault points: rule syntax, matching by site prefix, rank and hit count,
// firing once (a delay: at every hit from its own on), several rules at once.
#include "meshtrain/core/fault_injection.h"

#include <gtest/gtest.h>

#include <chrono>

namespace meshtrain::fault {
namespace {

struct Disarm {
  ~Disarm() { disarm(); }
};

TEST(FaultInjection, ParsesSiteRankHitAndAction) {
  Rule r = parse_rule("backward@1#3:kill");
  EXPECT_EQ(r.site, "backward");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.hit, 3);
  EXPECT_EQ(r.action, Action::Kill);
  r = parse_rule("commit.rename");
  EXPECT_EQ(r.site, "commit.rename");
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.hit, 1);
  EXPECT_EQ(r.action, Action::Throw);
  EXPECT_THROW(parse_rule("forward:explode"), ConfigError);
  EXPECT_THROW(parse_rule("forward#0"), ConfigError);
  EXPECT_THROW(parse_rule("#2"), ConfigError);
}

TEST(FaultInjection, FiresOnceAtTheHitOfTheMatchingRankAndSite) {
  Disarm guard;
  arm(parse_rule("commit@1#2"));
  EXPECT_NO_THROW(point("commit.manifest", 0));  // other rank
  EXPECT_NO_THROW(point("committed", 1));        // not below "commit"
  EXPECT_NO_THROW(point("commit.manifest", 1));  // hit 1
  EXPECT_FALSE(fired());
  EXPECT_THROW(point("commit.rename", 1), InjectedFault);  // hit 2
  EXPECT_TRUE(fired());
  EXPECT_NO_THROW(point("commit.rename", 1));  // once
}

TEST(FaultInjection, QuietPointsNeitherCountNorFire) {
  Disarm guard;
  arm(parse_rule("forward#2"));
  {
    const Quiet quiet;  // as the step recorded on the meta device
    EXPECT_NO_THROW(point("forward", 0));
    EXPECT_NO_THROW(point("forward", 0));
    EXPECT_NO_THROW(point("forward", 0));
  }
  EXPECT_NO_THROW(point("forward", 0));  // hit 1: the quiet ones did not count
  EXPECT_FALSE(fired());
  EXPECT_THROW(point("forward", 0), InjectedFault);
}

TEST(FaultInjection, ParsesDelayAndHang) {
  Rule r = parse_rule("forward@1#4:delay=0.25");
  EXPECT_EQ(r.site, "forward");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.hit, 4);
  EXPECT_EQ(r.action, Action::Delay);
  EXPECT_DOUBLE_EQ(r.delay_s, 0.25);
  EXPECT_EQ(parse_rule("backward@0#2:hang").action, Action::Hang);
  for (const char* bad : {"forward:delay=", "forward:delay=abc", "forward:delay=0", "forward:delay=-1",
                          "forward:delay=1s", "forward:delay=1e9", "forward:hang=3"}) {
    try {
      parse_rule(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(FaultInjection, ADelayKeepsFiringFromItsHitOn) {
  Disarm guard;
  arm(parse_rule("forward@0#2:delay=0.05"));
  auto timed = [](int rank) {
    const auto t0 = std::chrono::steady_clock::now();
    point("forward", rank);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  EXPECT_LT(timed(0), 0.04);  // hit 1
  EXPECT_FALSE(fired());
  EXPECT_GE(timed(1), 0.0);   // another rank: not counted
  EXPECT_LT(timed(1), 0.04);
  EXPECT_GE(timed(0), 0.05);  // hit 2
  EXPECT_TRUE(fired());
  EXPECT_GE(timed(0), 0.05);  // and every later one: a straggler stays slow
  EXPECT_GE(timed(0), 0.05);
}

TEST(FaultInjection, SeveralRulesEachCountTheirOwnHits) {
  Disarm guard;
  const std::vector<Rule> rules = parse_rules("metrics.written@0:delay=0.01;elastic.change@1#2:throw");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[1].site, "elastic.change");
  EXPECT_EQ(rules[1].hit, 2);
  EXPECT_THROW(parse_rules("forward;"), ConfigError);  // an empty rule
  arm(rules);
  EXPECT_NO_THROW(point("metrics.written", 0));  // the delay fires, and keeps firing
  EXPECT_TRUE(fired());
  EXPECT_NO_THROW(point("elastic.change", 1));  // hit 1 of the second rule
  EXPECT_NO_THROW(point("metrics.written", 0));
  EXPECT_THROW(point("elastic.change", 1), InjectedFault);  // its own hit 2
}

TEST(FaultInjection, ThreadRankIsUsedByDefault) {
  Disarm guard;
  arm(parse_rule("forward@3"));
  set_thread_rank(2);
  EXPECT_NO_THROW(point("forward"));
  set_thread_rank(3);
  EXPECT_THROW(point("forward"), InjectedFault);
  set_thread_rank(-1);
}

}  // namespace
}  // namespace meshtrain::fault
