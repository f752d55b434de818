// The attention and MLP layers on their own: output and input gradients
// against central differences (f64), and the residual add they fuse.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "meshtrain/core/rng.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/model/attention_layer.h"
#include "meshtrain/model/mlp_layer.h"
#include "meshtrain/model/model_config.h"
#include "meshtrain/model/param_spec.h"
#include "model/model_fixtures.h"
#include "support/numeric.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

Tensor wrap(std::vector<double>& v, int64_t n, int64_t d) { return Tensor::wrap(v.data(), Shape{n, d}, DType::F64); }
Tensor wrap(const std::vector<double>& v, int64_t n, int64_t d) {
  return wrap(const_cast<std::vector<double>&>(v), n, d);
}

// Checks dL/dxn of L = sum(w * f(xn)) for a layer f, with w fixed weights.
template <typename Fwd, typename Bwd>
void check_input_gradient(int64_t n, int64_t d, Fwd fwd, Bwd bwd) {
  CounterRng rng(3);
  std::vector<double> x(size_t(n * d)), w(size_t(n * d));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = rng.normal(1, i);
    w[i] = rng.normal(2, i);
  }
  auto loss = [&](const std::vector<double>& xv) {
    std::vector<double> y(size_t(n * d), 0.0);
    fwd(wrap(xv, n, d), wrap(y, n, d));
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += w[i] * y[i];
    return l;
  };
  std::vector<double> dx(size_t(n * d));
  bwd(wrap(x, n, d), wrap(w, n, d), wrap(dx, n, d));
  EXPECT_LT(max_rel_diff(dx, finite_difference(loss, x), 1e-3), 1e-6);
}

model::ModelConfig finalized(model::ModelConfig c) {
  c.finalize();
  return c;
}

// tiny_llama's first self-attention in f64, over tiny_batch().
struct TinyAttention {
  model::ModelConfig cfg = finalized(tiny_llama());
  std::shared_ptr<CachingAllocator> alloc = CachingAllocator::create();
  const kernels::KernelTable& k = kernels::kernels_for(Device::Cpu);
  model::ParameterStore ps{model::build_model_spec(cfg), PrecisionPolicy::uniform(DType::F64), alloc};
  kernels::RopeTable rope = kernels::make_rope_table(cfg.max_seq_len, cfg.head_dim, cfg.rope_theta);
  std::optional<model::SelfAttention> attn;
  OwnedBatch b = tiny_batch();
  model::TokenBatch tb = b.view();
  TinyAttention() {
    ps.initialize(cfg.seed);
    attn.emplace(cfg, ps, "model.layers.0.self_attn", &rope);
  }
};

}  // namespace

TEST(Layers, SelfAttentionInputGradientAndResidual) {
  TinyAttention t;
  const auto& cfg = t.cfg;
  const auto& k = t.k;
  const auto& alloc = t.alloc;
  const model::SelfAttention& attn = *t.attn;
  const model::TokenBatch& tb = t.tb;
  const int64_t n = tb.n(), d = cfg.d_model;
  check_input_gradient(
      n, d, [&](const Tensor& x, const Tensor& y) { attn.forward(k, x, tb, y, y, alloc); },
      [&](const Tensor& x, const Tensor& w, const Tensor& dx) {
        std::vector<double> y(size_t(n * d), 0.0);
        auto saved = attn.forward(k, x, tb, wrap(y, n, d), wrap(y, n, d), alloc);
        model::WeightGrads wg;
        attn.backward(k, x, saved, tb, w, false, dx, wg, alloc);
      });
  // forward ADDS into y (the residual stream) when its base is y, adds a
  // base held apart into a y it never reads (the fused residual: the same
  // values), and writes y without one: the same branch output each time.
  std::vector<double> x(size_t(n * d), 0.1), y0(size_t(n * d), 0.0), y1(size_t(n * d), 1.0), y2(size_t(n * d), 7.0),
      y3(size_t(n * d), std::nan("")), ones(size_t(n * d), 1.0);
  attn.forward(k, wrap(x, n, d), tb, wrap(y0, n, d), wrap(y0, n, d), alloc);
  attn.forward(k, wrap(x, n, d), tb, wrap(y1, n, d), wrap(y1, n, d), alloc);
  attn.forward(k, wrap(x, n, d), tb, wrap(y2, n, d), Tensor(), alloc);
  attn.forward(k, wrap(x, n, d), tb, wrap(y3, n, d), wrap(ones, n, d), alloc);
  for (size_t i = 0; i < y0.size(); ++i) {
    EXPECT_NEAR(y1[i] - y0[i], 1.0, 1e-12);
    EXPECT_NEAR(y2[i], y0[i], 1e-12);
    EXPECT_EQ(y3[i], y1[i]);
  }
}

