// Rotary position embedding, HF Llama convention (rotate_half: the pair of
// element i is i + head_dim/2). x [n, heads, head_dim], pos [n] (int32, the
// position within the token's document). Tables [max_pos, head_dim/2].
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

namespace meshtrain::kernels {

struct RopeTable {
  int64_t max_pos = 0, half = 0;
  std::vector<float> cos, sin;        // [max_pos, half], f32 activations'
  std::vector<double> cos64, sin64;   // the same angles for f64 activations (not rounded to f32)
  template <typename T>
  const T* cos_row(int64_t pos) const {
    if constexpr (std::is_same_v<T, double>) return cos64.data() + pos * half;
    else return cos.data() + pos * half;
  }
  template <typename T>
  const T* sin_row(int64_t pos) const {
    if constexpr (std::is_same_v<T, double>) return sin64.data() + pos * half;
    else return sin.data() + pos * half;
  }
};
RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, double theta);

// In place. inverse = true rotates by -angle (the backward of forward).
template <typename T>
void rope_apply(T* x, const int32_t* pos, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& table,
                bool inverse);

}  // namespace meshtrain::kernels
