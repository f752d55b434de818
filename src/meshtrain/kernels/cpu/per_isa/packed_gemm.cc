// The packed GEMMs (packed_gemm.h): f32, and bf16 at the avx512 level, one
// template of the loops over an element kit (F32Kit, Bf16Kit below; kc
// counts k values, padded to pairs for bf16). Loops, outermost first:
//   k blocks pc (kKC, in order) > [pack op(A)'s rows, shared by the team]
//   > column blocks jc (nc) > [pack op(B) block, shared by the team]
//   > pieces of up to 16 strips ir (kMR) > panels jr (kNR) > register tile.
// With one column block (N <= nc_whole) a piece packs its own strips
// instead, right before their tiles, so its buffer stays small.
// A row-major op(A) is not packed: the tiles read its rows in place
// (unless they are a multiple of 4 KiB apart).
// An A strip (kMR x kKC) stays in L1 while the B panels of a block stream
// past it from L2 (the B block is sized to half of L2, or all of it when
// that makes N one block), and successive tiles walk along rows of C, which
// the hardware prefetchers follow; the next tile's C lines are prefetched
// while a tile computes.
// Each packing step and each column block's tiles are pieces of the team
// (compute_team.h: whoever is running takes the next, so a descheduled
// thread holds up one piece, not the GEMM); tile pieces are runs of whole
// kMR strips of C. Every element is summed over the same k blocks in the
// same order by whichever thread takes its strip, so the bits never depend
// on the team size or the hand-out (reproducible mode needs nothing
// more, docs/math.md, "Reproducible mode: the fixed summation tree"), nor
// on nc (only kKC shapes a sum). The buffers come from the calling
// thread's grow-only scratch: repeated shapes touch no fresh pages.
#include "meshtrain/kernels/cpu/packed_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "meshtrain/core/compute_team.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/packed_gemm_bf16_tiles.h"
#include "meshtrain/kernels/cpu/per_isa/packed_gemm_tiles.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"
#include "meshtrain/kernels/cpu/scratch.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {
namespace {

using namespace packed_gemm_detail;

// A strips a thread packs at a time when there is one column block (their
// tiles follow at once, from L2).
constexpr int64_t kChunkStrips = 16;

// What the loops below need of an element type: f32, or bf16 in pairs of
// k (packed_gemm_bf16_tiles.h). kc counts k values; a packed strip or
// panel holds padded(kc) of them.
struct F32Kit {
  using In = float;
  static constexpr int64_t kKC = packed_gemm_detail::kKC;
  static int64_t padded(int64_t kc) { return kc; }
  static bool in_place_k(int64_t) { return true; }
  static void pack_a(const In* a, int64_t lda, bool trans, int64_t m, int64_t kc, In* out) {
    packed_gemm_detail::pack_a(a, lda, trans, m, kc, out);
  }
  static void pack_b(const In* b, int64_t ldb, bool trans, int64_t kc, int64_t n, int64_t p0, int64_t p1, In* out) {
    packed_gemm_detail::pack_b(b, ldb, trans, kc, n, p0, p1, out);
  }
  template <bool kInPlaceA>
  static void tile(int64_t kc, const In* a, int64_t lda, const In* b, float* c, int64_t ldc, float alpha, float beta,
                   const float* c_in) {
    packed_gemm_detail::tile<kInPlaceA>(kc, a, lda, b, c, ldc, alpha, beta, c_in);
  }
};

#if MT_KERNEL_ISA == MT_ISA_AVX512
struct Bf16Kit {
  using In = bf16;  // its 16 bits (core/dtype.h), which the tiles read as uint16_t
  static constexpr int64_t kKC = kKCBf16;
  static int64_t padded(int64_t kc) { return even_up(kc); }
  // In place, a strip broadcasts (k, k + 1) from its rows: K even.
  static bool in_place_k(int64_t K) { return K % 2 == 0; }
  static const uint16_t* bits(const In* p) { return reinterpret_cast<const uint16_t*>(p); }
  static void pack_a(const In* a, int64_t lda, bool trans, int64_t m, int64_t kc, In* out) {
    pack_a_bf16(bits(a), lda, trans, m, kc, reinterpret_cast<uint16_t*>(out));
  }
  static void pack_b(const In* b, int64_t ldb, bool trans, int64_t kc, int64_t n, int64_t p0, int64_t p1, In* out) {
    pack_b_bf16(bits(b), ldb, trans, kc, n, p0, p1, reinterpret_cast<uint16_t*>(out));
  }
  template <bool kInPlaceA>
  static void tile(int64_t kc, const In* a, int64_t lda, const In* b, float* c, int64_t ldc, float alpha, float beta,
                   const float* c_in) {
    tile_bf16<kInPlaceA>(kc, bits(a), lda, bits(b), c, ldc, alpha, beta, c_in);
  }
};
#endif

// A tile's strip of op(A): packed (lda 0), or kMR rows of a row-major
// op(A) read in place, lda apart.
template <class Kit>
struct StripA {
  const typename Kit::In* a;
  int64_t lda;
};

template <class Kit>
void any_tile(int64_t kc, StripA<Kit> a, const typename Kit::In* b, float* c, int64_t ldc, float alpha, float beta,
              const float* c_in) {
  if (a.lda) return Kit::template tile<true>(kc, a.a, a.lda, b, c, ldc, alpha, beta, c_in);
  Kit::template tile<false>(kc, a.a, 0, b, c, ldc, alpha, beta, c_in);
}

// C tile at (rows m <= kMR, columns n <= kNR) = alpha op + beta C_in (at
// the same place in a matrix with the same ldc); partial tiles run the
// same full tile on a copy, so edge elements get the same arithmetic.
template <class Kit>
void edge_tile(int64_t kc, StripA<Kit> a, const typename Kit::In* b, float* c, int64_t ldc, int64_t m, int64_t n,
               float alpha, float beta, const float* c_in) {
  if (m == kMR && n == kNR) return any_tile<Kit>(kc, a, b, c, ldc, alpha, beta, c_in);
  alignas(64) float buf[kMR * kNR] = {};
  if (beta != 0.0f)
    for (int64_t r = 0; r < m; ++r) std::memcpy(buf + r * kNR, c_in + r * ldc, size_t(n) * sizeof(float));
  any_tile<Kit>(kc, a, b, buf, kNR, alpha, beta, buf);
  for (int64_t r = 0; r < m; ++r) std::memcpy(c + r * ldc, buf + r * kNR, size_t(n) * sizeof(float));
}

// Prefetches the lines of the C tile at c (rows x kNR, ldc) while the tile
// before it computes, so its stores find them in cache instead of waiting
// on memory. The write hint becomes PREFETCHW only where the level's target
// has it (none of ours enables it: a plain prefetch).
void prefetch_c_tile(const float* c, int64_t ldc, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < kNR; v += 64 / int64_t(sizeof(float))) __builtin_prefetch(c + r * ldc + v, 1, 3);
}

