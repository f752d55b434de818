// Rotary position embedding, HF Llama rotate_half convention:
//   out[i]        = x[i] cos - x[i + half] sin
//   out[i + half] = x[i + half] cos + x[i] sin,   angle = pos * theta^(-2i/d)
// x [n, heads, head_dim], pos [n], table [max_pos, half].
#include "meshtrain/kernels/cpu/rope.h"

#include <cmath>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/per_isa/isa_target.h"
#include "meshtrain/kernels/cpu/per_isa/per_isa_kernels.h"

MT_ISA_BEGIN
namespace meshtrain::kernels::MT_ISA_NS {

template <typename T>
void rope_apply(T* x, const int32_t* pos, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& table,
                bool inverse) {
  const int64_t half = head_dim / 2;
  MT_CHECK(head_dim % 2 == 0 && half == table.half, "rope: head_dim ", head_dim, " does not match table half ",
           table.half);
  for (int64_t i = 0; i < n; ++i)
    MT_REQUIRE(DataError, pos[i] >= 0 && pos[i] < table.max_pos, "rope: position ", pos[i], " of token ", i,
               " is outside the table [0, ", table.max_pos, ")");
  const T sign = inverse ? T(-1) : T(1);
  parallel_range(n, n * heads * head_dim, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* c = table.cos_row<T>(pos[i]);
      const T* s = table.sin_row<T>(pos[i]);
      for (int64_t h = 0; h < heads; ++h) {
        T* x1 = x + (i * heads + h) * head_dim;
        T* x2 = x1 + half;
#pragma omp simd
        for (int64_t j = 0; j < half; ++j) {
          const T cj = c[j], sj = sign * s[j];
          const T a = x1[j], b = x2[j];
          x1[j] = a * cj - b * sj;
          x2[j] = b * cj + a * sj;
        }
      }
    }
  });
}

#define MT_INSTANTIATE(T) template void rope_apply<T>(T*, const int32_t*, int64_t, int64_t, int64_t, const RopeTable&, bool);
MT_PER_ISA_INSTANTIATE(MT_INSTANTIATE)
#undef MT_INSTANTIATE

}  // namespace meshtrain::kernels::MT_ISA_NS
MT_ISA_END
