// Fine-tuning (checkpoint.init_from, docs/checkpoints.md "Fine-tuning"): a
// new run starts from a trained model's weights, saved in another layout,
// at step 0 with a fresh optimizer, on other data; a checkpoint of its own
// run directory comes first (a restarted fine-tune resumes); a model that
// does not match the weights is refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "meshtrain/checkpoint/reader.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

TEST(FineTune, StartsFromTheWeightsOfAnotherRunInAnyLayout) {
  const fs::path base = fresh_dir("ft_base"), tuned = fresh_dir("ft_tuned");
  auto cfg = tiny_train_config();
  cfg.checkpoint.dir = base.string();
  const std::vector<double> trained = params_after(cfg, varied_documents(64, 3), [](train::Trainer& t) {
    for (int s = 0; s < 3; ++s) t.step();
    t.save_checkpoint();
  });

  // Another layout (dp = 2, ZeRO 3), other data, another learning rate.
  auto ft = tiny_train_config();
  ft.parallel.dp = 2;
  ft.parallel.zero_stage = 3;
  ft.training.micro_batch = 2;
  ft.optimizer.lr = 1e-4;
  ft.checkpoint.dir = tuned.string();
  ft.checkpoint.init_from = base.string();
  const data::TokenDataset other = varied_documents(32, 11);
  const std::vector<double> loaded = params_after(ft, other, [&](train::Trainer& t) {
    const std::string line = t.resume_or_init();
    EXPECT_EQ(line, "initialized from checkpoint " + (base / "step-00000003").string());
    EXPECT_EQ(t.steps_done(), 0) << "a new run: its own step count, schedule and optimizer";
  });
  EXPECT_EQ(loaded, trained) << "every weight as trained";

  // It trains on from the start of its own data, and a restart of the
  // fine-tune resumes its own checkpoint, not the weights it started from.
  with_trainers(ft, other, std::nullopt, [&](train::Trainer& t) {
    t.resume_or_init();
    t.step();
    t.save_checkpoint();
  });
  EXPECT_EQ(checkpoint::CheckpointReader::open(tuned.string()).metadata().at("consumed_rows").get<int64_t>(), 4)
      << "one window of 2 x 2 rows: the data position is the new run's";
  with_trainers(ft, other, std::nullopt, [&](train::Trainer& t) {
    const std::string line = t.resume_or_init();
    EXPECT_EQ(line.find("resumed from " + (tuned / "step-00000001").string()), 0u) << line;
    EXPECT_EQ(t.steps_done(), 1);
  });

  // Weights of another shape are refused, naming what differs.
  auto wider = ft;
  wider.model.d_model = 32;
  wider.checkpoint.dir = fresh_dir("ft_wider").string();
  try {
    with_trainers(wider, other, std::nullopt, [&](train::Trainer& t) { t.resume_or_init(); });
    ADD_FAILURE() << "a model of another width started from these weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
  }
}