// Bytes of one column of a packed kKC-deep B block.
template <class Kit>
constexpr int64_t column_bytes() {
  return Kit::kKC * int64_t(sizeof(typename Kit::In));
}

// Columns per packed B block of a wide op(B): a kKC x nc block fills half
// of this core's L2 (so A strips, C and the next panels keep the other half).
template <class Kit>
int64_t block_columns() {
  static const int64_t nc = std::clamp<int64_t>(l2_bytes() / 2 / column_bytes<Kit>() / kNR * kNR, 4 * kNR, 64 * kNR);
  return nc;
}

// An op(B) up to this many columns is one block: kKC x N fits in the whole
// L2. One block is worth the larger panels: a row-major op(A) is read in
// place, a transposed one packed a chunk of strips at a time (not all of a
// thread's rows through memory), and row sets sharing op(B) pack it once
// (on a 1 MiB L2, most N = 512 GEMMs of bench-small: +3 to +13%,
// docs/performance.md).
template <class Kit>
int64_t whole_block_columns() {
  static const int64_t nc = std::max(block_columns<Kit>(), l2_bytes() / column_bytes<Kit>() / kNR * kNR);
  return nc;
}

template <class Kit>
int64_t columns_per_block(int64_t N) {
  const int64_t whole = (N + kNR - 1) / kNR * kNR;
  return whole <= whole_block_columns<Kit>() ? whole : std::min(block_columns<Kit>(), whole);
}

template <class Kit>
PackedGemmBlocking blocking_of() {
  return {kMR, kNR, Kit::kKC, block_columns<Kit>(), whole_block_columns<Kit>()};
}

