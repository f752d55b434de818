#include "meshtrain/core/threading.h"

#include <gtest/gtest.h>

#include <thread>

using namespace meshtrain;

TEST(Threading, RanksShareTheCores) {
  const int cores = hardware_cores();
  EXPECT_GE(cores, 1);
  EXPECT_EQ(threads_per_rank(1), cores);
  EXPECT_EQ(threads_per_rank(cores * 4), 1);  // never zero
  EXPECT_EQ(threads_per_rank(0), cores);
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
