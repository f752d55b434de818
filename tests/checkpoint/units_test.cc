// Direct tests of the checkpoint building blocks: dtype_convert.h,
// hf_format.h (name/shape mapping for Llama and GPT-2), shard_writer.h
// (piece layout and SHA-256 against an independent OpenSSL digest of the
// bytes read back) and commit.h (temporary directory, commit, `latest`,
// retention, failure cleanup).
#include <gtest/gtest.h>

#include <openssl/evp.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "ckpt_test_util.h"
#include "meshtrain/checkpoint/commit.h"
#include "meshtrain/checkpoint/dtype_convert.h"
#include "meshtrain/checkpoint/fs_util.h"
#include "meshtrain/checkpoint/hf_format.h"
#include "meshtrain/checkpoint/manifest.h"
#include "meshtrain/checkpoint/sha256.h"
#include "meshtrain/checkpoint/shard_writer.h"
#include "meshtrain/comm/thread_world.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/param_spec.h"

namespace meshtrain::checkpoint {
namespace {

using meshtrain::testing::ScratchDir;

template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---- dtype_convert ---------------------------------------------------------------

TEST(DtypeConvert, ConvertibleOnlyWithinFloatOrIntegerFamilies) {
  const DType floats[] = {DType::F32, DType::F64, DType::BF16}, ints[] = {DType::I32, DType::I64};
  for (DType a : floats) {
    for (DType b : floats) EXPECT_TRUE(convertible(a, b)) << dtype_name(a) << "->" << dtype_name(b);
    for (DType b : ints) {
      EXPECT_FALSE(convertible(a, b)) << dtype_name(a) << "->" << dtype_name(b);
      EXPECT_FALSE(convertible(b, a)) << dtype_name(b) << "->" << dtype_name(a);
    }
  }
  for (DType a : ints)
    for (DType b : ints) EXPECT_TRUE(convertible(a, b));
  float f = 1;
  int32_t i = 0;
  EXPECT_THROW(convert(&f, DType::F32, &i, DType::I32, 1), InternalError);
}

TEST(DtypeConvert, F32ToBf16RoundsToNearestEvenAndBackIsExact) {
  const float in[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-16f, -0.0f, 3.0e38f};
  bf16 out[6];
  convert(in, DType::F32, out, DType::BF16, 6);
  EXPECT_EQ(out[0].bits, 0x3f80);
  EXPECT_EQ(out[1].bits, 0x3f80);  // tie -> even
  EXPECT_EQ(out[2].bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(out[3].bits, 0x3f81);  // above the tie -> up
  EXPECT_EQ(out[4].bits, 0x8000);  // sign of zero kept
  float back[6];
  convert(out, DType::BF16, back, DType::F32, 6);
  EXPECT_EQ(back[2], 1.0f + 0x1p-6f);
  EXPECT_EQ(back[3], 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::signbit(back[4]));
  EXPECT_NEAR(back[5], 3.0e38f, 3.0e38f * 0x1p-8f);
  double wide[6];
  convert(out, DType::BF16, wide, DType::F64, 6);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(wide[k], double(back[k])) << k;
}

TEST(DtypeConvert, F64AndF32) {
  const double d[] = {0.1, 1.0 + 0x1p-30, -123456.75, 1e300};
  float f[4];
  convert(d, DType::F64, f, DType::F32, 4);
  EXPECT_EQ(f[0], 0.1f);             // nearest float
  EXPECT_EQ(f[1], 1.0f);             // below half an f32 ulp
  EXPECT_EQ(f[2], -123456.75f);      // exact
  EXPECT_TRUE(std::isinf(f[3]));     // overflow -> inf
  double back[3];
  convert(f, DType::F32, back, DType::F64, 3);
  EXPECT_EQ(back[0], double(0.1f));  // widening is exact
  EXPECT_EQ(back[2], -123456.75);
  // Same dtype: a plain copy, bit for bit (NaN payload included).
  const double nan_in = std::bit_cast<double>(uint64_t(0x7ff8000000000123ull));
  double nan_out = 0;
  convert(&nan_in, DType::F64, &nan_out, DType::F64, 1);
  EXPECT_EQ(std::bit_cast<uint64_t>(nan_out), 0x7ff8000000000123ull);
}

// f64 -> bf16 must round once: 1 + 2^-8 + 2^-30 lies above the midpoint
// between bf16 1.0 and 1 + 2^-7, so the nearest bf16 is 1 + 2^-7; rounding
// to f32 first would land exactly on the midpoint and the tie would go to
// the even 1.0.
TEST(DtypeConvert, F64ToBf16RoundsOnceToNearest) {
  const double v = 1.0 + 0x1p-8 + 0x1p-30;
  bf16 out;
  convert(&v, DType::F64, &out, DType::BF16, 1);
  EXPECT_EQ(out.bits, 0x3f81) << "got " << float(out);
}

TEST(DtypeConvert, IntegersWidenAndNarrowWithRangeCheck) {
  const int32_t small[] = {0, -1, INT32_MIN, INT32_MAX};
  int64_t wide[4];
  convert(small, DType::I32, wide, DType::I64, 4);
  EXPECT_EQ(wide[1], -1);  // sign-extended
  EXPECT_EQ(wide[2], int64_t(INT32_MIN));
  EXPECT_EQ(wide[3], int64_t(INT32_MAX));
  int32_t narrow[4];
  convert(wide, DType::I64, narrow, DType::I32, 4);
  EXPECT_EQ(std::memcmp(narrow, small, sizeof small), 0);
  const int64_t too_big[] = {5, int64_t(INT32_MAX) + 1};
  const std::string e = error_of([&] { convert(too_big, DType::I64, narrow, DType::I32, 2); });
  EXPECT_NE(e.find("value 2147483648 does not fit i32"), std::string::npos) << e;
  EXPECT_THROW(convert(too_big, DType::I64, narrow, DType::I32, 2), CheckpointError);
  const int64_t too_small = int64_t(INT32_MIN) - 1;
  EXPECT_THROW(convert(&too_small, DType::I64, narrow, DType::I32, 1), CheckpointError);
}

// ---- hf_format -------------------------------------------------------------------

model::ModelConfig tiny_llama() {
  model::ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_hidden = 16;
  c.max_seq_len = 16;
  c.norm_eps = 1e-6;
  c.rope_theta = 5000;
  c.finalize();
  return c;
}

model::ModelConfig tiny_gpt2() {
  model::ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.max_seq_len = 16;
  c.norm = model::NormKind::LayerNorm;
  c.positions = model::PositionKind::Learned;
  c.mlp = model::MlpKind::Gelu;
  c.tied_embeddings = true;
  c.bias = true;
  c.finalize();
  return c;
}

// Every element distinct across all parameters, so a misplaced element shows.
ParamValues distinct_values(const model::ModelConfig& c) {
  ParamValues p;
  float next = 1;
  for (const auto& s : model::build_model_spec(c).params) {
    std::vector<float>& v = p[s.name];
    v.resize(size_t(s.numel()));
    for (float& x : v) x = next++;
  }
  return p;
}

std::map<std::string, NamedTensor> by_name(const std::vector<NamedTensor>& ts) {
  std::map<std::string, NamedTensor> m;
  for (const auto& t : ts) EXPECT_TRUE(m.emplace(t.name, t).second) << "duplicate HF name " << t.name;
  return m;
}

TEST(HfFormat, LlamaConfigJsonAndBack) {
  const auto c = tiny_llama();
  EXPECT_EQ(hf_arch_for(c), HfArch::Llama);
  EXPECT_STREQ(to_string(HfArch::Llama), "LlamaForCausalLM");
  const auto j = hf_config_json(c);
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["vocab_size"], 32);
  EXPECT_EQ(j["hidden_size"], 8);
  EXPECT_EQ(j["intermediate_size"], 16);
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["num_attention_heads"], 2);
  EXPECT_EQ(j["num_key_value_heads"], 1);
  EXPECT_EQ(j["head_dim"], 4);
  EXPECT_EQ(j["max_position_embeddings"], 16);
  EXPECT_EQ(j["rms_norm_eps"], 1e-6);
  EXPECT_EQ(j["rope_theta"], 5000.0);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["hidden_act"], "silu");
  const auto back = model_config_from_hf(j);
  EXPECT_EQ(back.describe(), c.describe());
  EXPECT_EQ(back.n_kv_heads, 1);
  EXPECT_EQ(back.head_dim, 4);
  EXPECT_EQ(back.norm_eps, 1e-6);
  EXPECT_EQ(back.rope_theta, 5000.0);
  EXPECT_EQ(back.norm, model::NormKind::RMSNorm);
}

