// Covers src/meshtrain/checkpoint/gguf_file.cc, gguf_export.cc,
// export_vocab.cc, tokenizer_files.cc and the directory layout of
// export_import.cc: the GGUF container read back by an independent parser
// written here from the format's description, q8_0 within half a step,
// tokenizer.json consistent with the tokenizers (its BPE merges, applied the
// way Hugging Face's BPE applies them, give SentencePiece's ids), and
// `--out DIR/` writing the whole Hugging Face layout. llama.cpp itself runs
// the files in tests/interop.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/export_import.h"
#include "meshtrain/checkpoint/export_vocab.h"
#include "meshtrain/checkpoint/gguf_export.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/tokenizer_files.h"
#include "meshtrain/checkpoint/writer.h"
#include "meshtrain/data/tokenizer_train.h"
#include "model/model_fixtures.h"

namespace meshtrain::checkpoint {
namespace {

using testing::ScratchDir;
using nlohmann::json;
namespace fs = std::filesystem;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// A GGUF reader of the parts the writer produces.
struct Parsed {
  uint32_t version = 0;
  std::map<std::string, std::string> strings;
  std::map<std::string, uint64_t> ints;
  std::map<std::string, std::vector<std::string>> string_arrays;
  struct Info {
    std::vector<uint64_t> dims;
    uint32_t type;
    uint64_t offset;
  };
  std::map<std::string, Info> tensors;
  uint64_t data_start = 0;
};

Parsed parse_gguf(const std::string& b) {
  size_t pos = 0;
  auto get = [&](auto& v) {
    std::memcpy(&v, b.data() + pos, sizeof v);
    pos += sizeof v;
  };
  auto str = [&] {
    uint64_t n;
    get(n);
    std::string s = b.substr(pos, n);
    pos += n;
    return s;
  };
  Parsed p;
  uint32_t magic;
  get(magic);
  EXPECT_EQ(std::string(b.data(), 4), "GGUF");
  get(p.version);
  uint64_t nt, nkv;
  get(nt);
  get(nkv);
  for (uint64_t i = 0; i < nkv; ++i) {
    const std::string key = str();
    uint32_t type;
    get(type);
    if (type == 8) {
      p.strings[key] = str();
    } else if (type == 4 || type == 5 || type == 6) {
      uint32_t v;
      get(v);
      p.ints[key] = v;
    } else if (type == 7) {
      uint8_t v;
      get(v);
      p.ints[key] = v;
    } else if (type == 10) {
      uint64_t v;
      get(v);
      p.ints[key] = v;
    } else {
      EXPECT_EQ(type, 9u) << key;
      uint32_t et;
      uint64_t n;
      get(et);
      get(n);
      p.ints[key] = n;
      for (uint64_t j = 0; j < n; ++j) {
        if (et == 8) p.string_arrays[key].push_back(str());
        else pos += 4;  // f32 / i32
      }
    }
  }
  for (uint64_t i = 0; i < nt; ++i) {
    const std::string name = str();
    uint32_t nd;
    get(nd);
    Parsed::Info info;
    info.dims.resize(nd);
    for (auto& d : info.dims) get(d);
    get(info.type);
    get(info.offset);
    p.tensors[name] = info;
  }
  p.data_start = (pos + 31) / 32 * 32;
  return p;
}

TEST(Gguf, ContainerHasTheHeaderKeysAndAlignedTensorsInnermostFirst) {
  GgufWriter w;
  w.set("general.architecture", std::string("llama"));
  w.set("llama.block_count", uint32_t(2));
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "c"});
  w.set("tokenizer.ggml.merges", std::vector<std::string>{});
  std::vector<float> m(3 * 32), v(5);
  for (size_t i = 0; i < m.size(); ++i) m[i] = float(i) - 40;
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * float(i);
  w.add_tensor("v", Shape{5}, v, GgmlType::F32);
  w.add_tensor("m", Shape{3, 32}, m, GgmlType::Q8_0);
  w.add_tensor("h", Shape{3, 32}, m, GgmlType::F16);
  const std::string bytes = w.bytes();
  const Parsed p = parse_gguf(bytes);
  EXPECT_EQ(p.version, 3u);
  EXPECT_EQ(p.strings.at("general.architecture"), "llama");
  EXPECT_EQ(p.ints.at("llama.block_count"), 2u);
  EXPECT_EQ(p.string_arrays.at("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(p.ints.at("tokenizer.ggml.merges"), 0u);
  EXPECT_EQ(p.tensors.at("m").dims, (std::vector<uint64_t>{32, 3}));  // ne[0] is the row length
  EXPECT_EQ(p.tensors.at("m").type, 8u);
  EXPECT_EQ(p.tensors.at("h").type, 1u);
  for (const auto& [name, t] : p.tensors) EXPECT_EQ(t.offset % kGgufAlignment, 0u) << name;
  EXPECT_EQ(p.data_start % 32, 0u);
  float got[5];
  std::memcpy(got, bytes.data() + p.data_start + p.tensors.at("v").offset, sizeof got);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i], v[size_t(i)]);
  const auto* q = reinterpret_cast<const uint8_t*>(bytes.data() + p.data_start + p.tensors.at("m").offset);
  const std::vector<float> back = decode_q8_0({q, size_t(ggml_bytes(GgmlType::Q8_0, 96))}, 96);
  EXPECT_EQ(back, decode_q8_0(encode_q8_0(m), 96));
  // A q8_0 row must be whole blocks.
  EXPECT_THROW(w.add_tensor("bad", Shape{2, 48}, std::vector<float>(96), GgmlType::Q8_0), CheckpointError);
  EXPECT_THROW(parse_ggml_type("q4_0"), ConfigError);
}

