// The model under tensor and sequence parallelism against one rank, in f64
// (tolerance 1e-10 relative: only summation order differs): the loss and
// every gradient element, the shards assembled into whole tensors by the
// layout plan's rules (a gradient partial over tp ranks — replicated
// weights under sequence parallelism, KV heads shared by several ranks —
// summed over exactly the ranks sharing it; every other copy identical on
// every rank that holds it), for tp in {2, 4} x SP off/on x {MHA, GQA with
// kv >= tp, GQA with kv < tp} x {Llama, GPT-2 tied}; the vocabulary-parallel
// cross-entropy against the serial kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "meshtrain/comm/thread_world.h"
#include "meshtrain/model/transformer.h"
#include "meshtrain/model/vocab_parallel.h"
#include "meshtrain/parallel/layout_plan.h"
#include "model/model_fixtures.h"
#include "support/numeric.h"
#include "support/run_ranks.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

model::ModelConfig four_heads(int kv, bool gpt2) {
  model::ModelConfig c = gpt2 ? tiny_gpt2() : tiny_llama();
  c.n_heads = 4;
  c.n_kv_heads = kv;
  c.head_dim = 2;  // d_model 8
  c.finalize();
  return c;
}

struct Result {
  double loss = 0;
  int64_t count = 0;
  std::vector<double> grads;  // global order: global spec params, each whole
};

// One forward + backward of tiny_batch at tp = t (threads), gradients
// assembled by the plan's rules; t = 1 is the reference.
Result run_tp(const model::ModelConfig& cfg, int t, bool sp, bool defer_weights = false, bool recompute = false) {
  const model::ModelSpec global = model::build_model_spec(cfg);
  std::vector<int64_t> base(global.params.size() + 1, 0);
  for (size_t i = 0; i < global.params.size(); ++i) base[i + 1] = base[i] + global.params[i].numel();
  std::vector<std::vector<double>> per_rank(size_t(t), std::vector<double>(size_t(base.back()), 0.0));
  std::vector<std::vector<int>> writers(size_t(t), std::vector<int>(size_t(base.back()), 0));
  std::vector<char> partial(size_t(base.back()), 0);
  std::vector<Result> results(static_cast<size_t>(t));
  std::mutex mu;
  auto world = comm::ThreadWorld::create(t);
  const OwnedBatch batch = tiny_batch();
  run_ranks(t, [&](int r) {
    comm::MeshShape mesh;
    mesh.tp = t;
    parallel::LayoutOptions opt;
    opt.sequence_parallel = sp;
    const parallel::LayoutPlan plan(cfg, mesh, r, opt);
    auto alloc = CachingAllocator::create();
    model::ExecOptions exec = exec_in(DType::F64, recompute);
    model::Transformer m(cfg, alloc, exec, plan.partition(), t > 1 ? world->group(r).get() : nullptr);
    // Biases start at zero; give them values (a function of the global
    // index, so every layout agrees) so a bias added once per rank shows.
    for (int i = 0; i < m.params().size(); ++i) {
      const model::ParamSpec& p = plan.spec().params[size_t(i)];
      if (p.name.size() < 5 || p.name.compare(p.name.size() - 5, 5, ".bias") != 0) continue;
      double* v = m.params().get(i).value.data<double>();
      for (int64_t e = 0; e < p.numel(); ++e) v[e] = 0.1 * std::sin(double(p.global_flat(e) + 3 * p.global_index));
    }
    m.params().zero_grads();
    if (!defer_weights) {
      const auto ce = m.forward_backward(batch.view(), 0.5);
      results[size_t(r)] = {ce.loss_sum, ce.count, {}};
    } else {
      // The B/W split: every segment's input gradient first, weights after.
      std::vector<model::SegmentState> st(size_t(m.num_segments()));
      Tensor x;
      for (int s = 0; s < m.num_segments(); ++s)
        x = m.forward_segment(s, batch.view(), x, st[size_t(s)], model::ForwardMode{true, 0.5, false});
      results[size_t(r)] = {st.back().loss.loss_sum, st.back().loss.count, {}};
      for (int s = m.num_segments(); s-- > 0;) x = m.backward_segment_input(s, batch.view(), x, st[size_t(s)], true);
      for (int s = m.num_segments(); s-- > 0;) m.backward_segment_weight(s, st[size_t(s)]);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int i = 0; i < m.params().size(); ++i) {
      const model::ParamSpec& p = plan.spec().params[size_t(i)];
      const parallel::ParamLayout& l = plan.param(i);
      const bool sums = l.share_sums || l.reduce_axes.has(comm::Axis::Tp);
      const auto g = to_vector<double>(m.params().get(i).grad);
      for (int64_t e = 0; e < p.numel(); ++e) {
        const size_t at = size_t(base[size_t(p.global_index)] + p.global_flat(e));
        per_rank[size_t(r)][at] = g[size_t(e)];
        writers[size_t(r)][at] = 1;
        partial[at] = sums;
      }
    }
  });
  Result out = results[0];
  out.grads.assign(size_t(base.back()), 0.0);
  for (size_t at = 0; at < out.grads.size(); ++at) {
    bool first = true;
    for (int r = 0; r < t; ++r) {
      if (!writers[size_t(r)][at]) continue;
      if (partial[at]) {
        out.grads[at] += per_rank[size_t(r)][at];
      } else if (first) {
        out.grads[at] = per_rank[size_t(r)][at];
      } else {
        // Replicated and complete: every holder computed the same bits.
        EXPECT_EQ(per_rank[size_t(r)][at], out.grads[at]) << "element " << at << " on rank " << r;
      }
      first = false;
    }
    EXPECT_FALSE(first) << "element " << at << " held by no rank";
  }
  for (int r = 1; r < t; ++r) {
    EXPECT_EQ(results[size_t(r)].loss, out.loss) << "every tp rank reports the same loss sum";
    EXPECT_EQ(results[size_t(r)].count, out.count);
  }
  return out;
}

}  // namespace

