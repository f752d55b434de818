// run_ranks(n, fn): one thread per rank, each calling fn(rank); waits at
// most `timeout` and rethrows the first failure (by rank order). A rank still
// running past the timeout fails the test instead of hanging the suite.
#pragma once

#include <chrono>
#include <functional>

namespace meshtrain::testing {

void run_ranks(int n, const std::function<void(int rank)>& fn,
               std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace meshtrain::testing
