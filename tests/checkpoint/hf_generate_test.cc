#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "checkpoint/ckpt_test_util.h"
#include "meshtrain/checkpoint/export_import.h"
#include "meshtrain/checkpoint/generate.h"
#include "meshtrain/checkpoint/model_config_json.h"
#include "meshtrain/checkpoint/model_weights.h"
#include "meshtrain/comm/launch.h"
#include "meshtrain/data/tokenizer.h"
#include "model/model_fixtures.h"

namespace meshtrain::checkpoint {
namespace {

using testing::ScratchDir;
using json = nlohmann::json;
namespace fs = std::filesystem;

// Saves a model's parameters as a training checkpoint from 2 ranks (flat
// halves), with the metadata the trainer writes.
std::string save_model(const std::string& root, model::Transformer& m) {
  std::string dir;
  comm::launch_threads(2, [&](comm::ParallelContext& ctx) {
    SaveRequest req;
    req.step = 12;
    req.metadata = {{"step", 12},
                    {kMetaModelConfig, model_config_to_json(m.config())},
                    {kMetaTokenizer, data::ByteTokenizer().describe()}};
    auto& store = m.params();
    for (int i = 0; i < store.size(); ++i) {
      const auto& p = store.get(i);
      const float* base = p.value.data<float>();
      for (const Box& b : balanced_part_boxes(p.spec->shape, 2, ctx.rank)) {
        // Flat boxes are contiguous runs of the full tensor.
        int64_t flat = 0, stride = 1;
        for (int d = b.rank() - 1; d >= 0; --d) {
          flat += b.offset[size_t(d)] * stride;
          stride *= p.spec->shape[d];
        }
        req.pieces.push_back({p.spec->name, p.spec->shape, DType::F32, b, base + flat});
      }
    }
    const std::string d = save_checkpoint(*ctx.world, root, req);
    if (ctx.rank == 0) dir = d;
  });
  return dir;
}

void expect_same_params(model::ParameterStore& a, model::ParameterStore& b) {
  ASSERT_EQ(a.size(), b.size());
  for (int i = 0; i < a.size(); ++i) {
    const auto& pa = a.get(i);
    const auto& pb = b.get(i);
    ASSERT_EQ(pa.spec->name, pb.spec->name);
    EXPECT_EQ(0, std::memcmp(pa.value.raw(), pb.value.raw(), pa.value.nbytes())) << pa.spec->name;
  }
}

// The byte tokenizer the saved checkpoints record needs its 259 ids.
model::ModelConfig finalized(model::ModelConfig c) {
  c.vocab_size = std::max<int64_t>(c.vocab_size, data::ByteTokenizer::kVocab);
  c.finalize();
  return c;
}

void round_trip(const model::ModelConfig& cfg, const char* arch) {
  ScratchDir dir;
  const auto alloc = CachingAllocator::create();
  model::Transformer original(finalized(cfg), alloc);
  const std::string ckpt = save_model((dir.path() / "run").string(), original);

  const auto reader = CheckpointReader::open(ckpt);
  const std::string out = (dir.path() / "export" / "model.safetensors").string();
  const ExportResult res = export_safetensors(reader, out);
  EXPECT_STREQ(to_string(res.arch), arch);
  const auto hf = testing::read_json(dir.path() / "export" / "config.json");
  EXPECT_EQ(hf["architectures"][0], arch);
  EXPECT_EQ(hf["torch_dtype"], "float32");
  // The exporter's file passes the rule-checking reader.
  const auto file = SafetensorsReader::open(out);

  const std::string imported = import_safetensors(out, (dir.path() / "imported").string());
  EXPECT_EQ(fs::path(imported).filename(), "step-00000000");
  const auto back = CheckpointReader::open((dir.path() / "imported").string());
  EXPECT_TRUE(back.metadata().contains("imported"));
  const model::ModelConfig cfg2 = model_config_of(back);
  EXPECT_EQ(model_config_to_json(cfg2), model_config_to_json(original.config()));
  model::Transformer restored(cfg2, alloc);
  restored.params().unit_values(0).zero_();
  load_model_weights(back, restored);
  expect_same_params(original.params(), restored.params());

  // Straight from the safetensors file too, with identical logits.
  model::Transformer from_file(model_config_of(file), alloc);
  load_model_weights(file, from_file);
  expect_same_params(original.params(), from_file.params());
  const auto batch = testing::tiny_batch();
  const Tensor la = original.forward_logits(batch.view()), lb = from_file.forward_logits(batch.view());
  EXPECT_EQ(0, std::memcmp(la.raw(), lb.raw(), la.nbytes()));
}

TEST(HfExport, LlamaRoundTripsExactly) {
  round_trip(testing::tiny_llama(), "LlamaForCausalLM");
  auto tied = testing::tiny_llama();
  tied.tied_embeddings = true;
  round_trip(tied, "LlamaForCausalLM");
}

TEST(HfExport, Gpt2RoundTripsExactly) { round_trip(testing::tiny_gpt2(), "GPT2LMHeadModel"); }

model::ModelConfig tiny_mixtral() {
  model::ModelConfig c = testing::tiny_llama();
  c.n_experts = 3;
  c.experts_top_k = 2;
  c.moe_renormalize = true;
  c.moe_aux_loss_coeff = 0.02;
  return c;
}

// Mixture of experts in Mixtral's names and config keys, and back.
TEST(HfExport, MixtralRoundTripsExactly) {
  round_trip(tiny_mixtral(), "MixtralForCausalLM");
  const model::ModelConfig c = finalized(tiny_mixtral());
  const json hf = hf_config_json(c);
  EXPECT_EQ(hf["model_type"], "mixtral");
  EXPECT_EQ(hf["num_local_experts"], 3);
  EXPECT_EQ(hf["num_experts_per_tok"], 2);
  EXPECT_EQ(hf["router_aux_loss_coef"], 0.02);
  EXPECT_EQ(hf["intermediate_size"], c.ffn_hidden);
  ParamValues p;
  for (const auto& s : model::build_model_spec(c).params) p[s.name] = std::vector<float>(size_t(s.numel()), 0.f);
  std::set<std::string> names;
  for (const auto& t : to_hf_tensors(c, p)) names.insert(t.name);
  for (const char* n : {"model.layers.1.block_sparse_moe.gate.weight", "model.layers.0.block_sparse_moe.experts.2.w1.weight",
                        "model.layers.0.block_sparse_moe.experts.0.w2.weight",
                        "model.layers.1.block_sparse_moe.experts.1.w3.weight", "model.layers.0.self_attn.q_proj.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("model.layers.0.mlp.router.weight"));
}

// What Mixtral cannot express is refused before anything is written, naming the key.
TEST(HfExport, MoeThatIsNotMixtralIsRefusedWithTheKeys) {
  auto expect_refused = [](model::ModelConfig c, const char* key) {
    try {
      hf_arch_for(finalized(c));
      ADD_FAILURE() << "accepted without " << key;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  auto c = tiny_mixtral();
  c.moe_renormalize = false;
  expect_refused(c, "moe_renormalize = true");
  c = tiny_mixtral();
  c.moe_capacity_factor = 1.25;
  expect_refused(c, "moe_capacity_factor = 0");
  c = tiny_mixtral();
  c.moe_shared_expert = true;
  expect_refused(c, "moe_shared_expert = false");
  c = tiny_mixtral();
  c.moe_layers = {1};
  expect_refused(c, "moe_layers = []");
}

// --dtype bf16: the deployment file stores every weight rounded once to
// bf16 (nearest even) from the f32 checkpoint, in half the bytes.
TEST(HfExport, Bf16ExportRoundsEachWeightOnce) {
  ScratchDir dir;
  const auto alloc = CachingAllocator::create();
  model::Transformer original(finalized(testing::tiny_llama()), alloc);
  const auto reader = CheckpointReader::open(save_model((dir.path() / "run").string(), original));
  const ExportResult f32 = export_safetensors(reader, (dir.path() / "f32" / "m.safetensors").string());
  const ExportResult b16 = export_safetensors(reader, (dir.path() / "b16" / "m.safetensors").string(), DType::BF16);
  EXPECT_EQ(b16.bytes * 2, f32.bytes);
  EXPECT_EQ(testing::read_json(dir.path() / "b16" / "config.json")["torch_dtype"], "bfloat16");
  const auto full = SafetensorsReader::open(f32.model_path), half = SafetensorsReader::open(b16.model_path);
  for (const auto& e : half.header().entries) {
    EXPECT_EQ(e.dtype, DType::BF16) << e.name;
    const std::vector<float> want = full.read_f32(e.name), got = half.read_f32(e.name);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], float(bf16(want[i]))) << e.name << "[" << i << "]";
  }
  EXPECT_THROW(export_safetensors(reader, (dir.path() / "x.safetensors").string(), DType::F16), ConfigError);
}

TEST(HfExport, Gpt2FusedTransposedAttentionOnAHandMadeCase) {
  model::ModelConfig c = testing::tiny_gpt2();
  c.d_model = 2;
  c.n_heads = c.n_kv_heads = 1;
  c.n_layers = 1;
  c.ffn_hidden = 3;
  c.finalize();
  ParamValues p;
  for (const auto& s : model::build_model_spec(c).params) p[s.name] = std::vector<float>(size_t(s.numel()), 0.f);
  const std::string a = "model.layers.0.self_attn.";
  p[a + "q_proj.weight"] = {1, 2, 3, 4};  // [out, in]
  p[a + "k_proj.weight"] = {5, 6, 7, 8};
  p[a + "v_proj.weight"] = {9, 10, 11, 12};
  p[a + "q_proj.bias"] = {-1, -2};
  p[a + "k_proj.bias"] = {-3, -4};
  p[a + "v_proj.bias"] = {-5, -6};
  p["model.layers.0.mlp.fc_in.weight"] = {1, 2, 3, 4, 5, 6};  // [3, 2]
  std::map<std::string, NamedTensor> by_name;
  for (auto& t : to_hf_tensors(c, p)) by_name[t.name] = t;
  const auto& w = by_name.at("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(w.shape, (Shape{2, 6}));  // Conv1D [in, 3 * out]
  EXPECT_EQ(w.values, (std::vector<float>{1, 3, 5, 7, 9, 11, /**/ 2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(by_name.at("transformer.h.0.attn.c_attn.bias").values, (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  EXPECT_EQ(by_name.at("transformer.h.0.mlp.c_fc.weight").shape, (Shape{2, 3}));
  EXPECT_EQ(by_name.at("transformer.h.0.mlp.c_fc.weight").values, (std::vector<float>{1, 3, 5, 2, 4, 6}));
  EXPECT_TRUE(by_name.count("transformer.wpe.weight"));
  EXPECT_FALSE(by_name.count("lm_head.weight"));
  EXPECT_EQ(from_hf_tensors(c, by_name), p);
}

TEST(HfExport, UnsupportedStructureFailsClearly) {
  auto c = testing::tiny_gpt2();
  c.n_kv_heads = 1;  // GQA is not expressible in GPT-2
  try {
    hf_arch_for(finalized(c));
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_heads == n_heads"), std::string::npos) << e.what();
  }
}

TEST(ModelConfigJson, RoundTripsAndRejectsUnknownKeys) {
  const auto c = finalized(testing::tiny_gpt2());
  EXPECT_EQ(model_config_to_json(model_config_from_json(model_config_to_json(c))), model_config_to_json(c));
  auto j = model_config_to_json(c);
  j["d_modle"] = 3;
  EXPECT_THROW(model_config_from_json(j), CheckpointError);
}

TEST(Generate, FixedSeedIsDeterministicAndTemperatureZeroIsGreedy) {
  const auto alloc = CachingAllocator::create();
  model::Transformer m(finalized(testing::tiny_llama()), alloc);
  const std::vector<int32_t> prompt = {1, 4, 7};
  GenerateOptions o;
  o.max_new_tokens = 12;  // runs past max_seq_len = 8: context is truncated
  o.temperature = 1.0;
  o.top_k = 5;
  o.seed = 3;
  const auto a = generate(m, prompt, o), b = generate(m, prompt, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 12u);
  o.seed = 4;
  const auto c = generate(m, prompt, o);
  o.seed = 5;
  const auto d = generate(m, prompt, o);
  EXPECT_TRUE(a != c || a != d) << "different seeds should sample differently";

  o.temperature = 0;
  const auto greedy = generate(m, prompt, o);
  std::vector<int32_t> seq = prompt;
  for (int step = 0; step < 12; ++step) {
    const size_t n = std::min<size_t>(seq.size(), 8);
    std::vector<int32_t> toks(seq.end() - long(n), seq.end()), tg(n, -1), pos(n);
    for (size_t i = 0; i < n; ++i) pos[i] = int32_t(i);
    const Tensor logits = m.forward_logits({1, int64_t(n), toks.data(), tg.data(), pos.data(), nullptr});
    const int64_t V = m.config().vocab_size;
    const float* last = logits.data<float>() + int64_t(n - 1) * V;
    seq.push_back(int32_t(std::max_element(last, last + V) - last));
  }
  EXPECT_EQ(greedy, std::vector<int32_t>(seq.begin() + 3, seq.end()));
}

TEST(Generate, SampleTokenHonoursTopK) {
  const std::vector<float> logits = {0.f, 5.f, 4.9f, -1.f};
  const CounterRng rng(1);
  for (uint64_t pos = 0; pos < 200; ++pos) {
    const int32_t id = sample_token(logits, {1.0, 2}, rng, pos);
    EXPECT_TRUE(id == 1 || id == 2);
  }
  EXPECT_EQ(sample_token(logits, {0.0, 0}, rng, 0), 1);
}

TEST(Generate, SampleTokenHonoursTopP) {
  // Probabilities 0.6, 0.3, 0.1 (id 2, id 0, id 1).
  const std::vector<float> logits = {float(std::log(0.3)), float(std::log(0.1)), float(std::log(0.6))};
  const CounterRng rng(7);
  auto drawn = [&](Sampling s) {
    std::set<int32_t> ids;
    for (uint64_t pos = 0; pos < 400; ++pos) ids.insert(sample_token(logits, s, rng, pos));
    return ids;
  };
  EXPECT_EQ(drawn({1.0, 0, 0.5}), std::set<int32_t>({2})) << "0.6 alone reaches 0.5";
  EXPECT_EQ(drawn({1.0, 0, 0.7}), std::set<int32_t>({0, 2})) << "0.6 + 0.3 reach 0.7";
  EXPECT_EQ(drawn({1.0, 0, 1.0}), std::set<int32_t>({0, 1, 2})) << "top-p 1 keeps every token";
  EXPECT_EQ(drawn({1.0, 1, 0.99}), std::set<int32_t>({2})) << "top-k applies first";
  // The kept tokens are renormalized: id 0 drawn about 1/3 of the time under top-p 0.7.
  int zeros = 0;
  for (uint64_t pos = 0; pos < 3000; ++pos) zeros += sample_token(logits, {1.0, 0, 0.7}, rng, pos) == 0;
  EXPECT_NEAR(zeros / 3000.0, 1.0 / 3, 0.04);
  EXPECT_THROW(sample_token(logits, {1.0, 0, 0.0}, rng, 0), ConfigError);
  EXPECT_THROW(sample_token(logits, {1.0, 0, 1.5}, rng, 0), ConfigError);
}

}  // namespace
}  // namespace meshtrain::checkpoint
