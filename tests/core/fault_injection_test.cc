// Fault points: rule syntax, matching by site prefix, rank and hit count,
// firing once.
#include "meshtrain/core/fault_injection.h"

#include <gtest/gtest.h>

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
