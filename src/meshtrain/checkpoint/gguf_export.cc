#include "meshtrain/checkpoint/gguf_export.h"

#include <regex>

#include "meshtrain/checkpoint/export_vocab.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::checkpoint {

using model::ModelConfig;

std::vector<float> interleave_rope_rows(const std::vector<float>& w, int64_t heads, int64_t head_dim, int64_t cols) {
  MT_CHECK(int64_t(w.size()) == heads * head_dim * cols, "interleave_rope_rows: ", w.size(), " values");
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t t = 0; t < 2; ++t) {
        const float* src = w.data() + (h * head_dim + t * half + i) * cols;
        std::copy(src, src + cols, out.data() + (h * head_dim + 2 * i + t) * cols);
      }
  return out;
}

namespace {

// llama.cpp's general.file_type for a file mostly of `t`.
uint32_t file_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q8_0: return 7;
    case GgmlType::BF16: return 32;
  }
  return 0;
}

// llama.cpp's tensor name for one of ours ("" for an expert's, which are
// stacked per block instead).
std::string gguf_name(const std::string& ours) {
  static const std::pair<const char*, const char*> fixed[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  for (const auto& [a, b] : fixed)
    if (ours == a) return b;
  static const std::regex block(R"(model\.layers\.(\d+)\.(.+)\.(weight|bias))");
  std::smatch m;
  MT_CHECK(std::regex_match(ours, m, block), "GGUF: no name for parameter ", ours);
  static const std::pair<const char*, const char*> parts[] = {
      {"input_layernorm", "attn_norm"},     {"self_attn.q_proj", "attn_q"},  {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},       {"self_attn.o_proj", "attn_output"},
      {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},        {"mlp.router", "ffn_gate_inp"}};
  for (const auto& [a, b] : parts)
    if (m[2] == a) return "blk." + m[1].str() + "." + b + "." + m[3].str();
  MT_CHECK(m[2].str().starts_with("mlp.experts."), "GGUF: no name for parameter ", ours);
  return "";
}

void set_model_keys(GgufWriter& f, const ModelConfig& c, GgmlType type, const std::string& name) {
  f.set("general.architecture", std::string("llama"));
  f.set("general.name", name);
  f.set("general.file_type", file_type(type));
  if (type == GgmlType::Q8_0) f.set("general.quantization_version", uint32_t(2));
  f.set("llama.vocab_size", uint32_t(c.vocab_size));
  f.set("llama.context_length", uint32_t(c.max_seq_len));
  f.set("llama.embedding_length", uint32_t(c.d_model));
  f.set("llama.block_count", uint32_t(c.n_layers));
  f.set("llama.feed_forward_length", uint32_t(c.ffn_hidden));
  f.set("llama.attention.head_count", uint32_t(c.n_heads));
  f.set("llama.attention.head_count_kv", uint32_t(c.n_kv_heads));
  f.set("llama.attention.key_length", uint32_t(c.head_dim));
  f.set("llama.attention.value_length", uint32_t(c.head_dim));
  f.set("llama.rope.dimension_count", uint32_t(c.head_dim));
  f.set("llama.rope.freq_base", float(c.rope_theta));
  f.set("llama.attention.layer_norm_rms_epsilon", float(c.norm_eps));
  if (c.n_experts > 0) {
    f.set("llama.expert_count", uint32_t(c.n_experts));
    f.set("llama.expert_used_count", uint32_t(c.experts_top_k));
  }
}

void set_tokenizer_keys(GgufWriter& f, const data::Tokenizer& tok, int64_t model_vocab) {
  const ExportVocab v = export_vocab(tok, model_vocab);
  MT_REQUIRE(CheckpointError, v.model != ExportVocab::Model::SentencePieceUnigram,
             "GGUF export: the tokenizer is a SentencePiece unigram model, which llama.cpp's SentencePiece "
             "tokenizer does not reproduce; train a BPE one (meshtrain tokenizer train --type bpe)");
  const bool bytes = v.model == ExportVocab::Model::ByteLevel;
  f.set("tokenizer.ggml.model", std::string(bytes ? "gpt2" : "llama"));
  f.set("tokenizer.ggml.pre", std::string("default"));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const auto& e : v.entries) {
    tokens.push_back(e.text);
    scores.push_back(e.score);
    types.push_back(int32_t(e.kind));
  }
  f.set("tokenizer.ggml.tokens", std::move(tokens));
  f.set("tokenizer.ggml.scores", std::move(scores));
  f.set("tokenizer.ggml.token_type", std::move(types));
  // Byte-level: one token per byte, so no merges.
  if (bytes) f.set("tokenizer.ggml.merges", std::vector<std::string>{});
  f.set("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
  f.set("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
  f.set("tokenizer.ggml.padding_token_id", uint32_t(v.pad));
  if (v.unk >= 0) f.set("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
  f.set("tokenizer.ggml.add_bos_token", true);  // documents start with BOS (data/tokenizer.h)
  f.set("tokenizer.ggml.add_eos_token", false);
  if (!bytes) f.set("tokenizer.ggml.add_space_prefix", v.add_dummy_prefix);
}

}  // namespace

GgufModel gguf_model(const ModelConfig& cfg, const ParamValues& params, const data::Tokenizer& tok, GgmlType type,
                     const std::string& name) {
  ModelConfig c = cfg;
  c.finalize();
  MT_REQUIRE(CheckpointError, hf_arch_for(c) != HfArch::Gpt2, "GGUF export covers Llama-style models (rmsnorm, rope, ",
             "swiglu; Mixtral-style experts); this model (", c.describe(), ") is GPT-2-style: export safetensors");
  GgufModel out;
  set_model_keys(out.file, c, type, name);
  set_tokenizer_keys(out.file, tok, c.vocab_size);
  const model::ModelSpec spec = model::build_model_spec(c);
  auto value = [&](const std::string& n) -> const std::vector<float>& {
    auto it = params.find(n);
    MT_REQUIRE(CheckpointError, it != params.end(), "export: parameter '", n, "' missing");
    return it->second;
  };
  auto add = [&](const std::string& gname, const Shape& shape, const std::vector<float>& v, bool matrix) {
    GgmlType t = matrix ? type : GgmlType::F32;
    if (t == GgmlType::Q8_0 && shape[shape.rank() - 1] % kQ8Block != 0) {
      t = GgmlType::F16;
      out.notes.push_back(gname + " " + shape.str() + ": f16 (q8_0 needs rows of a multiple of 32 values)");
    }
    out.file.add_tensor(gname, shape, v, t);
  };
  for (const auto& p : spec.params) {
    const std::string gname = gguf_name(p.name);
    if (gname.empty()) continue;  // experts: stacked below
    const std::vector<float>& v = value(p.name);
    const bool matrix = p.shape.rank() == 2 && gname.find("ffn_gate_inp") == std::string::npos;
    if (gname.find(".attn_q.") != std::string::npos || gname.find(".attn_k.") != std::string::npos) {
      const int64_t heads = gname.find(".attn_q.") != std::string::npos ? c.n_heads : c.n_kv_heads;
      const int64_t cols = p.shape.rank() == 2 ? p.shape[1] : 1;
      add(gname, p.shape, interleave_rope_rows(v, heads, c.head_dim, cols), matrix);
    } else {
      add(gname, p.shape, v, matrix);
    }
    if (gname.ends_with("ffn_gate_inp.weight")) {  // this block's experts, [E, rows, cols] per projection
      const std::string block = p.name.substr(0, p.name.size() - std::string("router.weight").size());
      const std::string blk = gname.substr(0, gname.size() - std::string("ffn_gate_inp.weight").size());
      for (const auto& [ours, theirs] : {std::pair{"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"},
                                        {"down_proj", "ffn_down_exps"}}) {
        const Shape one = spec.find(block + "experts.0." + ours + ".weight").shape;
        std::vector<float> stacked;
        for (int64_t e = 0; e < c.n_experts; ++e) {
          const auto& w = value(block + "experts." + std::to_string(e) + "." + ours + ".weight");
          stacked.insert(stacked.end(), w.begin(), w.end());
        }
        add(blk + theirs + ".weight", Shape{c.n_experts, one[0], one[1]}, stacked, true);
      }
    }
  }
  return out;
}

}  // namespace meshtrain::checkpoint
