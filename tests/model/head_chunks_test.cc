// The LM head in row chunks (ExecOptions::head_chunk_rows): the loss, its
// gradient and the head's weight gradient run in backward a chunk of rows
// at a time. Every row's dlogits and input gradient are those of the whole
// micro-batch, so only the head's weight gradient (a sum over rows) can
// change, and chunks of whole GEMM k blocks keep even its bits; the
// [n, vocab] logits never exist, only a chunk's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/model/transformer.h"
#include "model/model_fixtures.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

// One layer, a vocabulary of 96; a micro-batch of 4 rows x 256 positions
// (1024 rows of logits: two k blocks of the packed GEMM's 512).
model::ModelConfig head_model(bool gpt2) {
  model::ModelConfig c = gpt2 ? tiny_gpt2() : tiny_llama();
  c.vocab_size = 96;
  c.d_model = 16;
  c.n_layers = 1;
  c.ffn_hidden = 32;
  c.max_seq_len = 256;
  c.init_std = 0.1;
  return c;
}

OwnedBatch long_batch(uint32_t seed) {
  OwnedBatch b;
  b.rows = 4;
  b.seq = 256;
  std::mt19937 gen(seed);
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t t = 0; t < b.seq; ++t) {
      b.tokens.push_back(int32_t(gen() % 96));
      b.targets.push_back(t % 37 == 5 ? -1 : int32_t(gen() % 96));  // a few unsupervised rows
      b.positions.push_back(int32_t(t % 128));
      b.segments.push_back(int32_t(t / 128));  // two documents per row
    }
  return b;
}

model::ExecOptions chunked(int64_t rows) {
  model::ExecOptions e = exec_in(DType::F32);
  e.head_chunk_rows = rows;
  return e;
}

struct TrainedGrads {
  double loss = 0;
  int64_t count = 0;
  std::vector<std::vector<float>> grads;  // per parameter, in the store's order
  std::vector<std::string> names;
};

// Two micro-batches accumulated, then each parameter's gradient.
TrainedGrads train(const model::ModelConfig& cfg, const model::ExecOptions& exec) {
  model::Transformer m(cfg, CachingAllocator::create(), exec);
  m.params().zero_grads();
  TrainedGrads r;
  for (uint32_t mb = 0; mb < 2; ++mb) {
    const OwnedBatch b = long_batch(7 + mb);
    const kernels::CrossEntropyResult l = m.forward_backward(b.view(), 1.0 / 2000);
    r.loss += l.loss_sum;
    r.count += l.count;
  }
  for (int i = 0; i < m.params().size(); ++i) {
    r.grads.push_back(to_vector<float>(m.params().get(i).grad));
    r.names.push_back(m.params().get(i).spec->name);
  }
  return r;
}

bool sums_over_rows_of_the_head(const std::string& name, bool tied) {
  return name == "lm_head.weight" || (tied && name == "model.embed_tokens.weight");
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, double(std::fabs(b[i])));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])) / scale);
  return worst;
}

}  // namespace

TEST(HeadChunks, WholeKBlocksKeepEveryBitOtherChunksChangeOnlyTheHeadsWeightGradient) {
  const bool packed = kernels::active_gemm_impl() == kernels::GemmImpl::kPacked;
  const int64_t kc = kernels::packed_gemm_blocking().kc;
  for (bool gpt2 : {false, true}) {
    SCOPED_TRACE(gpt2 ? "gpt2 (tied, biases)" : "llama");
    const model::ModelConfig cfg = head_model(gpt2);
    const TrainedGrads whole = train(cfg, exec_in(DType::F32));
    ASSERT_GT(whole.count, 0);
    for (int64_t rows : {kc, int64_t(100), int64_t(1024), int64_t(5000)}) {
      SCOPED_TRACE(::testing::Message() << "chunks of " << rows << " rows");
      const TrainedGrads part = train(cfg, chunked(rows));
      // The loss: the same rows' losses, summed per chunk.
      EXPECT_EQ(part.count, whole.count);
      EXPECT_NEAR(part.loss, whole.loss, 1e-12 * std::fabs(whole.loss));
      // One chunk (1024 and 5000 >= n) is the unchunked arithmetic; chunks
      // of whole k blocks are too, on the packed GEMM (kc from 0).
      const bool same_bits = rows >= 1024 || (packed && rows % kc == 0);
      for (size_t i = 0; i < whole.grads.size(); ++i) {
        SCOPED_TRACE(whole.names[i]);
        if (same_bits || !sums_over_rows_of_the_head(whole.names[i], cfg.tied_embeddings))
          EXPECT_EQ(part.grads[i], whole.grads[i]);
        else
          EXPECT_LT(max_relative_difference(part.grads[i], whole.grads[i]), 1e-5);
      }
    }
  }
}

