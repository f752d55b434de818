#include "meshtrain/data/padding.h"

#include <algorithm>
#include <numeric>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"

namespace meshtrain::data {

void draw_bucket_pool(const TokenDataset& ds, DocumentSampler& sampler, int64_t seq_len, int64_t window_rows,
                      int64_t pool_windows, uint64_t seed, int64_t index, BucketPool* pool) {
  MT_REQUIRE(ConfigError, window_rows > 0 && pool_windows > 0, "bucket pool needs window_rows > 0 and pool > 0");
  pool->index = index;
  pool->start = sampler.state();
  pool->window_rows = window_rows;
  pool->emitted = 0;
  pool->docs.clear();
  const int64_t want = window_rows * pool_windows;
  while (int64_t(pool->docs.size()) < want) {
    const int64_t d = sampler.next();
    if (d < 0) break;
    if (ds.document_length(d) >= 2) pool->docs.push_back(d);
  }
  std::stable_sort(pool->docs.begin(), pool->docs.end(), [&](int64_t a, int64_t b) {
    return padded_row_length(ds.document_length(a), seq_len) < padded_row_length(ds.document_length(b), seq_len);
  });
  const int64_t k = pool->num_windows();
  pool->order.resize(size_t(k));
  std::iota(pool->order.begin(), pool->order.end(), 0);
  if (k > 1) {
    const CounterRng rng(seed);
    const uint64_t stream = stream_id("data.bucket") + uint64_t(index);
    std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) {
      const auto b = rng.bits(stream, uint64_t(i));
      keyed[size_t(i)] = {(uint64_t(b[0]) << 32) | b[1], i};
    }
    std::sort(keyed.begin(), keyed.end());
    for (int64_t i = 0; i < k; ++i) pool->order[size_t(i)] = keyed[size_t(i)].second;
  }
}

void plan_padded_window(const TokenDataset& ds, BucketPool& pool, int64_t seq_len, Window* window,
                        int64_t seq_multiple) {
  MT_CHECK(pool.has_next(), "bucket pool exhausted");
  const int64_t w = pool.order[size_t(pool.emitted++)];
  const int64_t begin = w * pool.window_rows;
  const int64_t end = std::min(begin + pool.window_rows, int64_t(pool.docs.size()));
  window->clear(0);
  int64_t l_max = 0;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t d = pool.docs[size_t(i)];
    const int64_t len = padded_row_length(ds.document_length(d), seq_len);
    window->begin_row();
    window->add_piece({d, 0, len});
    l_max = std::max(l_max, len);
  }
  l_max = (l_max + seq_multiple - 1) / seq_multiple * seq_multiple;
  window->set_seq(l_max);  // docs/math.md (M.2): l_max of the window (rounded up for sequence parallelism)
}

}  // namespace meshtrain::data
