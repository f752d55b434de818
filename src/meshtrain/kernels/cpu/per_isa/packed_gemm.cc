// The packed f32 GEMM (packed_gemm.h): blocks of op(B) [kKC x kNC] are
// packed once into a buffer the team shares, blocks of op(A) [kMC x kKC]
// into each thread's own, and packed_gemm_tiles.h's register tile runs over
// them. Loops, outermost first:
//   columns jc (kNC) > k blocks pc (kKC, in order) > [pack B, shared]
//   > this thread's rows ic (kMC) > [pack A] > panels jr (kNR) > strips ir (kMR).
// Threads split the rows of C in whole kMR strips; every element is summed
// over the same k blocks in the same order by whichever thread owns it, so
// the bits never depend on the team size (reproducible mode needs nothing
// more, SPEC S9). The buffers come from the calling thread's grow-only
// scratch: repeated shapes touch no fresh pages.
#include "meshtrain/kernels/cpu/packed_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/packed_gemm_tiles.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"
#include "meshtrain/kernels/cpu/scratch.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {
namespace {

using namespace packed_gemm_detail;

// Below this many multiply-adds one thread does it all (a fork/join and
// shared packing cost more than they save).
constexpr double kParallelMinMacs = 1 << 21;

// C tile at (rows m <= kMR, columns n <= kNR); partial tiles run the same
// full tile on a copy, so edge elements get the same arithmetic.
void edge_tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t m, int64_t n, float alpha,
               float beta) {
  if (m == kMR && n == kNR) return tile(kc, a, b, c, ldc, alpha, beta);
  alignas(64) float buf[kMR * kNR] = {};
  if (beta != 0.0f)
    for (int64_t r = 0; r < m; ++r) std::memcpy(buf + r * kNR, c + r * ldc, size_t(n) * sizeof(float));
  tile(kc, a, b, buf, kNR, alpha, beta);
  for (int64_t r = 0; r < m; ++r) std::memcpy(c + r * ldc, buf + r * kNR, size_t(n) * sizeof(float));
}

}  // namespace

PackedGemmBlocking packed_gemm_blocking() { return {kMR, kNR, kMC, kKC, kNC}; }

void packed_gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     const float* B, float beta, float* C) {
  if (M <= 0 || N <= 0 || K <= 0) return;  // gemm() handles the degenerate shapes
  const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
  const double macs = double(M) * double(N) * double(K);
  const int team = macs < kParallelMinMacs || omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
  const int64_t nc_max = std::min(kNC, (N + kNR - 1) / kNR * kNR), kc_max = std::min(kKC, K);
  const int64_t a_floats = kMC * kc_max + kPackSlack, b_floats = nc_max * kc_max + kPackSlack;
  thread_local Scratch scratch;
  float* const b_pack = static_cast<float*>(scratch.get((size_t(b_floats) + size_t(team) * a_floats) * sizeof(float)));
  const int64_t strips = (M + kMR - 1) / kMR;

#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    float* const a_pack = b_pack + b_floats + t * a_floats;
    const int64_t row_begin = strips * t / nt * kMR, row_end = std::min(M, strips * (t + 1) / nt * kMR);
    for (int64_t jc = 0; jc < N; jc += kNC) {
      const int64_t nc = std::min(kNC, N - jc), panels = (nc + kNR - 1) / kNR;
      for (int64_t pc = 0; pc < K; pc += kKC) {
        const int64_t kc = std::min(kKC, K - pc);
        const float* b_block = trans_b ? B + jc * ldb + pc : B + pc * ldb + jc;
#pragma omp for schedule(static)
        for (int64_t p = 0; p < panels; ++p) pack_b(b_block, ldb, trans_b, kc, nc, p, p + 1, b_pack);
        // (the loop's barrier: the whole B block is packed)
        const float beta_k = pc == 0 ? beta : 1.0f;  // later k blocks add to the sum so far
        for (int64_t ic = row_begin; ic < row_end; ic += kMC) {
          const int64_t mc = std::min(kMC, row_end - ic);
          pack_a(trans_a ? A + pc * lda + ic : A + ic * lda + pc, lda, trans_a, mc, kc, a_pack);
          for (int64_t jr = 0; jr < nc; jr += kNR)
            for (int64_t ir = 0; ir < mc; ir += kMR)
              edge_tile(kc, a_pack + ir * kc, b_pack + jr * kc, C + (ic + ir) * N + jc + jr, N,
                        std::min<int64_t>(kMR, mc - ir), std::min<int64_t>(kNR, nc - jr), alpha, beta_k);
        }
#pragma omp barrier
      }
    }
  }
}

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