TEST(Layers, MlpInputGradientSwiGluAndGelu) {
  for (auto c : {tiny_llama(), tiny_gpt2()}) {
    c.finalize();
    auto alloc = CachingAllocator::create();
    const auto& k = kernels::kernels_for(Device::Cpu);
    model::ParameterStore ps(model::build_model_spec(c), PrecisionPolicy::uniform(DType::F64), alloc);
    ps.initialize(c.seed);
    model::Mlp mlp(c, ps, "model.layers.1.mlp");
    const int64_t n = 5, d = c.d_model;
    check_input_gradient(
        n, d, [&](const Tensor& x, const Tensor& y) { mlp.forward(k, x, y, y, alloc); },
        [&](const Tensor& x, const Tensor& w, const Tensor& dx) {
          std::vector<double> y(size_t(n * d), 0.0);
          auto saved = mlp.forward(k, x, wrap(y, n, d), wrap(y, n, d), alloc);
          model::WeightGrads wg;
          mlp.backward(k, x, saved, w, false, dx, wg, alloc);
        });
  }
}

// tiny_llama's second MLP in f64 after a forward of x = 0.1: what the
// weight-gradient queue tests run backward through, dy given.
struct TinyMlp {
  model::ModelConfig c = finalized(tiny_llama());
  std::shared_ptr<CachingAllocator> alloc = CachingAllocator::create();
  const kernels::KernelTable& k = kernels::kernels_for(Device::Cpu);
  model::ParameterStore ps{model::build_model_spec(c), PrecisionPolicy::uniform(DType::F64), alloc};
  std::optional<model::Mlp> mlp;
  int64_t n = 5, d = c.d_model;
  std::vector<double> x = std::vector<double>(size_t(n * d), 0.1), y = std::vector<double>(size_t(n * d), 0.0);
  model::Mlp::Saved saved;
  TinyMlp() {
    ps.initialize(c.seed);
    ps.zero_grads();
    mlp.emplace(c, ps, "model.layers.1.mlp");
    saved = mlp->forward(k, wrap(x, n, d), wrap(y, n, d), Tensor(), alloc);
  }
  void backward(const std::vector<double>& dy, std::vector<double>& dx, model::WeightGrads& wg) {
    mlp->backward(k, wrap(x, n, d), saved, wrap(dy, n, d), false, wrap(dx, n, d), wg, alloc);
  }
};

TEST(Layers, DeferredWeightGradsRunCallsInTheirPlace) {
  // A call queued among deferred weight-gradient jobs (a gradient lane
  // switch, moe_layer.cc) runs in order when the jobs run, never before;
  // without deferral it runs at once.
  TinyMlp t;
  const auto& k = t.k;
  const Tensor& grad = t.ps.find("model.layers.1.mlp.gate_proj.weight").grad;
  std::vector<double> dy(size_t(t.n * t.d), 0.3), dx(size_t(t.n * t.d));
  std::vector<double> seen;
  model::WeightGrads wg(true, t.alloc);
  wg.call([&] { seen.push_back(k.sum_squares(grad)); });
  t.backward(dy, dx, wg);
  wg.call([&] { seen.push_back(k.sum_squares(grad)); });
  EXPECT_TRUE(seen.empty()) << "deferred calls wait for run()";
  wg.run(k);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], 0.0);
  EXPECT_GT(seen[1], 0.0);
  model::WeightGrads now;
  now.call([&] { seen.push_back(-1); });
  EXPECT_EQ(seen.size(), 3u);
}

TEST(Layers, HeldWeightGradsRunAtReleaseWithTheBitsOfImmediateOnes) {
  // A sublayer holds its weight gradients while its input gradient is
  // computed and runs them at release() (block.cc, docs/math.md (M.78)):
  // nothing is written before, the same bits after; the input gradient is
  // ready before any weight gradient. Holding is a no-op when deferred.
  TinyMlp t;
  std::vector<double> dy(size_t(t.n * t.d), 0.3);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] += 0.01 * double(i % 7);
  auto grads = [&] {
    std::vector<std::vector<double>> g;
    for (const char* name : {"model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
                             "model.layers.1.mlp.down_proj.weight"})
      g.push_back(to_vector<double>(t.ps.find(name).grad));
    return g;
  };
  auto backward = [&](model::WeightGrads& wg, std::vector<double>& dx, bool hold) {
    t.ps.zero_grads();
    if (hold) wg.hold();
    t.backward(dy, dx, wg);
  };
  std::vector<double> dx_now(dy.size()), dx_held(dy.size());
  model::WeightGrads now;
  backward(now, dx_now, false);
  const auto expected = grads();
  for (const auto& g : expected) EXPECT_GT(t.k.sum_squares(wrap(g, 1, int64_t(g.size()))), 0.0);
  model::WeightGrads held(false, t.alloc);
  backward(held, dx_held, true);
  EXPECT_EQ(dx_held, dx_now) << "the input gradient is complete before the weight gradients";
  EXPECT_FALSE(held.empty());
  for (const auto& g : grads())
    for (double v : g) ASSERT_EQ(v, 0.0) << "a held job ran before release()";
  held.release(t.k);
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(grads(), expected);
  // Deferred jobs stay queued past release(): backward_weight runs them.
  model::WeightGrads deferred(true, t.alloc);
  backward(deferred, dx_held, true);
  deferred.release(t.k);
  EXPECT_FALSE(deferred.empty());
  deferred.run(t.k);
  EXPECT_EQ(grads(), expected);
}