TEST(HfFormat, LlamaTensorsKeepNamesShapesAndValues) {
  const auto c = tiny_llama();
  const auto params = distinct_values(c);
  const auto spec = model::build_model_spec(c);
  const auto hf = by_name(to_hf_tensors(c, params));
  ASSERT_EQ(hf.size(), spec.params.size());
  for (const auto& s : spec.params) {
    auto it = hf.find(s.name);
    ASSERT_NE(it, hf.end()) << s.name;
    EXPECT_EQ(it->second.shape, s.shape) << s.name;
    EXPECT_EQ(it->second.values, params.at(s.name)) << s.name;
  }
  EXPECT_TRUE(hf.count("lm_head.weight"));  // untied head
  EXPECT_EQ(hf.at("model.layers.1.self_attn.k_proj.weight").shape, (Shape{4, 8}));  // kv_dim x d_model
  EXPECT_EQ(from_hf_tensors(c, hf), params);
}

TEST(HfFormat, Gpt2ConfigJsonAndBack) {
  const auto c = tiny_gpt2();
  EXPECT_EQ(hf_arch_for(c), HfArch::Gpt2);
  const auto j = hf_config_json(c);
  EXPECT_EQ(j["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["n_embd"], 8);
  EXPECT_EQ(j["n_layer"], 2);
  EXPECT_EQ(j["n_head"], 2);
  EXPECT_EQ(j["n_positions"], 16);
  EXPECT_TRUE(j["n_inner"].is_null());  // 4 * d_model is GPT-2's default
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["tie_word_embeddings"], true);
  const auto back = model_config_from_hf(j);
  EXPECT_EQ(back.describe(), c.describe());
  EXPECT_EQ(back.ffn_hidden, 32);
  EXPECT_TRUE(back.tied_embeddings && back.bias);
  // A non-default hidden size is written out.
  auto wide = c;
  wide.ffn_hidden = 24;
  EXPECT_EQ(hf_config_json(wide)["n_inner"], 24);
  EXPECT_EQ(model_config_from_hf(hf_config_json(wide)).ffn_hidden, 24);
}

TEST(HfFormat, Gpt2TensorsAreTransposedAndFused) {
  const auto c = tiny_gpt2();
  const int64_t d = 8, ffn = 32;
  const auto params = distinct_values(c);
  const auto hf = by_name(to_hf_tensors(c, params));
  // Per layer our q,k,v weights and biases (6) become c_attn weight + bias (2).
  EXPECT_EQ(hf.size(), params.size() - 4 * size_t(c.n_layers));
  EXPECT_EQ(hf.at("transformer.wte.weight").values, params.at("model.embed_tokens.weight"));
  EXPECT_EQ(hf.at("transformer.wpe.weight").values, params.at("model.embed_positions.weight"));
  EXPECT_EQ(hf.at("transformer.ln_f.bias").values, params.at("model.norm.bias"));
  EXPECT_EQ(hf.at("transformer.h.1.ln_2.weight").values, params.at("model.layers.1.post_attention_layernorm.weight"));
  EXPECT_FALSE(hf.count("lm_head.weight"));

  // Conv1D weights are [in, out]: c_fc[i][o] == fc_in[o][i].
  const auto& cfc = hf.at("transformer.h.0.mlp.c_fc.weight");
  ASSERT_EQ(cfc.shape, (Shape{d, ffn}));
  const auto& fc_in = params.at("model.layers.0.mlp.fc_in.weight");  // [ffn, d]
  for (int64_t i = 0; i < d; ++i)
    for (int64_t o = 0; o < ffn; ++o) ASSERT_EQ(cfc.values[size_t(i * ffn + o)], fc_in[size_t(o * d + i)]);
  EXPECT_EQ(hf.at("transformer.h.0.mlp.c_proj.weight").shape, (Shape{ffn, d}));
  EXPECT_EQ(hf.at("transformer.h.0.attn.c_proj.weight").shape, (Shape{d, d}));

  // c_attn: [d, 3d], output columns q | k | v.
  const auto& w = hf.at("transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(w.shape, (Shape{d, 3 * d}));
  const char* parts[] = {"q_proj", "k_proj", "v_proj"};
  for (int k = 0; k < 3; ++k) {
    const auto& ours = params.at(std::string("model.layers.1.self_attn.") + parts[k] + ".weight");  // [d, d]
    for (int64_t i = 0; i < d; ++i)
      for (int64_t o = 0; o < d; ++o)
        ASSERT_EQ(w.values[size_t(i * 3 * d + k * d + o)], ours[size_t(o * d + i)]) << parts[k];
    const auto& bias = params.at(std::string("model.layers.1.self_attn.") + parts[k] + ".bias");
    const auto& b = hf.at("transformer.h.1.attn.c_attn.bias");
    ASSERT_EQ(b.shape, (Shape{3 * d}));
    EXPECT_TRUE(std::equal(bias.begin(), bias.end(), b.values.begin() + k * d)) << parts[k];
  }
  EXPECT_EQ(from_hf_tensors(c, hf), params);
}

TEST(HfFormat, ImportRejectsMissingMisshapedAndUnknownTensors) {
  const auto c = tiny_gpt2();
  const auto hf = by_name(to_hf_tensors(c, distinct_values(c)));

  auto missing = hf;
  missing.erase("transformer.h.1.mlp.c_fc.bias");
  EXPECT_NE(error_of([&] { from_hf_tensors(c, missing); }).find("tensor 'transformer.h.1.mlp.c_fc.bias' missing"),
            std::string::npos);

  auto misshaped = hf;
  misshaped["transformer.h.0.mlp.c_fc.weight"].shape = Shape{32, 8};  // our [out, in] layout, not HF's
  EXPECT_NE(error_of([&] { from_hf_tensors(c, misshaped); }).find("has shape [32, 8]"), std::string::npos)
      << error_of([&] { from_hf_tensors(c, misshaped); });

  auto extra = hf;
  extra["transformer.h.0.attn.bias"] = {"transformer.h.0.attn.bias", Shape{1}, {0.f}};  // HF causal mask buffer
  extra["lm_head.weight"] = {"lm_head.weight", Shape{1}, {0.f}};                        // tied: ignored
  EXPECT_NO_THROW(from_hf_tensors(c, extra));
  extra["transformer.h.0.mystery"] = {"transformer.h.0.mystery", Shape{1}, {0.f}};
  EXPECT_NE(error_of([&] { from_hf_tensors(c, extra); }).find("unexpected tensor 'transformer.h.0.mystery'"),
            std::string::npos);

  // Llama: lm_head is a real tensor when untied, so it cannot be dropped.
  const auto lc = tiny_llama();
  auto lhf = by_name(to_hf_tensors(lc, distinct_values(lc)));
  lhf.erase("lm_head.weight");
  EXPECT_THROW(from_hf_tensors(lc, lhf), CheckpointError);
}

TEST(HfFormat, ArchitectureMismatchAndBadConfigs) {
  auto c = tiny_gpt2();
  c.bias = false;  // GPT-2 needs biases
  const std::string e = error_of([&] { hf_arch_for(c); });
  EXPECT_NE(e.find("matches no Hugging Face architecture"), std::string::npos) << e;
  EXPECT_NE(e.find("bias = true"), std::string::npos) << e;
  EXPECT_EQ(e.find("norm = layernorm"), std::string::npos) << "only the differences are listed: " << e;
  EXPECT_THROW(to_hf_tensors(c, distinct_values(c)), CheckpointError);

  EXPECT_THROW(model_config_from_hf(nlohmann::json::array()), CheckpointError);
  EXPECT_THROW(model_config_from_hf({{"model_type", "bert"}}), CheckpointError);
  auto j = hf_config_json(tiny_llama());
  j["rope_scaling"] = {{"type", "linear"}};
  EXPECT_NE(error_of([&] { model_config_from_hf(j); }).find("rope_scaling"), std::string::npos);
  j = hf_config_json(tiny_llama());
  j.erase("hidden_size");
  EXPECT_NE(error_of([&] { model_config_from_hf(j); }).find("'hidden_size' missing"), std::string::npos);
  j = hf_config_json(tiny_gpt2());
  j["activation_function"] = "relu";
  EXPECT_THROW(model_config_from_hf(j), CheckpointError);
}

// ---- shard_writer ----------------------------------------------------------------

std::string evp_sha256_hex(const char* data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EXPECT_EQ(EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr), 1);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) s += hex[md[i] >> 4], s += hex[md[i] & 15];
  return s;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ShardWriter, FileName) {
  EXPECT_EQ(shard_file_name(0), "rank-00000.bin");
  EXPECT_EQ(shard_file_name(3), "rank-00003.bin");
  EXPECT_EQ(shard_file_name(12345), "rank-12345.bin");
}

