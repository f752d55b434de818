// The packed GEMM's sum over blocks of k in the tree (packed_gemm.h,
// packed_gemm_f32_tree; docs/math.md (M.73), (M.74)). Loops, outermost
// first:
//   column blocks jc > [pack op(B) of every term's leaves, kKC chunk by
//   chunk, shared by the team] > pieces of kPieceStrips strips of rows (the
//   team's hand-out) > leaves j > terms > kKC chunks > strips > panels >
//   register tile, into the leaf.
// A piece keeps its leaves and subtrees (kPieceStrips kMR rows x the
// block's columns each) in L2, adds them as BlockTree adds whole tensors,
// and writes the root to C once: one pass over C where the separate GEMMs
// write every leaf and the tree reads and writes each again. An element's
// leaf is the same register tile over the same chunks as packed_gemm.cc
// gives the GEMM on the block alone (its k blocks of kKC start at the
// block's start), written and then added with beta 1, so its bits are
// those GEMMs' and the tree's, whatever the team size, the hand-out or the
// column blocking.
#include <algorithm>
#include <cstring>
#include <vector>

#include "meshtrain/core/compute_team.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/subtree_counter.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/packed_gemm_tiles.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"
#include "meshtrain/kernels/cpu/per_isa/tree_add.h"
#include "meshtrain/kernels/cpu/scratch.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {
namespace {

using namespace packed_gemm_detail;

// Strips of rows a piece sums: its subtrees stay in L2 beside the panels.
constexpr int64_t kPieceStrips = 4;
// op(B) of one column block, every leaf of every term: at most this many
// bytes (it streams from L3 past each piece's strips).
constexpr int64_t kPackedBBytes = int64_t(4) << 20;

// A kKC (or shorter) piece of one term's block of one leaf, and where its
// packed op(B) starts in the column block's buffer.
struct Chunk {
  int term;
  int64_t k0, kc;
  int64_t b_at;
};

// The subtrees a SubtreeCounter over `leaves` holds at once, plus the leaf
// being written.
int64_t tree_depth(int leaves) {
  int64_t depth = 1;
  while ((int64_t(1) << depth) <= leaves) ++depth;
  return depth + 1;
}

}  // namespace

