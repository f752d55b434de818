// The model as segments (a pipeline's unit of ownership): chained by hand,
// with the backward split into the input gradient (B) and the weight
// gradient (W), across two models holding different segments, they give the
// whole model's loss and gradients bit for bit.
#include <gtest/gtest.h>

#include "meshtrain/model/transformer.h"
#include "model/model_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

std::vector<std::vector<float>> grads_of(model::Transformer& m) {
  std::vector<std::vector<float>> g;
  for (int u = 0; u < m.num_units(); ++u)
    g.push_back(m.params().unit_grads(u).defined() ? to_vector<float>(m.params().unit_grads(u)) : std::vector<float>{});
  return g;
}

// Forward of every segment, then B of every segment in reverse, then W of
// every segment (as a zero-bubble schedule may): returns the loss sum.
double chain_by_hand(model::Transformer& m, const model::TokenBatch& b, double coeff, bool defer) {
  std::vector<model::SegmentState> st(size_t(m.num_segments()));
  Tensor x;
  for (int s = 0; s < m.num_segments(); ++s) x = m.forward_segment(s, b, x, st[size_t(s)], {true, coeff, false});
  const double loss = st.back().loss.loss_sum;
  Tensor d;
  for (int s = m.num_segments(); s-- > 0;) d = m.backward_segment_input(s, b, d, st[size_t(s)], defer);
  if (defer)
    for (int s = m.num_segments(); s-- > 0;) m.backward_segment_weight(s, st[size_t(s)]);
  return loss;
}

}  // namespace

TEST(Segments, ChainedByHandWithSplitBackwardEqualsTheWholeModel) {
  for (const auto& cfg : {tiny_llama(), tiny_gpt2()})
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (cfg.tied_embeddings ? "gpt2" : "llama") << " recompute=" << recompute);
      auto alloc = CachingAllocator::create();
      model::Transformer whole(cfg, alloc, exec_in(DType::F32, recompute));
      model::Transformer fused(cfg, alloc, exec_in(DType::F32, recompute));
      model::Transformer split(cfg, alloc, exec_in(DType::F32, recompute));
      const OwnedBatch b = tiny_batch();
      for (auto* m : {&whole, &fused, &split}) m->params().zero_grads();
      double ref = 0, a = 0, c = 0;
      for (int mb = 0; mb < 2; ++mb) {  // two micro-batches accumulate
        ref += whole.forward_backward(b.view(), 0.25).loss_sum;
        a += chain_by_hand(fused, b.view(), 0.25, /*defer=*/false);
        c += chain_by_hand(split, b.view(), 0.25, /*defer=*/true);
      }
      EXPECT_EQ(a, ref);
      EXPECT_EQ(c, ref);
      EXPECT_EQ(grads_of(fused), grads_of(whole));
      EXPECT_EQ(grads_of(split), grads_of(whole)) << "B + W must equal the fused backward bit for bit";
    }
}

TEST(Segments, TwoStagesHoldingHalvesEqualTheWholeModel) {
  const auto cfg = tiny_llama();  // 2 blocks: segments 0 (embedding), 1, 2, 3 (head)
  auto alloc = CachingAllocator::create();
  model::ModelPartition first, second;
  first.segments = {0, 1};
  second.segments = {2, 3};
  model::Transformer whole(cfg, alloc), a(cfg, alloc, {}, first), b(cfg, alloc, {}, second);
  EXPECT_FALSE(a.params().unit_values(2).defined()) << "a stage allocates only the units it holds";
  EXPECT_EQ(a.params().spec().total_params() + b.params().spec().total_params(),
            whole.params().spec().total_params());
  for (auto* m : {&whole, &a, &b}) m->params().zero_grads();
  const OwnedBatch batch = tiny_batch();
  const double ref = whole.forward_backward(batch.view(), 0.5).loss_sum;
  std::vector<model::SegmentState> st(4);
  const model::ForwardMode train{true, 0.5, false};
  Tensor x = a.forward_segment(0, batch.view(), {}, st[0], train);
  x = a.forward_segment(1, batch.view(), x, st[1], train);
  // The activation crosses to the second stage as a copy.
  Tensor moved = Tensor::empty(x.shape(), x.dtype(), alloc, MemCategory::Activations);
  moved.copy_from(x);
  x = b.forward_segment(2, batch.view(), moved, st[2], train);
  b.forward_segment(3, batch.view(), x, st[3], train);
  EXPECT_EQ(st[3].loss.loss_sum, ref);
  Tensor d = b.backward_segment_input(3, batch.view(), {}, st[3], false);
  d = b.backward_segment_input(2, batch.view(), d, st[2], false);
  d = a.backward_segment_input(1, batch.view(), d, st[1], false);
  a.backward_segment_input(0, batch.view(), d, st[0], false);
  for (int u = 0; u < 4; ++u) {
    model::Transformer& holder = u < 2 ? a : b;
    EXPECT_EQ(to_vector<float>(holder.params().unit_grads(u)), to_vector<float>(whole.params().unit_grads(u)))
        << "unit " << u;
  }
}