TEST(ShardWriter, PiecesBackToBackWithDigestsOfTheBytesOnDisk) {
  ScratchDir dir;
  // "a": f32 [4, 6] as two row blocks; "b": i64 [5] whole; a scalar bf16.
  std::vector<float> a(24);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.5f - 3.f;
  std::vector<int64_t> b = {1, -2, 3, int64_t(1) << 40, -5};
  const bf16 s(2.75f);
  std::vector<TensorPiece> pieces = {
      {"a", Shape{4, 6}, DType::F32, Box{{0, 0}, {2, 6}}, a.data()},
      {"b", Shape{5}, DType::I64, full_box(Shape{5}), b.data()},
      {"a", Shape{4, 6}, DType::F32, Box{{2, 0}, {2, 6}}, a.data() + 12},
      {"s", Shape{}, DType::BF16, full_box(Shape{}), &s},
  };
  std::vector<std::string> seen;
  SaveOptions opts;
  opts.before_piece = [&](int rank, const std::string& name) { seen.push_back(std::to_string(rank) + name); };
  const LocalShard shard = write_rank_shard(dir.path(), 7, pieces, opts);
  EXPECT_EQ(seen, (std::vector<std::string>{"7a", "7b", "7a", "7s"}));
  EXPECT_EQ(shard.file.path, "rank-00007.bin");
  EXPECT_EQ(shard.file.bytes, 48u + 40u + 48u + 2u);
  const std::string disk = read_bytes(dir.path() / "rank-00007.bin");
  ASSERT_EQ(disk.size(), shard.file.bytes);

  // Grouped by tensor in first-seen order; pieces keep their write order.
  ASSERT_EQ(shard.tensors.size(), 3u);
  EXPECT_EQ(shard.tensors[0].name, "a");
  EXPECT_EQ(shard.tensors[1].name, "b");
  EXPECT_EQ(shard.tensors[2].name, "s");
  ASSERT_EQ(shard.tensors[0].pieces.size(), 2u);
  const PieceEntry& a0 = shard.tensors[0].pieces[0];
  const PieceEntry& a1 = shard.tensors[0].pieces[1];
  const PieceEntry& b0 = shard.tensors[1].pieces[0];
  const PieceEntry& s0 = shard.tensors[2].pieces[0];
  EXPECT_EQ(a0.byte_offset, 0u);
  EXPECT_EQ(b0.byte_offset, 48u);
  EXPECT_EQ(a1.byte_offset, 88u);
  EXPECT_EQ(s0.byte_offset, 136u);
  EXPECT_EQ(a1.box, (Box{{2, 0}, {2, 6}}));
  EXPECT_EQ(shard.tensors[1].dtype, DType::I64);
  EXPECT_EQ(shard.tensors[0].shape, (Shape{4, 6}));

  const std::pair<const PieceEntry*, std::pair<const void*, size_t>> expect[] = {
      {&a0, {a.data(), 48}}, {&b0, {b.data(), 40}}, {&a1, {a.data() + 12, 48}}, {&s0, {&s, 2}}};
  for (const auto& [p, mem] : expect) {
    EXPECT_EQ(p->file, "rank-00007.bin");
    ASSERT_EQ(p->byte_length, mem.second);
    const char* on_disk = disk.data() + p->byte_offset;
    EXPECT_EQ(std::memcmp(on_disk, mem.first, mem.second), 0) << "piece at " << p->byte_offset;
    EXPECT_EQ(p->sha256, evp_sha256_hex(on_disk, mem.second)) << "piece at " << p->byte_offset;
    EXPECT_TRUE(is_sha256_hex(p->sha256));
  }
  EXPECT_NE(a0.sha256, a1.sha256);
}