TEST(Gguf, Q8IsWithinHalfAStepOfEachBlocksScale) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.7f) * (i < 32 ? 1.0f : 1e-3f);
  const std::vector<float> y = decode_q8_0(encode_q8_0(x), 64);
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
    // Half a step of the stored (f16) scale, plus that scale's rounding over up to 127 steps.
    const float step = amax / 127, stored = float(f16(step));
    const float bound = 0.5f * stored + 127 * std::fabs(step - stored) + 1e-9f;
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[size_t(b * 32 + j)] - x[size_t(b * 32 + j)]), bound);
  }
  EXPECT_EQ(decode_q8_0(encode_q8_0(std::vector<float>(32, 0.0f)), 32), std::vector<float>(32, 0.0f));
}

// llama.cpp pairs RoPE dimensions (2i, 2i+1); ours (HF's) pairs (i, i + d/2).
TEST(Gguf, RopeRowsAreInterleavedPerHead) {
  // 2 heads of dim 4, one column: rows h*4 + {0,1,2,3} = rotate-half (a0 a1 b0 b1).
  const std::vector<float> w = {0, 1, 2, 3, 10, 11, 12, 13};
  EXPECT_EQ(interleave_rope_rows(w, 2, 4, 1), (std::vector<float>{0, 2, 1, 3, 10, 12, 11, 13}));
}

