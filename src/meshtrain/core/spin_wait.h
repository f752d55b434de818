// Waiting for another thread's store on a shared machine: spin briefly (the
// store usually comes within microseconds when every thread has a core),
// then yield the core a few times, then sleep on the word (a futex through
// std::atomic::wait) until a notify. A waiter that keeps spinning on an
// oversubscribed machine takes the core from the very thread it waits for
// (docs/performance.md, "Shared cores").
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace meshtrain {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a waiter spins, then how many times it yields, before sleeping.
inline constexpr std::chrono::microseconds kSpinFor{50};
inline constexpr int kYields = 8;

// Returns once ready(word) holds; the thread that makes it hold must notify
// the word after its store (notify_one / notify_all cost a load when nobody
// sleeps).
template <typename Ready>
void spin_wait(std::atomic<uint32_t>& word, Ready&& ready) {
  uint32_t v = word.load(std::memory_order_acquire);
  if (ready(v)) return;
  const auto until = std::chrono::steady_clock::now() + kSpinFor;
  for (int i = 1;; ++i) {
    cpu_relax();
    v = word.load(std::memory_order_acquire);
    if (ready(v)) return;
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
  }
  for (int i = 0; i < kYields; ++i) {
    sched_yield();
    v = word.load(std::memory_order_acquire);
    if (ready(v)) return;
  }
  for (;;) {
    word.wait(v, std::memory_order_acquire);
    v = word.load(std::memory_order_acquire);
    if (ready(v)) return;
  }
}

}  // namespace meshtrain