void packed_gemm_f32_tree(const PackedGemmTreeTerm* terms, int count, int leaves, int64_t M, int64_t N,
                          bool accumulate, float* C) {
  if (M <= 0 || N <= 0 || count <= 0 || leaves <= 0) return;
  // Each leaf's chunks, in the order their products are added.
  std::vector<std::vector<Chunk>> chunks(static_cast<size_t>(leaves));
  int64_t k_total = 0;
  for (int j = 0; j < leaves; ++j)
    for (int t = 0; t < count; ++t) {
      const int64_t off = terms[t].k_offsets[j], len = terms[t].k_lengths[j];
      MT_CHECK(len > 0, "packed_gemm_f32_tree: an empty block of k");
      for (int64_t k0 = off; k0 < off + len; k0 += kKC)
        chunks[size_t(j)].push_back({t, k0, std::min(kKC, off + len - k0), 0});
      k_total += len;
    }
  const int team = double(M) * double(N) * double(k_total) < kParallelMinMacs ? 1 : team_threads();
  const int64_t depth = tree_depth(leaves), rows_cap = kPieceStrips * kMR;
  const int64_t n_whole = (N + kNR - 1) / kNR * kNR;
  // Column blocks: op(B)'s chunks fit kPackedBBytes, the subtrees half of L2.
  const int64_t by_b = kPackedBBytes / int64_t(sizeof(float)) / std::max<int64_t>(k_total, 1) / kNR * kNR;
  const int64_t by_tree = l2_bytes() / 2 / int64_t(sizeof(float)) / (depth * rows_cap) / kNR * kNR;
  const int64_t nb_max = std::clamp<int64_t>(std::min(by_b, by_tree), kNR, n_whole);
  int64_t chunk_count = 0;
  for (const auto& leaf : chunks) chunk_count += int64_t(leaf.size());
  const int64_t b_elements = k_total * nb_max + chunk_count * kPackSlack;
  const int64_t level_elements = rows_cap * nb_max;
  const int64_t slot_elements = depth * level_elements + kMR * kKC + kPackSlack;  // subtrees, an A strip
  thread_local Scratch scratch;
  float* const b_pack = static_cast<float*>(scratch.get(size_t(b_elements + team * slot_elements) * sizeof(float)));
  const int64_t pieces = (M + rows_cap - 1) / rows_cap;

  for (int64_t jc = 0; jc < N; jc += nb_max) {
    const int64_t nb = std::min(nb_max, N - jc), panels = (nb + kNR - 1) / kNR, ldl = panels * kNR;
    std::vector<Chunk*> all;
    int64_t at = 0;
    for (auto& leaf : chunks)
      for (Chunk& c : leaf) {
        c.b_at = at;
        at += c.kc * ldl + kPackSlack;  // the slack: a pack's vector stores may run past its chunk
        all.push_back(&c);
      }
    run_pieces_if(team > 1, int64_t(all.size()), [&](int64_t p, int) {
      const Chunk& c = *all[size_t(p)];
      const PackedGemmTreeTerm& t = terms[c.term];
      const float* b = t.trans_b ? t.B + jc * t.ldb + c.k0 : t.B + c.k0 * t.ldb + jc;
      pack_b(b, t.ldb, t.trans_b, c.kc, nb, 0, panels, b_pack + c.b_at);
    });
    run_pieces_if(team > 1, pieces, [&](int64_t p, int slot) {
      float* const levels = b_pack + b_elements + slot * slot_elements;
      float* const a_pack = levels + depth * level_elements;
      const int64_t i0 = p * rows_cap, i1 = std::min(M, i0 + rows_cap), strips = (i1 - i0 + kMR - 1) / kMR;
      const int64_t used = strips * kMR * ldl;  // the elements of a leaf this piece writes
      SubtreeCounter tree;  // subtree i in levels + i * level_elements
      auto add = [&](size_t left, size_t right) {
        add_values(levels + int64_t(left) * level_elements, levels + int64_t(right) * level_elements, used);
      };
      for (int j = 0; j < leaves; ++j) {
        float* const leaf = levels + int64_t(tree.size()) * level_elements;
        bool first = true;
        for (const Chunk& c : chunks[size_t(j)]) {
          const PackedGemmTreeTerm& t = terms[c.term];
          for (int64_t s = 0; s < strips; ++s) {
            const int64_t ir = i0 + s * kMR, rows = std::min<int64_t>(kMR, i1 - ir);
            const bool in_place = !t.trans_a && rows == kMR && rows_apart_for_in_place<float>(t.lda);
            if (!in_place)
              pack_a(t.trans_a ? t.A + c.k0 * t.lda + ir : t.A + ir * t.lda + c.k0, t.lda, t.trans_a, rows, c.kc,
                     a_pack);
            float* const row = leaf + s * kMR * ldl;
            for (int64_t q = 0; q < panels; ++q) {
              const float* const b = b_pack + c.b_at + q * kNR * c.kc;
              float* const out = row + q * kNR;
              const float beta = first ? 0.0f : 1.0f;
              if (in_place)
                tile<true>(c.kc, t.A + ir * t.lda + c.k0, t.lda, b, out, ldl, 1.0f, beta, out);
              else
                tile<false>(c.kc, a_pack, 0, b, out, ldl, 1.0f, beta, out);
            }
          }
          first = false;
        }
        tree.push(add);
      }
      tree.fold(add);
      for (int64_t i = i0; i < i1; ++i) {
        float* const c = C + i * N + jc;
        const float* const root = levels + (i - i0) * ldl;
        if (accumulate)
          add_values(c, root, nb);
        else
          std::memcpy(c, root, size_t(nb) * sizeof(float));
      }
    });
  }
}

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
