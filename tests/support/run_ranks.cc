#include "support/run_ranks.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace meshtrain::testing {

void run_ranks(int n, const std::function<void(int rank)>& fn, std::chrono::milliseconds timeout) {
  std::vector<std::exception_ptr> errors(n);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    });
  }
  bool finished;
  {
    std::unique_lock<std::mutex> lock(mu);
    finished = cv.wait_for(lock, timeout, [&] { return done == n; });
  }
  if (!finished) {
    // Threads blocked forever cannot be joined; a hung rank is a test failure
    // that must not hang the suite.
    std::fprintf(stderr, "run_ranks: %d of %d ranks still running after %lld ms\n", n - done, n,
                 static_cast<long long>(timeout.count()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace meshtrain::testing
