// Every number and name of a config is bounded before anything is derived
// from it: each rejection names the key (no segfault, bad_alloc, hang,
// abort or a run that skips every step).
#include "meshtrain/train/config_limits.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/train/train_config.h"

using namespace meshtrain;

namespace {

const char* kBase = R"(
[model]
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
[data]
path = "runs/data"
)";

// The ConfigError message for the overrides, or "" when they are accepted.
std::string rejection(const std::string& override, const std::string& other = "training.steps=10") {
  try {
    train::parse_config(kBase, {other, override});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_rejected(const std::string& override, const std::string& key) {
  const std::string msg = rejection(override);
  EXPECT_NE(msg.find(key), std::string::npos) << override << " -> '" << msg << "'";
}

}  // namespace

TEST(ConfigLimits, InfiniteAndInsaneFloatsNameTheirKey) {
  expect_rejected("optimizer.lr=inf", "optimizer.lr = inf");
  expect_rejected("optimizer.lr=1e308", "optimizer.lr");
  expect_rejected("optimizer.lr=nan", "optimizer.lr");
  expect_rejected("model.init_std=inf", "model.init_std");
  expect_rejected("optimizer.weight_decay=inf", "optimizer.weight_decay");
  expect_rejected("optimizer.grad_clip=inf", "optimizer.grad_clip");
  expect_rejected("model.rope_theta=inf", "model.rope_theta");
  expect_rejected("comm.timeout_s=inf", "comm.timeout_s");
  expect_rejected("parallel.bucket_mb=1e300", "parallel.bucket_mb");
  // lr x wd >= 1 flips the sign of every weight each step.
  EXPECT_NE(rejection("optimizer.weight_decay=500", "optimizer.lr=0.01").find("optimizer.lr x optimizer.weight_decay"),
            std::string::npos);
  EXPECT_EQ(rejection("optimizer.lr=0.5"), "");
}

TEST(ConfigLimits, HugeIntegersNameTheirKey) {
  const std::string big = std::to_string(int64_t(1) << 62);
  expect_rejected("model.d_model=" + big, "model.d_model = " + big);
  expect_rejected("model.ffn_hidden=" + big, "model.ffn_hidden");
  expect_rejected("model.max_seq_len=" + big, "model.max_seq_len");
  expect_rejected("model.n_layers=100000000", "model.n_layers = 100000000");
  expect_rejected("model.vocab_size=" + big, "model.vocab_size");
  expect_rejected("parallel.dp=100000", "parallel.dp = 100000");
  expect_rejected("training.micro_batch=" + big, "training.micro_batch");
  expect_rejected("training.threads=100000", "training.threads");
  expect_rejected("comm.max_restarts=-1", "comm.max_restarts");
}

TEST(ConfigLimits, NamesMustBeUtf8) {
  expect_rejected("data.path=runs/\xff", "data.path = 'runs/\\xff' is not valid UTF-8");  // raw byte from --set
  train::TrainConfig c = train::parse_config(kBase);
  c.data.path = std::string("runs/data\xff");
  try {
    train::check_config_limits(c);
    FAIL() << "a non-UTF-8 data.path was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.path = 'runs/data\\xff' is not valid UTF-8"), std::string::npos)
        << e.what();
  }
  c.data.path = "runs/data";
  c.metrics.run_dir = std::string("runs/\xc3");  // a truncated two-byte sequence
  EXPECT_THROW(train::check_config_limits(c), ConfigError);
}

TEST(ConfigLimits, ADirectoryIsNotAConfigFile) {
  const std::string dir = ::testing::TempDir() + "/mt_cfgdir_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  try {
    train::load_config(dir);
    FAIL() << "a directory was read as an (empty) config";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A device or a pipe is not a config file: /dev/zero was read until
// bad_alloc.
TEST(ConfigLimits, ADeviceIsNotAConfigFile) {
  try {
    train::load_config("/dev/zero");
    FAIL() << "a device was read as a config";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config file '/dev/zero' is not a regular file"), std::string::npos)
        << e.what();
  }
}

// A string where a list belongs is refused, not taken as a list of one.
TEST(ConfigLimits, AListKeyNeedsAList) {
  expect_rejected("data.sources=\"notalist\"", "data.sources = \"notalist\": expected an array of strings");
  expect_rejected("data.sources=notalist", "expected an array of strings, e.g. [\"notalist\"]");
  EXPECT_EQ(rejection("data.sources=[\"corpus.txt\"]"), "");
}

// Reproducible mode's binary tree needs a power-of-two window, checked
// with the config (before any data is prepared), not first by the trainer.
TEST(ConfigLimits, ReproducibleModeNeedsAPowerOfTwoWindow) {
  const std::string e = rejection("parallel.dp=3", "training.reproducible=true");
  EXPECT_NE(e.find("dp x grad_accum = 3 x 1 = 3 must be a power of two"), std::string::npos) << e;
  EXPECT_EQ(rejection("parallel.dp=4", "training.reproducible=true"), "");
  EXPECT_EQ(rejection("parallel.dp=3"), "") << "without the mode any dp is fine";
}

TEST(ConfigLimits, AllowChangesNamesOnlyComparedSettings) {
  EXPECT_EQ(rejection("checkpoint.allow_changes=[\"optimizer.lr\", \"model.norm_eps\"]"), "");
  expect_rejected("checkpoint.allow_changes=[\"optimizer.lrr\"]", "'optimizer.lrr' is not a setting a resume compares");
}
