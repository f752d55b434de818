// A Llama-family model (what exports as LlamaForCausalLM or
// MixtralForCausalLM, hf_format.h) as a GGUF file for llama.cpp: its
// architecture "llama" keys, tensors under llama.cpp's names, query and key
// rows reordered from the rotate-half RoPE pairing to llama.cpp's adjacent
// pairs, and the tokenizer inside (docs/checkpoints.md, "GGUF").
#pragma once

#include <string>
#include <vector>

#include "meshtrain/checkpoint/gguf_file.h"
#include "meshtrain/checkpoint/hf_format.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::checkpoint {

struct GgufModel {
  GgufWriter file;
  // Tensors stored in another type than asked, with the reason (q8_0 needs
  // rows of a multiple of 32; norms, biases and routers stay f32).
  std::vector<std::string> notes;
};

// CheckpointError when the model is not Llama-family or the tokenizer has
// no llama.cpp vocabulary (a SentencePiece unigram model).
GgufModel gguf_model(const model::ModelConfig& cfg, const ParamValues& params, const data::Tokenizer& tokenizer,
                     GgmlType type, const std::string& name);

// Row order of a [heads * head_dim, ...] projection for llama.cpp's RoPE:
// within each head, row 2i + t takes rotate-half row t * head_dim / 2 + i.
std::vector<float> interleave_rope_rows(const std::vector<float>& w, int64_t heads, int64_t head_dim, int64_t cols);

}  // namespace meshtrain::checkpoint
