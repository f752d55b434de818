// Tensor-parallel regions: the worked example of docs/math.md, "Tensor and
// sequence parallelism", at tp = 2 through a column-parallel and a row-parallel
// Linear, with every weight shard's gradient checked against the slice of the
// single-device run's gradient; and the sequence-parallel pairs (all-gather /
// reduce-scatter and the reverse) placing rows where the stream expects them.
#include "meshtrain/model/regions.h"

#include <gtest/gtest.h>

#include "meshtrain/comm/thread_world.h"
#include "meshtrain/model/layers.h"
#include "support/run_ranks.h"

using namespace meshtrain;
using namespace meshtrain::testing;

namespace {

struct OwnedParam {
  model::Parameter p;
  OwnedParam(const std::vector<double>& values, const Shape& shape, const std::shared_ptr<CachingAllocator>& alloc) {
    p.value = tensor_from(values, shape, alloc);
    p.grad = Tensor::zeros(shape, DType::F64, alloc, MemCategory::Grads);
  }
};

model::Linear linear_of(model::Parameter& w) { return {&w, nullptr, w.value.dim(1), w.value.dim(0)}; }

std::vector<double> relu(std::vector<double> v) {
  for (double& x : v) x = x > 0 ? x : 0;
  return v;
}

// What one rank (or the single device) computes of  y = relu(x W) V.
struct MlpRun {
  std::vector<double> hidden, partial, out, dx_partial, dx, dW, dV;
};

// Column weight (Linear layout [hidden, in] = W^T) and row weight ([out,
// hidden] = V^T) of this rank; tp regions around them as the block uses them.
MlpRun run_mlp(const std::vector<double>& wt, int64_t hidden, const std::vector<double>& vt,
               const model::TpRegions& tp, const std::shared_ptr<CachingAllocator>& alloc) {
  const auto& k = kernels::kernels_for(Device::Cpu);
  OwnedParam w(wt, Shape{hidden, 2}, alloc), v(vt, Shape{1, hidden}, alloc);
  const model::Linear col = linear_of(w.p), row = linear_of(v.p);
  MlpRun r;
  const Tensor x = tensor_from(std::vector<double>{1, 2}, Shape{1, 2}, alloc);
  const Tensor xin = tp.column_input(x, 1, alloc, MemCategory::Activations);  // copy-to-group: identity
  Tensor h = Tensor::empty(Shape{1, hidden}, DType::F64, alloc, MemCategory::Activations);
  col.forward(k, xin, h);
  r.hidden = relu(to_vector<double>(h));
  const Tensor a = tensor_from(r.hidden, Shape{1, hidden}, alloc);
  Tensor y = Tensor::empty(Shape{1, 1}, DType::F64, alloc, MemCategory::Activations);
  row.forward(k, a, y);
  r.partial = to_vector<double>(y);
  r.out = to_vector<double>(tp.row_output(y, alloc));  // reduce-from-group: the partial sums meet
  // Backward with upstream gradient 1.
  const Tensor dout = tensor_from(std::vector<double>{1}, Shape{1, 1}, alloc);
  const Tensor dy = tp.row_output_grad(dout, 1, alloc, MemCategory::Workspace);  // identity
  Tensor da = Tensor::empty(Shape{1, hidden}, DType::F64, alloc, MemCategory::Workspace);
  row.backward_input(k, dy, da, false);
  row.backward_weight(k, a, dy);
  std::vector<double> dh = to_vector<double>(da);
  for (size_t i = 0; i < dh.size(); ++i) dh[i] = r.hidden[i] > 0 ? dh[i] : 0;  // relu'
  const Tensor dhid = tensor_from(dh, Shape{1, hidden}, alloc);
  Tensor dx = Tensor::empty(Shape{1, 2}, DType::F64, alloc, MemCategory::Workspace);
  col.backward_input(k, dhid, dx, false);
  col.backward_weight(k, xin, dhid);
  r.dx_partial = to_vector<double>(dx);
  r.dx = to_vector<double>(tp.column_input_grad(dx, alloc));  // copy-to-group backward: sum
  r.dW = to_vector<double>(w.p.grad);
  r.dV = to_vector<double>(v.p.grad);
  return r;
}

}  // namespace