TEST(ShardWriter, RejectsBadPiecesBeforeWriting) {
  ScratchDir dir;
  float x[4] = {};
  const std::vector<TensorPiece> empty_name = {{"", Shape{4}, DType::F32, full_box(Shape{4}), x}};
  const std::vector<TensorPiece> outside = {{"t", Shape{4}, DType::F32, Box{{2}, {3}}, x}};
  const std::vector<TensorPiece> no_data = {{"t", Shape{4}, DType::F32, full_box(Shape{4}), nullptr}};
  EXPECT_NE(error_of([&] { check_pieces(empty_name, 1); }).find("empty tensor name"), std::string::npos);
  EXPECT_NE(error_of([&] { check_pieces(outside, 1); }).find("outside its global shape"), std::string::npos);
  EXPECT_NE(error_of([&] { check_pieces(no_data, 1); }).find("has no data"), std::string::npos);
  EXPECT_THROW(write_rank_shard(dir.path(), 1, outside, {}), CheckpointError);
  EXPECT_FALSE(fs::exists(dir.path() / shard_file_name(1))) << "nothing is written for invalid pieces";

  // Pieces of one tensor that disagree on its shape.
  const std::vector<TensorPiece> inconsistent = {{"t", Shape{4}, DType::F32, Box{{0}, {2}}, x},
                                                 {"t", Shape{5}, DType::F32, Box{{2}, {2}}, x}};
  EXPECT_NE(error_of([&] { write_rank_shard(dir.path(), 2, inconsistent, {}); }).find("different shapes or dtypes"),
            std::string::npos);
}

