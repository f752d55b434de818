// What tensor parallelism costs, measured against its formulas:
//  - communication per block: without sequence parallelism forward +
//    backward move 4 all-reduces of b*s*h elements, 8 (t-1)/t b s h e bytes
//    per rank on a ring (docs/math.md (M.22)); with it the same bytes as 4 all-gathers + 4
//    reduce-scatters; the regions' accounting equals what the tp group's
//    own counters saw;
//  - overlap: the column-parallel input gradients' sums run behind the
//    weight gradients (docs/math.md (M.78)) and the row-parallel outputs'
//    sums in pieces behind the next piece's GEMM (M.79), with the same bits
//    as without, and the regions count time in flight behind them;
//  - activation memory: the rank's peak Activations bytes over a step equal
//    the prediction of activation_bytes(), and sequence parallelism saves
//    (1 - 1/t) n e (2L + 1)(d + k) bytes (k = 1 for RMSNorm, 2 for LayerNorm).
#include <gtest/gtest.h>

#include "meshtrain/comm/thread_world.h"
#include "meshtrain/model/activation_bytes.h"
#include "meshtrain/model/transformer.h"
#include "support/run_ranks.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

model::ModelConfig accounting_model(bool gpt2) {
  model::ModelConfig c;
  c.vocab_size = 259;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_hidden = 64;
  c.max_seq_len = 128;
  if (gpt2) {
    c.norm = model::NormKind::LayerNorm;
    c.positions = model::PositionKind::Learned;
    c.mlp = model::MlpKind::Gelu;
    c.tied_embeddings = true;
    c.bias = true;
  }
  c.finalize();
  return c;
}

// 2 rows x 128 positions: every tensor's bytes are whole allocator granules
// at t = 2 (n / t = 128 rows of f32 statistics = 512 bytes).
struct Batch {
  static constexpr int64_t rows = 2, seq = 128, n = rows * seq;
  std::vector<int32_t> tokens, targets, positions, segments;
  Batch() {
    for (int64_t i = 0; i < n; ++i) {
      tokens.push_back(int32_t((i * 31 + 7) % 259));
      targets.push_back(i % 9 == 4 ? -1 : int32_t((i * 17 + 3) % 259));
      positions.push_back(int32_t(i % seq));
      segments.push_back(0);
    }
  }
  model::TokenBatch view() const { return {rows, seq, tokens.data(), targets.data(), positions.data(), segments.data()}; }
};

struct RankRun {
  model::TpCommStats stats;
  comm::CommStats group;
  int64_t peak_activations = 0, predicted = 0;
  std::vector<std::vector<float>> grads;  // by parameter index
};

// One forward + backward of the batch on every rank of a tp group of t.
std::vector<RankRun> run(const model::ModelConfig& cfg, int t, bool sp, bool overlap = true) {
  std::vector<RankRun> out(static_cast<size_t>(t));
  auto world = comm::ThreadWorld::create(t);
  const Batch batch;
  run_ranks(t, [&](int r) {
    auto alloc = CachingAllocator::create();
    model::ExecOptions exec;
    exec.overlap_tp = overlap;
    model::ModelPartition part;
    part.tp_size = t;
    part.tp_rank = r;
    part.sequence_parallel = sp;
    comm::ProcessGroup* tp = t > 1 ? world->group(r).get() : nullptr;
    model::Transformer m(cfg, alloc, exec, part, tp);
    m.params().zero_grads();
    if (tp) tp->reset_stats();
    alloc->tracker().reset_peaks();
    m.forward_backward(batch.view(), 1.0 / 200);
    RankRun& rr = out[size_t(r)];
    rr.stats = m.tp_stats();
    if (tp) rr.group = tp->stats();
    rr.peak_activations = alloc->tracker().peak(MemCategory::Activations);
    for (int i = 0; i < m.params().size(); ++i) rr.grads.push_back(to_vector<float>(m.params().get(i).grad));
    rr.predicted = model::activation_bytes(cfg, m.params().spec(), Batch::n, m.stream_rows(Batch::n), DType::F32)
                       .total(cfg.n_layers);
  });
  return out;
}

}  // namespace