TEST(Regions, SpecWorkedExampleAtTwoRanks) {
  // docs/math.md's worked example: X = (1, 2); W_1 = [[1,0],[0,1]], W_2 =
  // [[1,-1],[1,1]] (columns of W); V_1 = [[1],[2]], V_2 = [[-1],[1]] (rows of V); ReLU.
  // Linear stores [out, in], i.e. the transposes.
  const std::vector<double> w1t = {1, 0, 0, 1}, w2t = {1, 1, -1, 1};
  const std::vector<double> v1t = {1, 2}, v2t = {-1, 1};
  auto alloc = CachingAllocator::create();
  std::vector<double> wt = w1t, vt = {1, 2, -1, 1};
  wt.insert(wt.end(), w2t.begin(), w2t.end());
  const MlpRun single = run_mlp(wt, 4, vt, model::TpRegions(), alloc);
  EXPECT_EQ(single.hidden, (std::vector<double>{1, 2, 3, 1}));
  EXPECT_EQ(single.out, std::vector<double>{3});
  EXPECT_EQ(single.dx, (std::vector<double>{-1, 2}));

  auto world = comm::ThreadWorld::create(2);
  model::TpCommStats stats[2] = {model::TpCommStats(1), model::TpCommStats(1)};
  MlpRun got[2];
  run_ranks(2, [&](int r) {
    auto a = CachingAllocator::create();
    const model::TpRegions tp(world->group(r).get(), false, &stats[r], 0);
    got[r] = run_mlp(r == 0 ? w1t : w2t, 2, r == 0 ? v1t : v2t, tp, a);
  });
  EXPECT_EQ(got[0].hidden, (std::vector<double>{1, 2}));
  EXPECT_EQ(got[1].hidden, (std::vector<double>{3, 1}));
  EXPECT_EQ(got[0].partial, std::vector<double>{5});
  EXPECT_EQ(got[1].partial, std::vector<double>{-2});
  EXPECT_EQ(got[0].dx_partial, (std::vector<double>{1, 2}));
  EXPECT_EQ(got[1].dx_partial, (std::vector<double>{-2, 0}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].out, std::vector<double>{3}) << "rank " << r;
    EXPECT_EQ(got[r].dx, (std::vector<double>{-1, 2})) << "rank " << r;
    // Each shard's weight gradient is its slice of the single device's:
    // rows [2r, 2r + 2) of dW^T (column-parallel), columns of dV^T (row-parallel).
    EXPECT_EQ(got[r].dW, std::vector<double>(single.dW.begin() + 4 * r, single.dW.begin() + 4 * r + 4)) << r;
    EXPECT_EQ(got[r].dV, std::vector<double>(single.dV.begin() + 2 * r, single.dV.begin() + 2 * r + 2)) << r;
    // One all-reduce forward (the output), one backward (the input gradient).
    EXPECT_EQ(stats[r].at(0, model::TpCollective::AllReduce).calls, 2);
    EXPECT_EQ(stats[r].at(0, model::TpCollective::AllReduce).message_bytes, 8 + 16);
    EXPECT_EQ(stats[r].at(0, model::TpCollective::AllReduce).ring_bytes, (8 + 16) * 2 * 1 / 2);
  }
}

TEST(Regions, SequenceParallelPairsPlaceRowsAndSumPartials) {
  // n = 6 tokens of d = 2 over t = 3 ranks: rank r holds rows [2r, 2r + 2).
  const int t = 3;
  const int64_t n = 6, d = 2;
  auto world = comm::ThreadWorld::create(t);
  run_ranks(t, [&](int r) {
    auto alloc = CachingAllocator::create();
    model::TpCommStats stats(1);
    const model::TpRegions tp(world->group(r).get(), true, &stats, 0);
    ASSERT_EQ(tp.local_rows(n), 2);
    ASSERT_EQ(tp.first_row(n), 2 * r);
    EXPECT_THROW(tp.local_rows(7), ConfigError);
    // Forward of gather-from-sequence: every rank sees all rows in order.
    std::vector<double> mine;
    for (int64_t i = 0; i < 2 * d; ++i) mine.push_back(double(2 * r * d + i));
    const Tensor x = tensor_from(mine, Shape{2, d}, alloc);
    const auto full = to_vector<double>(tp.column_input(x, n, alloc, MemCategory::Activations));
    for (int64_t i = 0; i < n * d; ++i) EXPECT_EQ(full[size_t(i)], double(i));
    // Its backward (reduce-scatter): rank r gets the sum over ranks of its rows.
    std::vector<double> partial(size_t(n * d));
    for (int64_t i = 0; i < n * d; ++i) partial[size_t(i)] = double(i) * (r + 1);
    const auto dx = to_vector<double>(tp.column_input_grad(tensor_from(partial, Shape{n, d}, alloc), alloc));
    ASSERT_EQ(dx.size(), size_t(2 * d));
    for (int64_t i = 0; i < 2 * d; ++i) EXPECT_EQ(dx[size_t(i)], double(2 * r * d + i) * (1 + 2 + 3));
    // The reverse pair: a row-parallel output is reduce-scattered to the
    // rank's rows, and its backward all-gathers the rows' gradients.
    const auto y = to_vector<double>(tp.row_output(tensor_from(partial, Shape{n, d}, alloc), alloc));
    EXPECT_EQ(y, dx);
    const auto dy = to_vector<double>(tp.row_output_grad(x, n, alloc, MemCategory::Workspace));
    EXPECT_EQ(dy, full);
    // Two all-gathers and two reduce-scatters of n x d doubles, (t-1)/t each on a ring.
    for (auto c : {model::TpCollective::AllGather, model::TpCollective::ReduceScatter}) {
      EXPECT_EQ(stats.at(0, c).calls, 2);
      EXPECT_EQ(stats.at(0, c).message_bytes, 2 * n * d * 8);
      EXPECT_EQ(stats.at(0, c).ring_bytes, 2 * n * d * 8 * (t - 1) / t);
    }
    EXPECT_EQ(stats.at(0, model::TpCollective::AllReduce).calls, 0);
  });
}

TEST(Regions, OneRankIsTheIdentity) {
  auto alloc = CachingAllocator::create();
  model::TpCommStats stats(1);
  for (bool sp : {false, true}) {
    const model::TpRegions tp(nullptr, sp, &stats, 0);
    const Tensor x = tensor_from(std::vector<double>{1, 2, 3, 4}, Shape{2, 2}, alloc);
    EXPECT_TRUE(tp.column_input(x, 2, alloc, MemCategory::Activations).shares_storage(x));
    EXPECT_TRUE(tp.column_input_grad(x, alloc).shares_storage(x));
    EXPECT_TRUE(tp.row_output(x, alloc).shares_storage(x));
    EXPECT_TRUE(tp.row_output_grad(x, 2, alloc, MemCategory::Workspace).shares_storage(x));
    EXPECT_EQ(to_vector<double>(x), (std::vector<double>{1, 2, 3, 4}));
    EXPECT_EQ(tp.local_rows(5), 5);
  }
  EXPECT_EQ(stats.total().calls, 0);
}