TEST(ShardWriter, RefusesToOverwriteAndStopsWhenCancelled) {
  ScratchDir dir;
  float x[4] = {1, 2, 3, 4};
  const std::vector<TensorPiece> pieces = {{"t", Shape{4}, DType::F32, full_box(Shape{4}), x}};
  write_rank_shard(dir.path(), 0, pieces, {});
  EXPECT_NE(error_of([&] { write_rank_shard(dir.path(), 0, pieces, {}); }).find("cannot create shard file"),
            std::string::npos);
  std::atomic<bool> cancel{true};
  EXPECT_NE(error_of([&] { write_rank_shard(dir.path(), 1, pieces, {}, &cancel); }).find("save cancelled"),
            std::string::npos);
}

// ---- commit ----------------------------------------------------------------------

struct OneRank {
  std::shared_ptr<comm::ThreadWorld> world = comm::ThreadWorld::create(1);
  comm::ProcessGroup& g() { return *world->group(0); }
};

// prepare -> write -> commit for one rank with one tensor whose values
// depend on `tag`.
std::string save_step(comm::ProcessGroup& g, const fs::path& root, int64_t step, float tag, int keep_last = 0,
                      const nlohmann::json& meta = nlohmann::json::object()) {
  const fs::path tmp = prepare_save_dir(g, root, step);
  std::vector<float> v = {tag, tag + 1, tag + 2};
  const std::vector<TensorPiece> pieces = {{"w", Shape{3}, DType::F32, full_box(Shape{3}), v.data()}};
  SaveOptions o;
  o.keep_last = keep_last;
  const LocalShard shard = write_rank_shard(tmp, g.rank(), pieces, o);
  return commit_save(g, root, step, tmp, shard, "", meta, o);
}

