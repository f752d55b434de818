// Token statistics of a split: counts, document lengths, a histogram, and the
// unigram entropy of the targets — the loss (nats/token) a model that ignores
// context would reach, printed as a baseline next to the validation loss.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "meshtrain/data/dataset.h"

namespace meshtrain::data {

struct TokenStats {
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t targets = 0;  // tokens that are predicted: all but each document's first (BOS)
  int64_t min_doc_length = 0, max_doc_length = 0;
  double mean_doc_length = 0;
  std::vector<int64_t> counts;  // per id over the targets, size vocab
  int64_t distinct_ids = 0;     // ids with count > 0
  double unigram_entropy_nats = 0;

  // The k most frequent ids (count descending, id ascending on ties).
  std::vector<std::pair<int32_t, int64_t>> top(int k) const;
};

TokenStats compute_token_stats(const TokenDataset& ds);

// H = -sum_v p_v ln p_v over the target-token distribution (every token but
// each document's first, i.e. exactly what the loader supervises). 0 for an
// empty split.
double unigram_entropy(const TokenDataset& ds);
double unigram_entropy(const std::vector<int64_t>& counts);

}  // namespace meshtrain::data
