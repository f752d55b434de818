#include "meshtrain/core/threading.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

using namespace meshtrain;

TEST(Threading, RanksShareTheCores) {
  const int cores = hardware_cores();
  EXPECT_GE(cores, 1);
  EXPECT_EQ(threads_per_rank(1), threads_for(core_load(), 1));
  EXPECT_EQ(core_load().cores, cores);
  EXPECT_EQ(threads_per_rank(cores * 4), 1);  // never zero
  EXPECT_EQ(threads_per_rank(0), threads_per_rank(1));
}

// The default leaves the cores other processes keep busy to them.
TEST(Threading, DefaultThreadsLeaveBusyCoresToOthers) {
  EXPECT_EQ(threads_for({2, 0.0}, 1), 2);  // quiet
  EXPECT_EQ(threads_for({2, 1.0}, 1), 1);
  EXPECT_EQ(threads_for({2, 2.0}, 1), 1);  // never below one
  EXPECT_EQ(threads_for({2, 6.0}, 1), 1);
  EXPECT_EQ(threads_for({8, 2.4}, 1), 6);  // rounded to whole cores
  EXPECT_EQ(threads_for({8, 2.6}, 1), 5);
  EXPECT_EQ(threads_for({8, 0.0}, 2), 4);  // ranks share what is idle
  EXPECT_EQ(threads_for({8, 1.0}, 2), 4);  // the other rank is not load
  EXPECT_EQ(threads_for({8, 3.0}, 2), 3);
  EXPECT_EQ(threads_for({2, 0.0}, 8), 1);
}

// Busy cores: the least of the samples, as a share of the machine.
TEST(Threading, BusyCoresAreTheLeastSampleScaledToOurCores) {
  EXPECT_DOUBLE_EQ(busy_cores({3, 2, 5}, 2, 2), 2.0);  // a burst is not load
  EXPECT_DOUBLE_EQ(busy_cores({8, 8}, 2, 16), 1.0);    // 2 of 16 CPUs see 1/8 of it
  EXPECT_DOUBLE_EQ(busy_cores({}, 4, 4), 0.0);         // nothing readable: idle
  EXPECT_DOUBLE_EQ(busy_cores({0}, 4, 4), 0.0);
}

TEST(Threading, TeamSizeIsPerThread) {
  // Each rank thread sets its own OpenMP team size.
  int seen_a = 0, seen_b = 0;
  std::thread a([&] {
    set_compute_threads(1);
    seen_a = compute_threads();
  });
  std::thread b([&] {
    set_compute_threads(3);
    seen_b = compute_threads();
  });
  a.join();
  b.join();
  EXPECT_EQ(seen_a, 1);
  EXPECT_EQ(seen_b, 3);
}

TEST(Threading, CgroupCpuMaxIsRoundedUpToWholeCores) {
  EXPECT_EQ(parse_cgroup_cpu_max("150000 100000"), 2);
  EXPECT_EQ(parse_cgroup_cpu_max("50000 100000"), 1);
  EXPECT_EQ(parse_cgroup_cpu_max("400000 100000"), 4);
  EXPECT_EQ(parse_cgroup_cpu_max("max 100000"), std::nullopt);
  EXPECT_EQ(parse_cgroup_cpu_max(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_cpu_max("12x 100000"), std::nullopt);
}

// taskset / cpusets: a thread allowed on one CPU has one core, whatever the
// machine has.
TEST(Threading, AffinityMaskLimitsTheCores) {
  int seen = 0;
  std::thread t([&] {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
    int first = 0;
    while (!CPU_ISSET(first, &mine)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    seen = hardware_cores();
  });
  t.join();
  EXPECT_EQ(seen, 1);
}