TEST(TensorParallel, LossAndEveryGradientMatchOneRank) {
  for (bool gpt2 : {false, true}) {
    for (int kv : {4, 2, 1}) {  // MHA; GQA kv >= tp at tp 2 (< tp at 4); kv < tp
      const model::ModelConfig cfg = four_heads(kv, gpt2);
      const Result ref = run_tp(cfg, 1, false);
      ASSERT_EQ(ref.count, 10);
      for (int t : {2, 4}) {
        for (bool sp : {false, true}) {
          SCOPED_TRACE(::testing::Message() << (gpt2 ? "gpt2 tied" : "llama") << " kv=" << kv << " tp=" << t
                                            << " sp=" << sp);
          const Result got = run_tp(cfg, t, sp);
          EXPECT_EQ(got.count, ref.count);
          EXPECT_NEAR(got.loss, ref.loss, 1e-10 * std::abs(ref.loss));
          EXPECT_LT(rel_to_max(got.grads, ref.grads), 1e-10);
        }
      }
    }
  }
}

TEST(TensorParallel, SplitBackwardEqualsFusedUnderSequenceParallelism) {
  const model::ModelConfig cfg = four_heads(2, true);
  const Result fused = run_tp(cfg, 2, true), split = run_tp(cfg, 2, true, /*defer_weights=*/true);
  EXPECT_EQ(split.loss, fused.loss);
  EXPECT_EQ(split.grads, fused.grads);
}

TEST(TensorParallel, RecomputationReplaysTheRegionsBitwise) {
  // Backward replays each block's forward, collectives included, on every rank.
  for (bool sp : {false, true}) {
    const model::ModelConfig cfg = four_heads(1, false);
    const Result kept = run_tp(cfg, 2, sp), replayed = run_tp(cfg, 2, sp, false, /*recompute=*/true);
    EXPECT_EQ(replayed.loss, kept.loss);
    EXPECT_EQ(replayed.grads, kept.grads);
  }
}

TEST(TensorParallel, OneRankWithSequenceParallelismIsTheSerialModelBitwise) {
  const model::ModelConfig cfg = four_heads(2, false);
  const Result a = run_tp(cfg, 1, false), b = run_tp(cfg, 1, true);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grads, b.grads);
}

TEST(TensorParallel, VocabParallelCrossEntropyMatchesTheSerialKernel) {
  const int64_t V = 11, n = 10;
  std::vector<float> logits(size_t(n * V));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float((i * 37) % 23) * 0.3f - 3.0f;
  const auto& k = kernels::kernels_for(Device::Cpu);
  for (int t : {1, 2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << "tp=" << t);
    // Masked rows and the first and last id of every rank's slice.
    std::vector<int32_t> targets(size_t(n), -1);
    for (int r = 0; r < t; ++r) {
      const auto e = model::split_extent(V, 1, t, r, "vocab");
      targets[size_t(2 * r)] = int32_t(e.offset);
      targets[size_t(2 * r + 1)] = int32_t(e.offset + e.length - 1);
    }
    auto alloc = CachingAllocator::create();
    const Tensor full = tensor_from(logits, Shape{n, V}, alloc);
    Tensor ref_g = Tensor::empty(Shape{n, V}, DType::F32, alloc, MemCategory::Other);
    const auto ref = k.cross_entropy_backward(full, targets.data(), 0.125, ref_g);
    const auto ref_fwd = k.cross_entropy(full, targets.data());
    const auto ref_gv = to_vector<float>(ref_g);
    auto world = comm::ThreadWorld::create(t);
    run_ranks(t, [&](int r) {
      auto a = CachingAllocator::create();
      const auto e = model::split_extent(V, 1, t, r, "vocab");
      std::vector<float> mine(size_t(n * e.length));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < e.length; ++j) mine[size_t(i * e.length + j)] = logits[size_t(i * V + e.offset + j)];
      const model::TpRegions tp(t > 1 ? world->group(r).get() : nullptr, false, nullptr, 0);
      const model::VocabSlice slice{e.offset, e.length, V};
      const Tensor x = tensor_from(mine, Shape{n, e.length}, a);
      const auto fwd = model::vocab_parallel_cross_entropy(k, tp, x, targets.data(), slice, 0.0, Tensor(), a);
      const auto got = model::vocab_parallel_cross_entropy(k, tp, x, targets.data(), slice, 0.125, x, a);
      EXPECT_EQ(got.count, ref.count);
      EXPECT_EQ(fwd.count, ref.count);
      if (t == 1) {  // one rank: the serial kernel's bits
        EXPECT_EQ(got.loss_sum, ref.loss_sum);
        EXPECT_EQ(fwd.loss_sum, ref_fwd.loss_sum);
        EXPECT_EQ(to_vector<float>(x), ref_gv);
        return;
      }
      EXPECT_NEAR(got.loss_sum, ref.loss_sum, 1e-5 * std::abs(ref.loss_sum));
      EXPECT_NEAR(fwd.loss_sum, ref_fwd.loss_sum, 1e-5 * std::abs(ref.loss_sum));
      const auto g = to_vector<float>(x);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < e.length; ++j)
          ASSERT_NEAR(g[size_t(i * e.length + j)], ref_gv[size_t(i * V + e.offset + j)], 1e-7)
              << "row " << i << " id " << e.offset + j;
    });
  }
}
