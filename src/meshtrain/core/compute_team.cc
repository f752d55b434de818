// The team of compute_team.h. One job at a time per team: the caller
// publishes (pieces, fn, ctx), takes pieces itself and waits until every
// piece taken has finished. Pieces are claimed from one 64-bit word holding
// the job's piece count (high half) and the next piece (low half), so a
// claim and the count it is checked against are read together: a member
// that wakes up late claims from whatever job is current, or finds nothing
// and goes back to waiting, and never runs a piece twice. Waits spin
// briefly, then yield the core, then sleep on the word (futex), so an
// oversubscribed machine's cores go to whoever has work (spin_wait.h).
#include "meshtrain/core/compute_team.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/spin_wait.h"

namespace meshtrain {
namespace {

thread_local bool t_in_piece = false;

// While a thread runs pieces: calls from them run inline, and OpenMP's team
// size is 1, so oneDNN called from a piece runs on that thread alone (as it
// did inside an OpenMP parallel region; gemm.cc's thread-invariant GEMM
// relies on it).
class InPieces {
 public:
  InPieces() : omp_threads_(omp_get_max_threads()), was_(t_in_piece) {
    t_in_piece = true;
    omp_set_num_threads(1);
  }
  ~InPieces() {
    omp_set_num_threads(omp_threads_);
    t_in_piece = was_;
  }
  InPieces(const InPieces&) = delete;
  InPieces& operator=(const InPieces&) = delete;

 private:
  const int omp_threads_;
  const bool was_;
};

class Team {
 public:
  explicit Team(int threads) : threads_(threads) {
    workers_.reserve(size_t(threads - 1));
    for (int slot = 1; slot < threads; ++slot) workers_.emplace_back([this, slot] { work(slot); });
  }
  ~Team() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int threads() const { return threads_; }
  void hold(bool on) { hold_.store(on, std::memory_order_relaxed); }

  void run(int64_t pieces, PieceFn fn, void* ctx) {
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    claims_.store(uint64_t(pieces) << 32, std::memory_order_release);  // publishes fn_, ctx_, done_
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    take_pieces(0);
    const uint32_t all = uint32_t(pieces);
    spin_wait(done_, [&](uint32_t d) { return d == all; });
  }

 private:
  // Claims and runs pieces of the current job until none is left.
  void take_pieces(int slot) {
    while (slot == 0 || !hold_.load(std::memory_order_relaxed)) {
      const uint64_t claim = claims_.fetch_add(1, std::memory_order_acq_rel);
      const uint32_t piece = uint32_t(claim), pieces = uint32_t(claim >> 32);
      if (piece >= pieces) return;
      // The job cannot finish (nor be replaced) before this piece does.
      fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), int64_t(piece), slot);
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == pieces) done_.notify_one();
    }
  }

  void work(int slot) {
    const InPieces in_pieces;  // all this thread ever runs
    uint32_t seen = 0;
    for (;;) {
      spin_wait(generation_, [&](uint32_t g) { return g != seen; });
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      take_pieces(slot);
    }
  }

  const int threads_;
  std::atomic<uint64_t> claims_{0};  // pieces << 32 | next piece
  std::atomic<uint32_t> done_{0};    // pieces of the current job finished
  std::atomic<uint32_t> generation_{0};  // bumped per job: idle members wait on it
  std::atomic<PieceFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<bool> stop_{false}, hold_{false};
  std::vector<std::thread> workers_;
};

thread_local std::unique_ptr<Team> t_team;

Team& team_of_this_thread(int threads) {
  if (!t_team || t_team->threads() != threads) {
    t_team.reset();
    t_team = std::make_unique<Team>(threads);
  }
  return *t_team;
}

}  // namespace

int team_threads() { return t_in_piece ? 1 : std::max(1, omp_get_max_threads()); }

bool in_team_piece() { return t_in_piece; }

void run_pieces_raw(int64_t pieces, PieceFn fn, void* ctx) {
  const int threads = team_threads();
  if (pieces <= 0) return;
  if (threads <= 1) {
    for (int64_t p = 0; p < pieces; ++p) fn(ctx, p, 0);
    return;
  }
  MT_CHECK(pieces < (int64_t(1) << 31), "run_pieces: ", pieces, " pieces (at most 2^31 - 1)");
  Team* team = pieces < 2 ? nullptr : &team_of_this_thread(threads);
  const InPieces in_pieces;
  if (team) return team->run(pieces, fn, ctx);
  fn(ctx, 0, 0);
}

void hold_team_workers_for_testing(bool hold) { team_of_this_thread(team_threads()).hold(hold); }

}  // namespace meshtrain
