// The compute threads of one calling thread (a rank): a team that hands out
// numbered pieces of work from an atomic counter. Whoever is running takes
// the next piece, so a team member the OS has descheduled (other processes
// on the cores, ranks outnumbering cores) holds up at most the one piece it
// took, never a whole parallel region: the caller waits for the pieces
// taken, never for every member to arrive (docs/performance.md, "Shared
// cores"). What a piece computes must not depend on which thread runs it,
// so results never depend on the team size or on the hand-out.
#pragma once

#include <cstdint>
#include <type_traits>

namespace meshtrain {

// A piece's body: piece in [0, pieces); slot in [0, team size) names the
// thread running it (0: the caller), for per-thread scratch.
using PieceFn = void (*)(void* ctx, int64_t piece, int slot);

// Runs fn(ctx, p, slot) once for every p in [0, pieces) on the calling
// thread's team (compute_threads(), threading.h) and returns when all have
// finished. Inline, slot 0, when the team has one thread, pieces < 2, or the
// caller is itself running a piece (no nesting). Pieces of a team of more
// than one see an OpenMP team size of 1 (oneDNN called from a piece runs
// on its thread alone). fn must not throw.
void run_pieces_raw(int64_t pieces, PieceFn fn, void* ctx);

// Size of the calling thread's team: its OpenMP team size (the one setting
// for both, threading.h's set_compute_threads); 1 inside a piece.
int team_threads();
// True while this thread runs a piece of a team with more than one thread.
bool in_team_piece();

// Runs f(piece, slot) for every piece, as run_pieces_raw.
template <typename F>
void run_pieces(int64_t pieces, F&& f) {
  using Body = std::remove_reference_t<F>;
  run_pieces_raw(
      pieces, [](void* ctx, int64_t p, int slot) { (*static_cast<Body*>(ctx))(p, slot); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// As run_pieces when `par`, else every piece in order on this thread (slot 0).
template <typename F>
void run_pieces_if(bool par, int64_t pieces, F&& f) {
  if (par) return run_pieces(pieces, f);
  for (int64_t p = 0; p < pieces; ++p) f(p, 0);
}

// For tests: while true, the calling thread's team members take no pieces
// (as if the OS never ran them): a run must still finish, on the caller alone.
void hold_team_workers_for_testing(bool hold);

}  // namespace meshtrain
