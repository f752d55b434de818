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

}  // namespace meshtrain::model
