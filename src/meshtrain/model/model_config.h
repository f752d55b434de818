// Decoder-only transformer configuration. Llama-style by default (RMSNorm,
// RoPE, SwiGLU, GQA, untied head, no bias); GPT-2-style options (LayerNorm,
// learned positions, GELU MLP, tied embeddings, biases).
#pragma once

#include <cstdint>
#include <string>

namespace meshtrain::model {

enum class NormKind { RMSNorm, LayerNorm };
enum class PositionKind { Rope, Learned };
enum class MlpKind { SwiGLU, Gelu };

struct ModelConfig {
  int64_t vocab_size = 259;
  int64_t d_model = 256;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 4;
  int64_t head_dim = 0;  // 0: d_model / n_heads
  int64_t ffn_hidden = 0;  // 0: SwiGLU 8/3 d rounded up to 64, GELU 4 d
  int64_t max_seq_len = 256;
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-5;
  PositionKind positions = PositionKind::Rope;
  double rope_theta = 10000.0;
  MlpKind mlp = MlpKind::SwiGLU;
  bool tied_embeddings = false;
  bool bias = false;
  double init_std = 0.02;
  uint64_t seed = 1234;

  // Fills derived values (head_dim, ffn_hidden) and throws ConfigError with
  // the key path for an impossible shape.
  void finalize();
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  std::string describe() const;
};

const char* to_string(NormKind k);
const char* to_string(PositionKind k);
const char* to_string(MlpKind k);

}  // namespace meshtrain::model
