// Covers src/meshtrain/train/config_reference.cc and the model field table
// (model/model_config_fields.h) as TOML reads it: docs/config.md is what the
// table produces, and every [model] key in it is read from TOML.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshtrain/model/model_config_fields.h"
#include "meshtrain/train/config_reference.h"
#include "meshtrain/train/train_config.h"

namespace meshtrain::train {
namespace {

TEST(ConfigReference, DocsConfigMdIsWhatTheFieldTableProduces) {
  const std::string path = std::string(MESHTRAIN_SOURCE_DIR) + "/docs/config.md";
  std::ifstream in(path);
  std::stringstream committed;
  committed << in.rdbuf();
  const std::string want = config_reference_markdown();
  if (committed.str() != want) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string out = std::string(tmp ? tmp : "/tmp") + "/config.md";
    std::ofstream(out) << want;
    ADD_FAILURE() << path << " differs from the field table; the expected text is in " << out
                  << ": cp " << out << " " << path;
  }
  EXPECT_NE(want.find("| `moe_renormalize` | boolean | `false` |"), std::string::npos);
  EXPECT_NE(want.find("`num_local_experts` (Mixtral)"), std::string::npos);
}

// Each table key is read from [model]: a config setting every key to a
// non-default value reads back those values.
TEST(ConfigReference, EveryModelKeyIsReadFromToml) {
  const std::string toml =
      "[model]\nvocab_size = 300\nd_model = 48\nn_layers = 2\nn_heads = 3\nn_kv_heads = 1\nhead_dim = 16\n"
      "ffn_hidden = 96\nmax_seq_len = 64\nnorm = \"layernorm\"\nnorm_eps = 1e-6\npositions = \"learned\"\n"
      "rope_theta = 5e5\nmlp = \"gelu\"\ntied_embeddings = true\nbias = true\ninit_std = 0.01\nseed = 7\n"
      "n_experts = 4\nexperts_top_k = 1\nmoe_layers = [1]\nmoe_capacity_factor = 1.5\nmoe_aux_loss_coeff = 0.1\n"
      "moe_shared_expert = true\nmoe_renormalize = true\nmoe_force_balance = true\n[data]\npath = \"x\"\nseq_len = 64\n";
  const TrainConfig c = parse_config(toml, {}, "test.toml");
  int fields = 0;
  const model::ModelConfig defaults;
  model::for_each_model_field(c.model, [&](const model::FieldInfo& f, const auto& v) {
    ++fields;
    EXPECT_NE(toml.find(std::string("\n") + f.key + " = "), std::string::npos) << f.key << " is not in this test";
    bool same = false;
    model::for_each_model_field(defaults, [&](const model::FieldInfo& g, const auto& d) {
      if constexpr (std::is_same_v<std::decay_t<decltype(d)>, std::decay_t<decltype(v)>>)
        if (std::string(g.key) == f.key) same = d == v;
    });
    EXPECT_FALSE(same) << f.key << " kept its default";
  });
  EXPECT_EQ(fields, 25);
  EXPECT_TRUE(c.model.moe_renormalize);
}

}  // namespace
}  // namespace meshtrain::train