std::string latest_of(const fs::path& root) { return read_bytes(root / kLatestFile); }

TEST(Commit, PrepareCreatesAFreshTmpDirAndClearsStaleOnes) {
  ScratchDir dir;
  OneRank w;
  const fs::path root = dir.path() / "ckpt";
  fs::create_directories(root / ".tmp-step-00000003" / "junk");
  fs::create_directories(root / "step-00000001");
  const fs::path tmp = prepare_save_dir(w.g(), root, 42);
  EXPECT_EQ(tmp, root / ".tmp-step-00000042");
  EXPECT_TRUE(fs::is_directory(tmp));
  EXPECT_TRUE(fs::is_empty(tmp));
  EXPECT_FALSE(fs::exists(root / ".tmp-step-00000003")) << "stale temporary directory of a crashed save";
  EXPECT_TRUE(fs::exists(root / "step-00000001")) << "committed directories are not touched";
}

TEST(Commit, CommitRenamesWritesManifestAndMovesLatest) {
  ScratchDir dir;
  OneRank w;
  const fs::path root = dir.path() / "ckpt";
  const std::string d5 = save_step(w.g(), root, 5, 10.f, 0, {{"note", "first"}});
  EXPECT_EQ(d5, (root / "step-00000005").string());
  EXPECT_FALSE(fs::exists(root / ".tmp-step-00000005"));
  EXPECT_EQ(latest_of(root), "step-00000005\n");
  const Manifest m = parse_manifest(read_bytes(root / "step-00000005" / kManifestFile), "test");
  EXPECT_EQ(m.step, 5);
  EXPECT_EQ(m.world_size, 1);
  EXPECT_EQ(m.metadata["note"], "first");
  ASSERT_EQ(m.tensors.size(), 1u);
  EXPECT_EQ(m.tensors[0].name, "w");
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0].path, "rank-00000.bin");
  EXPECT_EQ(m.files[0].bytes, 12u);
  const std::string shard = read_bytes(root / "step-00000005" / "rank-00000.bin");
  ASSERT_EQ(shard.size(), 12u);
  EXPECT_EQ(m.tensors[0].pieces[0].sha256, evp_sha256_hex(shard.data(), shard.size()));

  // A later step moves `latest`; the earlier one stays (keep_last = 0).
  save_step(w.g(), root, 9, 20.f, 0, 42);
  EXPECT_EQ(latest_of(root), "step-00000009\n");
  EXPECT_TRUE(fs::exists(root / "step-00000005" / kManifestFile));
  // Metadata that is not an object is wrapped.
  EXPECT_EQ(parse_manifest(read_bytes(root / "step-00000009" / kManifestFile), "t").metadata["value"], 42);
  // No temporary files are left in the root.
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_NE(e.path().filename().string().rfind(".", 0), 0u) << e.path();
}