TEST(TpAccounting, BytesPerBlockEqualTheRingFormula) {
  const model::ModelConfig cfg = accounting_model(false);
  const int64_t bsh_e = Batch::n * cfg.d_model * 4;  // b s h e, f32
  for (int t : {2, 4}) {
    for (bool sp : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tp=" << t << " sp=" << sp);
      for (const RankRun& r : run(cfg, t, sp)) {
        for (int s = 1; s <= cfg.n_layers; ++s) {
          using C = model::TpCollective;
          const auto& ar = r.stats.at(s, C::AllReduce);
          const auto& ag = r.stats.at(s, C::AllGather);
          const auto& rs = r.stats.at(s, C::ReduceScatter);
          // The forward's two row-parallel outputs are summed in P pieces each (M.79).
          const int64_t P = sp ? 2 : 4;  // TpRegions::row_output_pieces()
          if (!sp) {
            EXPECT_EQ(ar.calls, 2 + 2 * P);
            EXPECT_EQ(ar.message_bytes, 4 * bsh_e);
            EXPECT_EQ(ag.calls + rs.calls, 0);
          } else {
            EXPECT_EQ(ag.calls, 4);
            EXPECT_EQ(rs.calls, 2 + 2 * P);
            EXPECT_EQ(ag.message_bytes, 4 * bsh_e);
            EXPECT_EQ(rs.message_bytes, 4 * bsh_e);
            EXPECT_EQ(ar.calls, 0);
          }
          // 8 (t - 1)/t b s h e per rank on a ring, with or without SP.
          EXPECT_EQ(r.stats.segment_total(s).ring_bytes, 8 * (t - 1) * bsh_e / t);
        }
        // The accounting is what the group itself moved (the embedding and
        // the head's vocabulary-parallel loss included).
        for (auto [c, k] : {std::pair{model::TpCollective::AllReduce, comm::OpKind::AllReduce},
                            std::pair{model::TpCollective::AllGather, comm::OpKind::AllGather},
                            std::pair{model::TpCollective::ReduceScatter, comm::OpKind::ReduceScatter}}) {
          EXPECT_EQ(uint64_t(r.stats.total(c).calls), r.group[k].calls) << model::to_string(c);
          EXPECT_EQ(uint64_t(r.stats.total(c).message_bytes), r.group[k].bytes) << model::to_string(c);
        }
      }
    }
  }
}

// docs/math.md (M.78), (M.79) and, under SP, (M.81): a block's sums and
// gathers run behind computation, with the bits, bytes and activation peak
// of the serial order.
TEST(TpAccounting, CollectivesRunBehindComputationWithTheSameBits) {
  for (bool gpt2 : {false, true}) {
    const model::ModelConfig cfg = accounting_model(gpt2);
    for (int t : {2, 4}) {
      for (bool sp : {false, true}) {
        SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2" : "llama") << " tp=" << t << " sp=" << sp);
        const auto serial = run(cfg, t, sp, false), overlapped = run(cfg, t, sp, true);
        using C = model::TpCollective;
        const C behind = sp ? C::ReduceScatter : C::AllReduce;  // (M.78)'s and (M.79)'s sums
        for (int r = 0; r < t; ++r) {
          const RankRun &a = serial[size_t(r)], &b = overlapped[size_t(r)];
          ASSERT_EQ(a.grads.size(), b.grads.size());
          for (size_t i = 0; i < a.grads.size(); ++i)
            EXPECT_EQ(a.grads[i], b.grads[i]) << "rank " << r << " parameter " << i;
          EXPECT_EQ(a.stats.total().message_bytes, b.stats.total().message_bytes);
          EXPECT_EQ(a.peak_activations, b.peak_activations);
          EXPECT_EQ(a.stats.total().overlapped_seconds, 0.0);
          // Each block's sums (and gathers under SP) ran behind work; the
          // embedding's and the head's did not.
          std::vector<C> kinds{behind};
          if (sp) kinds.push_back(C::AllGather);
          for (C c : kinds) {
            SCOPED_TRACE(model::to_string(c));
            for (int s = 1; s <= cfg.n_layers; ++s) EXPECT_GT(b.stats.at(s, c).overlapped_seconds, 0.0) << "block " << s;
            EXPECT_EQ(b.stats.at(0, c).overlapped_seconds + b.stats.at(cfg.n_layers + 1, c).overlapped_seconds, 0.0);
          }
        }
      }
    }
  }
}

TEST(TpAccounting, SequenceParallelismSavesThePredictedActivationBytes) {
  for (bool gpt2 : {false, true}) {
    const model::ModelConfig cfg = accounting_model(gpt2);
    const int64_t k = gpt2 ? 2 : 1, L = cfg.n_layers, d = cfg.d_model, n = Batch::n, e = 4;
    const auto one = run(cfg, 1, false);
    EXPECT_EQ(one[0].peak_activations, one[0].predicted);
    for (int t : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2" : "llama") << " tp=" << t);
      const auto without = run(cfg, t, false), with = run(cfg, t, true);
      for (int r = 0; r < t; ++r) {
        EXPECT_EQ(without[size_t(r)].peak_activations, without[size_t(r)].predicted) << "rank " << r;
        EXPECT_EQ(with[size_t(r)].peak_activations, with[size_t(r)].predicted) << "rank " << r;
        EXPECT_LT(without[size_t(r)].peak_activations, one[0].peak_activations);
      }
      // At t = 2 every tensor is whole granules, so the closed form is exact.
      if (t == 2) {
        EXPECT_EQ(without[0].peak_activations - with[0].peak_activations, (t - 1) * n * e * (2 * L + 1) * (d + k) / t);
      }
      EXPECT_GT(without[0].peak_activations, with[0].peak_activations);
    }
  }
}
