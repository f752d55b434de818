#include "meshtrain/model/presets.h"

namespace meshtrain::model {

ModelConfig bench_small_config() {
  ModelConfig c;
  c.vocab_size = 8192;
  c.d_model = 512;
  c.n_layers = 8;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 64;
  c.ffn_hidden = 1408;
  c.max_seq_len = 256;
  c.norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.finalize();
  return c;
}

ModelConfig gpt2_124m_config() {
  ModelConfig c;
  c.vocab_size = 50257;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.n_kv_heads = 12;
  c.head_dim = 64;
  c.ffn_hidden = 3072;
  c.max_seq_len = 1024;
  c.norm = NormKind::LayerNorm;
  c.norm_eps = 1e-5;
  c.positions = PositionKind::Learned;
  c.mlp = MlpKind::Gelu;
  c.bias = true;
  c.tied_embeddings = true;
  c.finalize();
  return c;
}

}  // namespace meshtrain::model