template <class Kit>
void run_rows(bool trans_a, bool trans_b, const PackedGemmRowsOf<typename Kit::In>* rows, int count, int64_t N,
              int64_t K, float alpha, const typename Kit::In* B) {
  using In = typename Kit::In;
  constexpr int64_t kKC = Kit::kKC;
  if (N <= 0 || K <= 0) return;  // gemm() handles the degenerate shapes
  const int64_t ldb = trans_b ? K : N;
  double macs = 0;
  int64_t most_strips = 0;
  for (int s = 0; s < count; ++s) {
    macs += double(rows[s].M) * double(N) * double(K);
    most_strips = std::max(most_strips, (rows[s].M + kMR - 1) / kMR);
  }
  if (most_strips == 0) return;
  const int team = macs < kParallelMinMacs ? 1 : team_threads();
  const int64_t kc_max = std::min(kKC, K);
  const int64_t nc_max = columns_per_block<Kit>(N);
  const bool one_block = N <= nc_max;
  // A row-major op(A) is not packed: a tile broadcasts from its rows in
  // place, the same values in the same order (so the same bits), without
  // the pass through memory. Only a partial last strip is packed (its
  // padding rows are zero). Several column blocks read the rows again, as
  // they would read packed strips of more than L2 (the head's forward, N =
  // 8192: +8% or more at 1 thread, docs/performance.md). Packed stay: a
  // transposed op(A) (in place, a strip is one short piece of each of kc
  // rows: too many lines), and rows a multiple of 4 KiB apart (a strip's
  // rows would all fall in the same L1 sets).
  using Rows = PackedGemmRowsOf<In>;
  auto lda_of = [&](const Rows& r) { return trans_a ? r.M : K; };
  auto in_place = [&](const Rows& r) {
    return !trans_a && rows_apart_for_in_place<In>(lda_of(r)) && Kit::in_place_k(K);
  };
  bool all_in_place = true;
  for (int s = 0; s < count; ++s) all_in_place = all_in_place && in_place(rows[s]);
  // A packed op(A): with one column block each strip is used once per k
  // block, so a piece packs its strips right before their tiles (its
  // buffer stays small whatever M is); with several, the rows are packed
  // once per k block into a buffer every column block reads, one row set at
  // a time (each would need its own packed rows).
  if (!one_block && !all_in_place && count > 1) {
    for (int s = 0; s < count; ++s) run_rows<Kit>(trans_a, trans_b, rows + s, 1, N, K, alpha, B);
    return;
  }
  const bool shared_a = !one_block && !all_in_place;  // count == 1
  // Pieces of kMR-row strips, handed out to whoever of the team is running
  // (compute_team.h): kPiecesPerThread per thread where the strips allow,
  // at most kChunkStrips each (a packed piece's strips stay in L2).
  int64_t all_strips = 0;
  for (int s = 0; s < count; ++s) all_strips += (rows[s].M + kMR - 1) / kMR;
  const int64_t piece_strips =
      team == 1 ? kChunkStrips : std::clamp<int64_t>(all_strips / (team * kPiecesPerThread), 1, kChunkStrips);
  std::vector<int64_t> first_piece(size_t(count) + 1, 0);  // row set s: pieces [first_piece[s], first_piece[s + 1])
  for (int s = 0; s < count; ++s)
    first_piece[size_t(s) + 1] = first_piece[size_t(s)] + ((rows[s].M + kMR - 1) / kMR + piece_strips - 1) / piece_strips;
  const int64_t kcp_max = Kit::padded(kc_max);
  const int64_t b_elements = nc_max * kcp_max + kPackSlack;
  const int64_t a_strips = all_in_place || shared_a ? 1 : piece_strips;
  const int64_t a_elements = a_strips * kMR * kcp_max + kPackSlack;  // per thread
  const int64_t shared_elements = shared_a ? most_strips * kMR * kcp_max + kPackSlack : 0;
  thread_local Scratch scratch;
  In* const b_pack =
      static_cast<In*>(scratch.get(size_t(b_elements + team * a_elements + shared_elements) * sizeof(In)));
  In* const a_shared = b_pack + b_elements + team * a_elements;
  auto share = [&](int64_t pieces, auto&& f) { run_pieces_if(team > 1, pieces, f); };

  for (int64_t pc = 0; pc < K; pc += kKC) {
    const int64_t kc = std::min(kKC, K - pc), kcp = Kit::padded(kc);
    auto pack_rows = [&](const Rows& r, int64_t i0, int64_t i1, In* out) {
      const int64_t lda = lda_of(r);
      Kit::pack_a(trans_a ? r.A + pc * lda + i0 : r.A + i0 * lda + pc, lda, trans_a, i1 - i0, kc, out);
    };
    // Several column blocks, one row set: its rows packed once per k block.
    if (shared_a) {
      const Rows& r = rows[0];
      share(first_piece[1], [&](int64_t p, int) {
        const int64_t i0 = p * piece_strips * kMR, i1 = std::min(r.M, i0 + piece_strips * kMR);
        pack_rows(r, i0, i1, a_shared + i0 * kcp);
      });
    }
    for (int64_t jc = 0; jc < N; jc += nc_max) {
      const int64_t nc = std::min(nc_max, N - jc), panels = (nc + kNR - 1) / kNR;
      const In* b_block = trans_b ? B + jc * ldb + pc : B + pc * ldb + jc;
      const int64_t b_pieces = std::min<int64_t>(panels, team * kPiecesPerThread);
      share(b_pieces, [&](int64_t p, int) {
        Kit::pack_b(b_block, ldb, trans_b, kc, nc, panels * p / b_pieces, panels * (p + 1) / b_pieces, b_pack);
      });
      // Every row set against the one packed B block; a piece is a run of
      // strips of one row set.
      share(first_piece[size_t(count)], [&](int64_t p, int slot) {
        const int s = int(std::upper_bound(first_piece.begin(), first_piece.end(), p) - first_piece.begin()) - 1;
        const Rows& r = rows[s];
        const int64_t row_begin = (p - first_piece[size_t(s)]) * piece_strips * kMR;
        const int64_t row_end = std::min(r.M, row_begin + piece_strips * kMR), lda = lda_of(r);
        In* const a_pack = b_pack + b_elements + slot * a_elements;
        const bool in_place_a = in_place(r);
        const float beta_k = pc == 0 ? r.beta : 1.0f;  // later k blocks add to the sum so far
        float* const C = r.C;
        const float* const C_in = pc == 0 && r.C_in ? r.C_in : C;
        if (!in_place_a && !shared_a) pack_rows(r, row_begin, row_end, a_pack);
        for (int64_t ir = row_begin; ir < row_end; ir += kMR) {
          // In place, or packed: this piece's strip, the shared rows' strip,
          // or an in-place op(A)'s partial last strip.
          StripA<Kit> strip{shared_a ? a_shared + ir * kcp : a_pack + (ir - row_begin) * kcp, 0};
          if (in_place_a) {
            if (ir + kMR <= r.M) {
              strip = {r.A + ir * lda + pc, lda};
            } else {
              pack_rows(r, ir, row_end, a_pack);
              strip = {a_pack, 0};
            }
          }
          for (int64_t jr = 0; jr < nc; jr += kNR) {
            const int64_t next_ir = jr + kNR < nc ? ir : ir + kMR, next_jr = jr + kNR < nc ? jr + kNR : 0;
            if (next_ir < row_end) {
              const int64_t next = next_ir * N + jc + next_jr;
              const int64_t rows_next = std::min<int64_t>(kMR, row_end - next_ir);
              prefetch_c_tile(C + next, N, rows_next);
              if (C_in != C && beta_k != 0.0f) prefetch_c_tile(C_in + next, N, rows_next);
            }
            const int64_t at = ir * N + jc + jr;
            edge_tile<Kit>(kc, strip, b_pack + jr * kcp, C + at, N, std::min<int64_t>(kMR, row_end - ir),
                           std::min<int64_t>(kNR, nc - jr), alpha, beta_k, C_in + at);
          }
        }
      });
    }
  }
}

}  // namespace

PackedGemmBlocking packed_gemm_blocking() { return blocking_of<F32Kit>(); }

void packed_gemm_f32_rows(bool trans_a, bool trans_b, const PackedGemmRows* rows, int count, int64_t N, int64_t K,
                          float alpha, const float* B) {
  run_rows<F32Kit>(trans_a, trans_b, rows, count, N, K, alpha, B);
}

#if MT_KERNEL_ISA == MT_ISA_AVX512
PackedGemmBlocking packed_gemm_bf16_blocking() { return blocking_of<Bf16Kit>(); }

void packed_gemm_bf16_rows(bool trans_a, bool trans_b, const PackedGemmRowsBf16* rows, int count, int64_t N, int64_t K,
                           float alpha, const bf16* B) {
  run_rows<Bf16Kit>(trans_a, trans_b, rows, count, N, K, alpha, B);
}
#endif

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