TEST(Segments, ATiedHeadOnAnotherStageReadsTheEmbeddingCopy) {
  // The head's stage holds the embedding unit as a copy (the layout plan
  // places it): the same loss as the whole model, and the head's part of
  // the tied gradient in the copy, the embedding's part on the first stage.
  const auto cfg = tiny_gpt2();
  auto alloc = CachingAllocator::create();
  model::ModelPartition first, last;
  first.segments = {0, 1};
  last.segments = {2, 3};
  last.copy_units = {0};
  model::Transformer whole(cfg, alloc), a(cfg, alloc, {}, first), b(cfg, alloc, {}, last);
  for (auto* m : {&whole, &a, &b}) m->params().zero_grads();
  const OwnedBatch batch = tiny_batch();
  const double ref = whole.forward_backward(batch.view(), 0.5).loss_sum;
  std::vector<model::SegmentState> st(4);
  const model::ForwardMode train{true, 0.5, false};
  Tensor x = a.forward_segment(1, batch.view(), a.forward_segment(0, batch.view(), {}, st[0], train), st[1], train);
  b.forward_segment(3, batch.view(), b.forward_segment(2, batch.view(), x, st[2], train), st[3], train);
  EXPECT_EQ(st[3].loss.loss_sum, ref);
  Tensor d = b.backward_segment_input(2, batch.view(), b.backward_segment_input(3, batch.view(), {}, st[3], false),
                                      st[2], false);
  a.backward_segment_input(0, batch.view(), a.backward_segment_input(1, batch.view(), d, st[1], false), st[0], false);
  const auto embed = to_vector<float>(a.params().unit_grads(0)), head = to_vector<float>(b.params().unit_grads(0));
  const auto both = to_vector<float>(whole.params().unit_grads(0));
  ASSERT_EQ(embed.size(), both.size());
  for (size_t i = 0; i < both.size(); ++i) EXPECT_NEAR(embed[i] + head[i], both[i], 1e-6) << i;
  // Without the copy the head has nothing to read: an internal error, the
  // plan never builds such a partition.
  last.copy_units.clear();
  try {
    model::Transformer m(cfg, alloc, {}, last);
    FAIL() << "the tied head without the embedding or its copy must be refused";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("its copy"), std::string::npos) << e.what();
  }
}

TEST(Segments, UnfusedResidualMatchesTheFusedGemm) {
  // Where a reduction must come between the output projection and the
  // residual add, the add is a separate pass: same result up to rounding.
  auto alloc = CachingAllocator::create();
  model::ExecOptions unfused = exec_in(DType::F64);
  unfused.fuse_residual = false;
  model::Transformer a(tiny_llama(), alloc, exec_in(DType::F64)), b(tiny_llama(), alloc, unfused);
  const OwnedBatch batch = tiny_batch();
  a.params().zero_grads();
  b.params().zero_grads();
  EXPECT_NEAR(a.forward_backward(batch.view(), 1.0).loss_sum, b.forward_backward(batch.view(), 1.0).loss_sum, 1e-12);
  for (int u = 0; u < a.num_units(); ++u) {
    const auto ga = to_vector<double>(a.params().unit_grads(u)), gb = to_vector<double>(b.params().unit_grads(u));
    for (size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(ga[i], gb[i], 1e-12) << "unit " << u;
  }
}
