// Checkpoints across pipeline layouts (docs/math.md, "Rule: restore
// claims"): a checkpoint saved at pp = 2 loads at pp = 1, at pp = 4 and
// under every other schedule; what the target layout holds, written back,
// is the same checkpoint bit for bit (parameters and Adam moments), and
// the next step continues the uninterrupted run bit for bit (same window;
// a tied model while its embedding and head stay on two stages). A tied
// embedding is saved once and restored into both of its copies.
#include <gtest/gtest.h>

#include <mutex>

#include "meshtrain/train/equivalence.h"
#include "train/train_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;
namespace fs = std::filesystem;

namespace {

train::TrainConfig config(const std::string& layout, bool tied, const fs::path& dir) {
  auto c = tiny_train_config();
  c.model.n_layers = 8;
  c.model.tied_embeddings = tied;
  c.training.micro_batch = 2;
  c.training.grad_accum = 4;
  c.training.steps = 4;
  c.checkpoint.dir = dir.string();
  c.training.threads = 1;  // one team size on every layout: the bitwise claims hold for fixed kernels
  c.validate();
  return train::with_layout(c, train::parse_layout(layout));
}

struct After {
  double loss = 0;             // of the step after the save (or restore)
  std::vector<double> params;  // the whole model after that step
  std::string claim;
  std::vector<std::vector<double>> tied_copies;  // unit 0 on each stage holding it
};

// Trains 2 steps and saves (or restores from `from` and saves what the
// layout holds), then one more step.
After run(const train::TrainConfig& cfg, const data::TokenDataset& ds, const fs::path& from = {}) {
  After out;
  std::mutex mu;
  with_trainers(cfg, ds, std::nullopt, [&](train::Trainer& t) {
    std::string claim;
    if (from.empty()) {
      for (int k = 0; k < 2; ++k) t.step();
    } else {
      claim = t.restore(checkpoint::CheckpointReader::open(from.string()));
    }
    const auto copy = t.engine().gather_unit(0, false);
    t.save_checkpoint();
    const double loss = t.step().loss;
    const auto params = train::gather_model(t, false);
    std::lock_guard<std::mutex> lock(mu);
    if (!copy.empty()) out.tied_copies.push_back(copy);
    if (t.context().rank == 0) out.loss = loss, out.params = params, out.claim = claim;
  });
  return out;
}

}  // namespace

TEST(PipelineCheckpoint, SavedAtTwoStagesResumesAtOneOrFourAndUnderAnotherSchedule) {
  const auto ds = varied_documents(96, 13);
  const fs::path src = fresh_dir("pp2");
  const After base = run(config("pp=2,schedule=1f1b", false, src), ds);
  const auto saved = tensors_of(src);
  for (std::string target :
       {"pp=1", "pp=4,schedule=zb-h1", "pp=2,schedule=interleaved,v=2", "pp=2,schedule=zb-v", "pp=4,schedule=gpipe"}) {
    SCOPED_TRACE(target);
    const fs::path dst = fresh_dir("pp_dst");
    const After got = run(config(target, false, dst), ds, src);
    EXPECT_EQ(tensors_of(dst), saved) << "parameters and moments, bit for bit";
    EXPECT_EQ(got.loss, base.loss);
    EXPECT_EQ(got.params, base.params);
    EXPECT_NE(got.claim.find("bitwise replay"), std::string::npos) << got.claim;
  }
}

TEST(PipelineCheckpoint, ATiedEmbeddingIsSavedOnceAndRestoredIntoBothCopies) {
  const auto ds = varied_documents(96, 14);
  const fs::path src = fresh_dir("tied_pp4");
  const After base = run(config("pp=4,schedule=1f1b", true, src), ds);
  ASSERT_EQ(base.tied_copies.size(), 2u);  // stages 0 and 3
  EXPECT_EQ(base.tied_copies[0], base.tied_copies[1]);
  const auto saved = tensors_of(src);
  EXPECT_EQ(saved.count("model.embed_tokens.weight"), 1u);
  EXPECT_EQ(saved.count("lm_head.weight"), 0u);
  for (std::string target : {"pp=2,schedule=zb-h1", "pp=1"}) {
    SCOPED_TRACE(target);
    const fs::path dst = fresh_dir("tied_dst");
    const After got = run(config(target, true, dst), ds, src);
    EXPECT_EQ(tensors_of(dst), saved);
    for (const auto& copy : got.tied_copies) EXPECT_EQ(copy, got.tied_copies.front());
    if (target == "pp=1") {
      // One rank interleaves the tied gradient's two sums: close, and said so.
      EXPECT_NEAR(got.loss, base.loss, 1e-6 * base.loss);
      EXPECT_NE(got.claim.find("numerically close"), std::string::npos) << got.claim;
    } else {
      EXPECT_EQ(got.loss, base.loss);
      EXPECT_EQ(got.params, base.params);
      EXPECT_NE(got.claim.find("bitwise replay"), std::string::npos) << got.claim;
    }
  }
}