TEST(Commit, SavingAStepAgainReplacesIt) {
  ScratchDir dir;
  OneRank w;
  const fs::path root = dir.path() / "ckpt";
  save_step(w.g(), root, 4, 1.f);
  save_step(w.g(), root, 4, 100.f);
  const std::string shard = read_bytes(root / "step-00000004" / "rank-00000.bin");
  ASSERT_EQ(shard.size(), 12u);
  float v[3];
  std::memcpy(v, shard.data(), 12);
  EXPECT_EQ(v[0], 100.f);
  EXPECT_EQ(latest_of(root), "step-00000004\n");
  EXPECT_EQ(list_complete_checkpoints(root).size(), 1u);
}

TEST(Commit, KeepLastDeletesTheOldestCompleteSteps) {
  ScratchDir dir;
  OneRank w;
  const fs::path root = dir.path() / "ckpt";
  for (int64_t step : {10, 20, 30, 40}) save_step(w.g(), root, step, float(step), /*keep_last=*/2);
  const auto left = list_complete_checkpoints(root);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].first, 30);
  EXPECT_EQ(left[1].first, 40);
  EXPECT_EQ(latest_of(root), "step-00000040\n");
  EXPECT_FALSE(fs::exists(root / "step-00000010"));
  EXPECT_FALSE(fs::exists(root / "step-00000020"));
}