TEST(HeadChunks, OnlyAChunkOfLogitsIsEverAllocated) {
  model::ModelConfig cfg = head_model(false);
  cfg.vocab_size = 2048;  // the logits (8 MiB) the largest tensor of the step
  const OwnedBatch b = long_batch(3);
  const int64_t n = b.rows * b.seq;
  const int64_t logits = int64_t(CachingAllocator::rounded_size(size_t(n * cfg.vocab_size * 4)));
  const int64_t chunk = int64_t(CachingAllocator::rounded_size(size_t(128 * cfg.vocab_size * 4)));
  struct Measured {
    int64_t kept_after_forward, peak_workspace, peak_total;
  };
  auto measure = [&](int64_t rows) {
    auto alloc = CachingAllocator::create();
    model::Transformer m(cfg, alloc, chunked(rows));
    m.params().zero_grads();
    m.forward_backward(b.view(), 1.0);  // warm: the caching allocator holds its blocks
    alloc->tracker().reset_peaks();
    std::vector<model::SegmentState> st(size_t(m.num_segments()));
    Tensor x;
    for (int s = 0; s < m.num_segments(); ++s) x = m.forward_segment(s, b.view(), x, st[size_t(s)], {true, 1.0, false});
    Measured r{alloc->tracker().current(MemCategory::Activations), 0, 0};
    Tensor d;
    for (int s = m.num_segments(); s-- > 0;) d = m.backward_segment_input(s, b.view(), d, st[size_t(s)], false);
    r.peak_workspace = alloc->tracker().peak(MemCategory::Workspace);
    r.peak_total = alloc->tracker().total_peak();
    return r;
  };
  const Measured whole = measure(0), part = measure(128);
  // Forward keeps no logits; backward's chunk of them is workspace.
  EXPECT_EQ(whole.kept_after_forward - part.kept_after_forward, logits);
  EXPECT_LE(part.peak_workspace, whole.peak_workspace + chunk);
  EXPECT_LE(part.peak_total, whole.peak_total - logits + chunk + int64_t(n * cfg.d_model * 4))
      << "at most the stream's gradient [n, d] more than the logits' saving";
}

TEST(HeadChunks, EvaluationSumsTheSameLossAndLogitsAreWhole) {
  const model::ModelConfig cfg = head_model(true);
  const OwnedBatch b = long_batch(11);
  model::Transformer whole(cfg, CachingAllocator::create(), exec_in(DType::F32));
  model::Transformer part(cfg, CachingAllocator::create(), chunked(300));
  const kernels::CrossEntropyResult a = whole.forward_loss(b.view()), c = part.forward_loss(b.view());
  EXPECT_EQ(c.count, a.count);
  EXPECT_NEAR(c.loss_sum, a.loss_sum, 1e-12 * std::fabs(a.loss_sum));
  EXPECT_EQ(to_vector<float>(part.forward_logits(b.view())), to_vector<float>(whole.forward_logits(b.view())));
}

TEST(HeadChunks, SegmentsReportTheLossAfterTheHeadsBackward) {
  const model::ModelConfig cfg = head_model(false);
  const OwnedBatch b = long_batch(5);
  model::Transformer m(cfg, CachingAllocator::create(), chunked(256));
  m.params().zero_grads();
  std::vector<model::SegmentState> st(size_t(m.num_segments()));
  Tensor x;
  for (int s = 0; s < m.num_segments(); ++s) x = m.forward_segment(s, b.view(), x, st[size_t(s)], {true, 0.5, false});
  EXPECT_TRUE(st.back().loss_in_backward);
  EXPECT_EQ(st.back().loss.count, 0) << "no loss before the head's backward";
  Tensor d;
  for (int s = m.num_segments(); s-- > 0;) d = m.backward_segment_input(s, b.view(), d, st[size_t(s)], true);
  EXPECT_GT(st.back().loss.count, 0);
  model::Transformer ref(cfg, CachingAllocator::create(), exec_in(DType::F32));
  ref.params().zero_grads();
  EXPECT_NEAR(st.back().loss.loss_sum, ref.forward_backward(b.view(), 0.5).loss_sum, 1e-9);
}
