#include "meshtrain/data/stats.h"

#include <algorithm>
#include <cmath>

namespace meshtrain::data {

double unigram_entropy(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (total == 0) return 0.0;
  double h = 0.0;
  for (int64_t c : counts)
    if (c > 0) {
      const double p = double(c) / double(total);
      h -= p * std::log(p);
    }
  return h;
}

TokenStats compute_token_stats(const TokenDataset& ds) {
  TokenStats s;
  s.documents = ds.num_documents();
  s.tokens = ds.num_tokens();
  s.counts.assign(size_t(ds.tokenizer().vocab_size()), 0);
  s.min_doc_length = s.documents > 0 ? INT64_MAX : 0;
  for (int64_t d = 0; d < s.documents; ++d) {
    const TokenSpan doc = ds.document(d);
    const int64_t n = doc.size();
    s.min_doc_length = std::min(s.min_doc_length, n);
    s.max_doc_length = std::max(s.max_doc_length, n);
    if (doc.dtype() == TokenDType::U16) {
      const auto v = doc.as_u16();
      for (int64_t i = 1; i < n; ++i) ++s.counts[v[size_t(i)]];
    } else {
      const auto v = doc.as_i32();
      for (int64_t i = 1; i < n; ++i) ++s.counts[size_t(v[size_t(i)])];
    }
    s.targets += std::max<int64_t>(n - 1, 0);
  }
  s.mean_doc_length = s.documents > 0 ? double(s.tokens) / double(s.documents) : 0.0;
  s.distinct_ids = std::count_if(s.counts.begin(), s.counts.end(), [](int64_t c) { return c > 0; });
  s.unigram_entropy_nats = unigram_entropy(s.counts);
  return s;
}

double unigram_entropy(const TokenDataset& ds) { return compute_token_stats(ds).unigram_entropy_nats; }

std::vector<std::pair<int32_t, int64_t>> TokenStats::top(int k) const {
  std::vector<std::pair<int32_t, int64_t>> v;
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) v.push_back({int32_t(i), counts[i]});
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (int64_t(v.size()) > k) v.resize(size_t(k));
  return v;
}

}  // namespace meshtrain::data
