#include "meshtrain/kernels/cpu/embedding.h"

#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "meshtrain/core/error.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

TEST(Embedding, ForwardCopiesRows) {
  const int64_t vocab = 5, dim = 3;
  auto table = random_vec(vocab * dim, 1);
  std::vector<int32_t> ids = {4, 0, 4, 2};
  std::vector<double> out(ids.size() * dim);
  embedding_forward(ids.data(), 4, table.data(), vocab, dim, out.data());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(out[i * dim + j], table[ids[i] * dim + j]);
}

TEST(Embedding, BackwardAccumulatesRepeatedIds) {
  const int64_t vocab = 4, dim = 2;
  std::vector<int32_t> ids = {1, 3, 1};
  std::vector<double> dout = {1, 2, 3, 4, 5, 6};
  std::vector<double> dtable(vocab * dim, 10.0);
  embedding_backward(ids.data(), 3, dout.data(), vocab, dim, dtable.data());
  EXPECT_EQ(dtable, (std::vector<double>{10, 10, 16, 18, 10, 10, 13, 14}));
}

TEST(Embedding, BackwardDeterministicAcrossThreadCounts) {
  const int64_t vocab = 50, dim = 96, n = 4000;  // n * dim above the parallel threshold
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = int32_t((i * 7919) % vocab);
  auto dout = random_vec<float>(n * dim, 2);
  auto run = [&](int threads) {
    std::vector<float> dt(vocab * dim, 0.5f);
    test::with_threads(threads, [&] {
      embedding_backward(ids.data(), n, dout.data(), vocab, dim, dt.data());
      return 0;
    });
    return dt;
  };
  auto one = run(1), two = run(2);
  EXPECT_EQ(one, two);
  // And equal to the serial token-order sum.
  std::vector<float> want(vocab * dim, 0.5f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) want[ids[i] * dim + j] += dout[i * dim + j];
  EXPECT_EQ(one, want);
}

TEST(Embedding, BadIdsThrowDataErrorNamingPosition) {
  std::vector<float> table(6), out(6), dtable(6);
  std::vector<int32_t> ids = {0, 3};
  try {
    embedding_forward(ids.data(), 2, table.data(), 3, 2, out.data());
    FAIL() << "no throw";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3"), std::string::npos) << e.what();
  }
  ids = {-1, 0};
  EXPECT_THROW(embedding_forward(ids.data(), 2, table.data(), 3, 2, out.data()), DataError);
  EXPECT_THROW(embedding_backward(ids.data(), 2, out.data(), 3, 2, dtable.data()), DataError);
}

}  // namespace
}  // namespace meshtrain::kernels