TEST(Commit, ApplyRetentionKeepsTheNamedStepAndIgnoresIncompleteOnes) {
  ScratchDir dir;
  const fs::path root = dir.path();
  for (int s : {1, 2, 3, 4}) {
    fs::create_directories(root / step_dir_name(s));
    std::ofstream(root / step_dir_name(s) / kManifestFile) << "{}";
  }
  fs::create_directories(root / "step-00000009");  // no manifest: not complete
  apply_retention(root, 0, root / "step-00000001");  // 0 keeps everything
  EXPECT_EQ(list_complete_checkpoints(root).size(), 4u);
  apply_retention(root, 2, root / "step-00000001");
  std::set<int64_t> steps;
  for (const auto& [s, p] : list_complete_checkpoints(root)) steps.insert(s);
  EXPECT_EQ(steps, (std::set<int64_t>{1, 3, 4}));
  EXPECT_TRUE(fs::exists(root / "step-00000009"));
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().find(".tmp-deleting-"), std::string::npos) << e.path();
}

TEST(Commit, FailedWriterRemovesTheTmpDirAndKeepsLatest) {
  ScratchDir dir;
  OneRank w;
  const fs::path root = dir.path() / "ckpt";
  save_step(w.g(), root, 1, 1.f);
  const fs::path tmp = prepare_save_dir(w.g(), root, 2);
  const std::string e =
      error_of([&] { commit_save(w.g(), root, 2, tmp, std::nullopt, "disk full", nlohmann::json::object(), {}); });
  EXPECT_NE(e.find("checkpoint save of step 2 failed on rank 0: disk full"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root / "step-00000002"));
  EXPECT_EQ(latest_of(root), "step-00000001\n");
}

TEST(Commit, InvalidPartitionIsRejectedAtCommit) {
  ScratchDir dir;
  OneRank w;
  const fs::path root = dir.path() / "ckpt";
  const fs::path tmp = prepare_save_dir(w.g(), root, 3);
  float x[2] = {1, 2};
  // Only half of a [4] tensor: the partition does not cover it.
  const std::vector<TensorPiece> pieces = {{"half", Shape{4}, DType::F32, Box{{0}, {2}}, x}};
  const LocalShard shard = write_rank_shard(tmp, 0, pieces, {});
  EXPECT_THROW(commit_save(w.g(), root, 3, tmp, shard, "", nlohmann::json::object(), {}), CheckpointError);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root / "step-00000003"));
  EXPECT_FALSE(fs::exists(root / kLatestFile));
}

}  // namespace
}  // namespace meshtrain::checkpoint