TEST(Gguf, ModelKeysAndLlamaCppTensorNames) {
  model::ModelConfig c = testing::tiny_llama();
  c.vocab_size = data::ByteTokenizer::kVocab;
  c.finalize();
  ParamValues p;
  for (const auto& s : model::build_model_spec(c).params) p[s.name] = std::vector<float>(size_t(s.numel()), 0.25f);
  const GgufModel g = gguf_model(c, p, data::ByteTokenizer(), GgmlType::F32, "tiny");
  const Parsed parsed = parse_gguf(g.file.bytes());
  EXPECT_EQ(parsed.ints.at("llama.block_count"), uint64_t(c.n_layers));
  EXPECT_EQ(parsed.ints.at("llama.attention.head_count_kv"), uint64_t(c.n_kv_heads));
  EXPECT_EQ(parsed.ints.at("llama.feed_forward_length"), uint64_t(c.ffn_hidden));
  EXPECT_EQ(parsed.strings.at("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(parsed.string_arrays.at("tokenizer.ggml.tokens").size(), size_t(c.vocab_size));
  for (const char* n : {"token_embd.weight", "output_norm.weight", "output.weight", "blk.0.attn_q.weight",
                        "blk.1.ffn_down.weight", "blk.1.ffn_norm.weight"})
    EXPECT_TRUE(parsed.tensors.count(n)) << n;
  EXPECT_EQ(parsed.tensors.at("blk.0.attn_norm.weight").type, 0u);
  // Experts stack into one [E, rows, cols] tensor per projection.
  c.n_experts = 3;
  c.moe_renormalize = true;
  p.clear();
  for (const auto& s : model::build_model_spec(c).params) p[s.name] = std::vector<float>(size_t(s.numel()), 0.25f);
  const Parsed moe = parse_gguf(gguf_model(c, p, data::ByteTokenizer(), GgmlType::F16, "moe").file.bytes());
  EXPECT_EQ(moe.ints.at("llama.expert_count"), 3u);
  EXPECT_EQ(moe.tensors.at("blk.0.ffn_gate_exps.weight").dims,
            (std::vector<uint64_t>{uint64_t(c.d_model), uint64_t(c.ffn_hidden), 3}));
  EXPECT_EQ(moe.tensors.at("blk.0.ffn_gate_inp.weight").type, 0u) << "the router stays f32";
  c.moe_renormalize = false;
  EXPECT_THROW(gguf_model(c, p, data::ByteTokenizer(), GgmlType::F16, "moe"), CheckpointError);
  auto gpt2 = testing::tiny_gpt2();
  gpt2.vocab_size = data::ByteTokenizer::kVocab;
  EXPECT_THROW(gguf_model(gpt2, p, data::ByteTokenizer(), GgmlType::F32, "gpt2"), CheckpointError);
}

// Hugging Face's BPE on one word: merge the adjacent pair of lowest rank until none is left.
std::vector<int32_t> hf_bpe(const std::string& text, const json& model) {
  std::vector<std::string> sym;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    while (i + n < text.size() && (uint8_t(text[i + n]) & 0xC0) == 0x80) ++n;
    sym.push_back(text.substr(i, n));
    i += n;
  }
  std::map<std::string, size_t> rank;
  for (size_t r = 0; r < model["merges"].size(); ++r) rank[model["merges"][r].get<std::string>()] = r;
  for (;;) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find(sym[i] + " " + sym[i + 1]);
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + long(at) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& s : sym) ids.push_back(model["vocab"].at(s).get<int32_t>());
  return ids;
}

std::string sp_corpus() {
  std::string c;
  const char* words[] = {"the", "model", "trains", "on", "a", "mesh", "of", "devices", "and", "every", "layout"};
  for (int d = 0; d < 100; ++d) {
    for (int w = 0; w < 10; ++w) c += std::string(words[(d * 7 + w * 3) % 11]) + " ";
    c += "\n%\n";
  }
  return c;
}

std::unique_ptr<data::SentencePieceTokenizer> train_sp(const ScratchDir& dir, const char* type) {
  write_text(dir.path() / "corpus", sp_corpus());
  data::TokenizerTrainOptions o;
  o.inputs = {(dir.path() / "corpus").string()};
  o.vocab_size = 300;
  o.model_type = type;
  return data::SentencePieceTokenizer::from_model(data::train_sentencepiece(o).model_bytes);
}

TEST(TokenizerJson, SentencePieceBpeMergesReproduceItsIds) {
  ScratchDir dir;
  const auto sp = train_sp(dir, "bpe");
  ASSERT_TRUE(sp->is_bpe());
  EXPECT_FALSE(sp->adds_dummy_prefix());
  using K = data::SentencePieceTokenizer::PieceKind;
  EXPECT_EQ(sp->pieces()[size_t(sp->unk_id())].kind, K::Unknown);
  EXPECT_EQ(sp->pieces()[size_t(sp->bos_id())].kind, K::Control);
  EXPECT_EQ(sp->pieces()[size_t(sp->pieces().size() - 1)].kind, K::Normal);
  const ExportVocab v = export_vocab(*sp, sp->vocab_size() + 3);
  EXPECT_EQ(v.text(int32_t(sp->vocab_size()) + 1), "<extra_" + std::to_string(sp->vocab_size() + 1) + ">");
  EXPECT_EQ(v.entries.back().kind, K::Unused);
  const json t = hf_tokenizer_json(v);
  ASSERT_EQ(t["model"]["type"], "BPE");
  EXPECT_GT(t["model"]["merges"].size(), 20u);
  for (const std::string text : {"the model trains on a mesh", "every layout of devices", "and the mesh"}) {
    std::string normalized;
    for (char ch : text) normalized += ch == ' ' ? std::string("\xe2\x96\x81") : std::string(1, ch);
    EXPECT_EQ(hf_bpe(normalized, t["model"]), sp->encode(text)) << text;
  }
  bool bos_added = false;
  for (const auto& a : t["added_tokens"]) bos_added |= a["id"] == sp->bos_id() && a["special"] == true;
  EXPECT_TRUE(bos_added);
  EXPECT_THROW(export_vocab(*sp, 10), CheckpointError);
  EXPECT_EQ(hf_tokenizer_json(export_vocab(*train_sp(dir, "unigram"), 300))["model"]["type"], "Unigram");
}

