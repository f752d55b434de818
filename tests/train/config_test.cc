#include "meshtrain/train/train_config.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"

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
  try {
    train::parse_config(text, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
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
