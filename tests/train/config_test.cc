#include "meshtrain/train/train_config.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "train/config_error.h"

using namespace meshtrain;

namespace {

const char* kValid = R"(
[model]
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
[data]
path = "runs/data"
[training]
steps = 10
)";

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return meshtrain::testing::config_error(text, overrides);
}

}  // namespace

TEST(Config, ValidConfigAndOverrides) {
  auto c = train::parse_config(kValid, {"training.steps=20", "optimizer.lr=1e-3", "model.norm=layernorm"});
  EXPECT_EQ(c.training.steps, 20);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.model.norm, model::NormKind::LayerNorm);
  EXPECT_EQ(c.model.head_dim, 16);
}

TEST(Config, UnknownKeyNamesThePath) {
  const auto e = error_of(std::string(kValid) + "\n[optimizer]\nlearning_rate = 3\n");
  EXPECT_NE(e.find("unknown key optimizer.learning_rate"), std::string::npos) << e;
  EXPECT_NE(error_of(kValid, {"model.dmodel=3"}).find("model.dmodel"), std::string::npos);
  EXPECT_NE(error_of(std::string(kValid) + "\n[modle]\n").find("unknown section [modle]"), std::string::npos);
}

TEST(Config, WrongTypeNamesTheExpectation) {
  const auto e = error_of(kValid, {"training.steps=\"ten\""});
  EXPECT_NE(e.find("training.steps: expected an integer"), std::string::npos) << e;
  EXPECT_NE(error_of(kValid, {"model.norm=batchnorm"}).find("expected one of \"rmsnorm\", \"layernorm\""),
            std::string::npos);
}

TEST(Config, ImpossibleShapes) {
  EXPECT_NE(error_of(kValid, {"model.n_heads=3"}).find("model.n_heads = 3 does not divide model.d_model = 64"),
            std::string::npos);
  EXPECT_NE(error_of(kValid, {"model.n_kv_heads=3"}).find("n_kv_heads = 3 does not divide"), std::string::npos);
  EXPECT_NE(error_of(kValid, {"data.seq_len=4096"}).find("exceeds model.max_seq_len"), std::string::npos);
  EXPECT_NE(error_of(kValid, {"training.micro_batch=0"}).find("training.micro_batch = 0"), std::string::npos);
  EXPECT_NE(error_of("[model]\nd_model = 64\n").find("data.path is required"), std::string::npos);
  EXPECT_NE(error_of("[model\n").find("<string>:1"), std::string::npos);
}

TEST(Config, TheHeadInRowChunks) {
  EXPECT_EQ(train::parse_config(kValid, {"training.head_chunk_rows=256"}).training.head_chunk_rows, 256);
  EXPECT_NE(error_of(kValid, {"training.head_chunk_rows=-1"}).find("training.head_chunk_rows = -1: expected >= 0"),
            std::string::npos);
  const auto e = error_of(kValid, {"training.head_chunk_rows=64", "training.reproducible=true"});
  EXPECT_NE(e.find("training.head_chunk_rows = 64 sums the LM head's weight gradient chunk by chunk"),
            std::string::npos) << e;
  EXPECT_NE(e.find("training.reproducible = false"), std::string::npos) << e;
}

// toml_reader: strict typed reads of one table.
#include "meshtrain/train/toml_reader.h"

TEST(TomlReader, TypedReadsAndUnknownKeys) {
  toml::table t = toml::parse("a = 3\nb = 2.5\nc = \"x\"\nd = [\"p\", \"q\"]\ne = true\nf = 4\n");
  train::TomlSection s(&t, "sec");
  int64_t a = 0;
  double b = 0, f = 0;
  std::string c;
  std::vector<std::string> d;
  bool e = false;
  s.read("a", a);
  s.read("b", b);
  s.read("c", c);
  s.read("d", d);
  s.read("e", e);
  s.read("f", f);  // an integer is accepted where a number is expected
  EXPECT_EQ(a, 3);
  EXPECT_DOUBLE_EQ(b, 2.5);
  EXPECT_EQ(c, "x");
  EXPECT_EQ(d, (std::vector<std::string>{"p", "q"}));
  EXPECT_TRUE(e);
  EXPECT_DOUBLE_EQ(f, 4.0);
  EXPECT_NO_THROW(s.finish());
  train::TomlSection partial(&t, "sec");
  partial.read("a", a);
  try {
    partial.finish();
    FAIL();
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("unknown key sec.b"), std::string::npos) << err.what();
  }
  train::TomlSection wrong(&t, "sec");
  EXPECT_THROW(wrong.read("c", a), ConfigError);  // a string where an integer belongs
}

TEST(TomlReader, OverridesParseValuesAndBareWords) {
  toml::table root;
  train::apply_override(root, "model.d_model=64");
  train::apply_override(root, "data.mode=padded");  // bare word -> string
  train::apply_override(root, "optimizer.lr=1e-3");
  EXPECT_EQ(root["model"]["d_model"].value<int64_t>(), 64);
  EXPECT_EQ(root["data"]["mode"].value<std::string>(), "padded");
  EXPECT_DOUBLE_EQ(*root["optimizer"]["lr"].value<double>(), 1e-3);
  EXPECT_THROW(train::apply_override(root, "nodot=1"), ConfigError);
  EXPECT_THROW(train::apply_override(root, "model.d_model"), ConfigError);
}