TEST(TokenizerJson, ByteTokenizerIsAByteLevelVocabulary) {
  const ExportVocab v = export_vocab(data::ByteTokenizer(), 259);
  const json t = hf_tokenizer_json(v);
  EXPECT_EQ(t["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(t["model"]["vocab"].size(), 259u) << "256 distinct byte characters and 3 specials";
  EXPECT_EQ(t["model"]["vocab"]["A"], 'A');
  EXPECT_EQ(t["model"]["vocab"]["\xc4\xa0"], ' ') << "GPT-2's U+0120 stands for the space byte";
  EXPECT_EQ(t["model"]["vocab"]["\xc4\x8a"], '\n');
  EXPECT_EQ(t["model"]["vocab"]["<s>"], data::ByteTokenizer::kBos);
  EXPECT_EQ(t["model"]["vocab"]["</s>"], data::ByteTokenizer::kEos);
  EXPECT_EQ(t["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
}

// `--out DIR/` (the trailing slash failed before) writes the whole layout,
// whose files agree on the special tokens.
TEST(HfDirectory, ExportWritesEveryFileAndTheyAgree) {
  ScratchDir dir;
  const auto sp = train_sp(dir, "bpe");
  model::ModelConfig c = testing::tiny_llama();
  c.vocab_size = sp->vocab_size();
  c.finalize();
  const model::ModelSpec spec = model::build_model_spec(c);
  std::vector<std::vector<float>> values;
  SaveRequest req;
  req.step = 5;
  req.metadata = {{"step", 5}, {kMetaModelConfig, model_config_to_json(c)}, {kMetaTokenizer, sp->describe()}};
  for (const auto& p : spec.params) {
    values.emplace_back(size_t(p.shape.numel()), 0.01f);
    req.pieces.push_back({p.name, p.shape, DType::F32, full_box(p.shape), values.back().data()});
  }
  const auto reader = CheckpointReader::open(save_checkpoint_single((dir.path() / "ckpt").string(), req));
  const fs::path out = dir.path() / "hf";
  const ExportResult r = export_safetensors(reader, out.string() + "/");
  EXPECT_EQ(r.model_path, (out / "model.safetensors").string());
  for (const char* f : {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  EXPECT_EQ(r.files.size(), 7u);
  const json cfg = testing::read_json(out / "config.json"), gen = testing::read_json(out / "generation_config.json");
  const json tc = testing::read_json(out / "tokenizer_config.json"), tj = testing::read_json(out / "tokenizer.json");
  for (const char* which : {"bos", "eos", "pad"}) {
    const std::string id_key = std::string(which) + "_token_id", tok_key = std::string(which) + "_token";
    EXPECT_EQ(gen[id_key], cfg[id_key]) << which;
    EXPECT_EQ(tj["model"]["vocab"][tc[tok_key].get<std::string>()], cfg[id_key]) << which;
  }
  EXPECT_EQ(cfg["bos_token_id"], sp->bos_id());
  EXPECT_EQ(tc["model_max_length"], c.max_seq_len);
  // A directory without the slash, and a second export needs --force.
  EXPECT_NO_THROW(export_safetensors(reader, (dir.path() / "hf2").string()));
  EXPECT_THROW(export_safetensors(reader, out.string()), CheckpointError);
  EXPECT_NO_THROW(export_safetensors(reader, out.string(), DType::F32, {}, true));
  // GGUF into a directory: model.gguf.
  ExportOptions g;
  g.format = ExportFormat::Gguf;
  g.gguf_type = GgmlType::Q8_0;
  const ExportResult gr = export_model(reader, (dir.path() / "gguf").string(), g);
  EXPECT_EQ(gr.model_path, (dir.path() / "gguf" / "model.gguf").string());
  const Parsed p = parse_gguf(read_bytes(gr.model_path));
  EXPECT_EQ(p.strings.at("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(p.ints.at("general.file_type"), 7u);
  EXPECT_EQ(p.ints.at("tokenizer.ggml.add_space_prefix"), 0u);
}

}  // namespace
}  // namespace meshtrain::checkpoint
