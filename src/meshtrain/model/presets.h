// Named model configurations that benchmarks and tests share.
#pragma once

#include "meshtrain/model/model_config.h"

namespace meshtrain::model {

// bench-small: Llama-style, vocab 8192, d_model 512, 8 layers, 8 query heads
// and 4 KV heads of 64, SwiGLU hidden 1408, RMSNorm eps 1e-5, RoPE theta
// 10000, untied, no bias; 179.3 MFLOP per token at sequence 256.
ModelConfig bench_small_config();

// GPT-2 124M: vocab 50257, d_model 768, 12 layers, 12 heads of 64, GELU
// (tanh) hidden 3072, LayerNorm eps 1e-5, learned positions (1024), biases,
// tied embeddings.
ModelConfig gpt2_124m_config();

}  // namespace meshtrain::model