// Under sequence parallelism a sublayer's input arrives while it works on
// this rank's rows (block.cc, docs/math.md (M.81)): its own rows first,
// from `own`, then the arrival, then the others, each row once.
TEST(Layers, GatheredRowsGiveOwnRowsFirstAndTheRestAfterTheArrival) {
  const int64_t n = 8, d = 2;
  std::vector<double> all(size_t(n * d)), mine(size_t(2 * d));
  for (int64_t first : {0, 3, 6}) {
    SCOPED_TRACE(first);
    std::vector<std::pair<int64_t, int64_t>> blocks;  // (first row, rows), arrivals as (-1, 0)
    const model::GatheredRows rows(wrap(all, n, d), wrap(mine, 2, d), first, [&] { blocks.push_back({-1, 0}); });
    rows.for_row_blocks([&](const Tensor& x, int64_t r0) {
      if (r0 == first) EXPECT_EQ(x.raw(), mine.data()) << "own rows from the rank's own tensor";
      blocks.push_back({r0, x.dim(0)});
    });
    std::vector<std::pair<int64_t, int64_t>> expected{{first, 2}, {-1, 0}};
    if (first > 0) expected.push_back({0, first});
    if (first + 2 < n) expected.push_back({first + 2, n - first - 2});
    EXPECT_EQ(blocks, expected);
  }
}

// The layers read the rows of a GatheredRows only as it hands them out:
// with every row of `full` poisoned until the arrival, they compute what
// they compute from a tensor whose rows are all there.
TEST(Layers, SublayersReadGatheredRowsOnlyAfterTheyArrive) {
  TinyAttention t;
  model::Mlp mlp(t.cfg, t.ps, "model.layers.0.mlp");
  const model::TokenBatch& tb = t.tb;
  const int64_t n = tb.n(), d = t.cfg.d_model, first = n / 4, own_rows = n / 2;
  CounterRng rng(5);
  std::vector<double> x(size_t(n * d)), dy(size_t(n * d));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = rng.normal(1, i);
    dy[i] = rng.normal(2, i);
  }
  // x's rows as they arrive: own rows apart, every row of full NaN until then.
  std::vector<std::vector<double>> keep;
  auto arriving = [&](const std::vector<double>& v) {
    keep.push_back(std::vector<double>(size_t(n * d), std::nan("")));
    keep.push_back(std::vector<double>(v.begin() + first * d, v.begin() + (first + own_rows) * d));
    std::vector<double>* full = &keep[keep.size() - 2];
    return model::GatheredRows(wrap(*full, n, d), wrap(keep.back(), own_rows, d), first, [full, &v] { *full = v; });
  };
  auto run = [&](bool gathered, std::vector<double>& y, std::vector<double>& dx) {
    keep.clear();
    keep.reserve(8);
    y.assign(size_t(n * d), 0.0);
    dx.assign(size_t(n * d), 0.0);
    std::vector<double> dx2(size_t(n * d), 0.0);
    model::WeightGrads wg;
    auto input = [&](const std::vector<double>& v) { return gathered ? arriving(v) : model::GatheredRows(wrap(v, n, d)); };
    const auto sa = t.attn->forward(t.k, input(x), tb, wrap(y, n, d), wrap(y, n, d), t.alloc);
    t.attn->backward(t.k, wrap(x, n, d), sa, tb, input(dy), false, wrap(dx, n, d), wg, t.alloc);
    const auto sm = mlp.forward(t.k, input(x), wrap(y, n, d), wrap(y, n, d), t.alloc);
    mlp.backward(t.k, wrap(x, n, d), sm, input(dy), false, wrap(dx2, n, d), wg, t.alloc);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += dx2[i];
  };
  std::vector<double> y_all, dx_all, y_arriving, dx_arriving;
  run(false, y_all, dx_all);
  run(true, y_arriving, dx_arriving);
  EXPECT_EQ(y_arriving, y_all);
  EXPECT_EQ(dx_arriving, dx_all);
}

TEST(Layers, ModelConfigDerivesDefaults) {
  model::ModelConfig c;
  c.d_model = 96;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.finalize();
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.ffn_hidden, 256);  // 8/3 d rounded up to 64
  c.mlp = model::MlpKind::Gelu;
  c.ffn_hidden = 0;
  c.finalize();
  EXPECT_EQ(c.ffn_hidden, 384);  // 4 d
  EXPECT_NE(c.describe().find("d_model=96"), std::string::npos);
}
