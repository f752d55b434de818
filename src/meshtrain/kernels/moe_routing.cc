#include "meshtrain/kernels/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "meshtrain/core/error.h"

namespace meshtrain::kernels {

int64_t expert_rows_bucket(int64_t count) {
  if (count <= 0) return 0;
  int64_t octave = 1;
  while (octave * 2 <= count) octave *= 2;
  const int64_t step = std::max<int64_t>(8, octave / 4);
  return (count + step - 1) / step * step;
}

namespace {

void softmax_rows(const double* logits, int64_t n, int64_t E, std::vector<double>& probs) {
  probs.resize(size_t(n * E));
  for (int64_t t = 0; t < n; ++t) {
    const double* l = logits + t * E;
    double* p = probs.data() + t * E;
    const double m = *std::max_element(l, l + E);
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += p[e] = std::exp(l[e] - m);
    for (int64_t e = 0; e < E; ++e) p[e] /= s;
  }
}

// The k experts of one token: probability descending, ties by index.
void top_k(const double* p, int64_t E, int64_t k, std::vector<int32_t>& order, int32_t* out) {
  order.resize(size_t(E));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::copy(order.begin(), order.begin() + k, out);
}

}  // namespace

double top_k_sum(const MoeRouting& r, int64_t t) {
  double sum = 0;
  for (int64_t j = 0; j < r.top_k; ++j) sum += r.probs[size_t(t * r.experts + r.slot_expert[size_t(t * r.top_k + j)])];
  return sum;
}

MoeRouting route_tokens(const MoeRoutingConfig& cfg, const double* logits, int64_t n) {
  const int64_t E = cfg.experts, k = cfg.top_k, seq = cfg.seq;
  MT_CHECK(seq > 0 && n % seq == 0, "MoE routing: ", n, " tokens are not whole rows of ", seq);
  MoeRouting r;
  r.n = n;
  r.seq = seq;
  r.experts = E;
  r.top_k = k;
  softmax_rows(logits, n, E, r.probs);
  r.slot_expert.resize(size_t(n * k));
  r.slot_kept.assign(size_t(n * k), 1);
  std::vector<int32_t> order;
  for (int64_t t = 0; t < n; ++t) top_k(r.probs.data() + t * E, E, k, order, r.slot_expert.data() + t * k);

  const int64_t rows = n / seq;
  r.capacity = cfg.capacity_factor > 0 ? int64_t(std::ceil(cfg.capacity_factor * double(seq * k) / double(E))) : 0;
  r.row_fraction.assign(size_t(rows * E), 0.0);
  r.assigned = n * k;
  std::vector<std::vector<int64_t>> wanting(static_cast<size_t>(E));  // slot indices (t * k + j) per expert, one row
  for (int64_t row = 0; row < rows; ++row) {
    for (auto& w : wanting) w.clear();
    for (int64_t t = row * seq; t < (row + 1) * seq; ++t)
      for (int64_t j = 0; j < k; ++j) wanting[size_t(r.slot_expert[size_t(t * k + j)])].push_back(t * k + j);
    double aux = 0;
    for (int64_t e = 0; e < E; ++e) {
      auto& w = wanting[size_t(e)];
      const double f = double(w.size()) / double(seq * k);
      r.row_fraction[size_t(row * E + e)] = f;
      double psum = 0;
      for (int64_t t = row * seq; t < (row + 1) * seq; ++t) psum += r.probs[size_t(t * E + e)];
      aux += f * psum;
      if (r.capacity == 0 || int64_t(w.size()) <= r.capacity) continue;
      // Keep the C most probable; equal probabilities: the earlier token.
      std::stable_sort(w.begin(), w.end(), [&](int64_t a, int64_t b) {
        return r.probs[size_t(a / k * E + e)] > r.probs[size_t(b / k * E + e)];
      });
      for (size_t i = size_t(r.capacity); i < w.size(); ++i) r.slot_kept[size_t(w[i])] = 0;
      r.dropped += int64_t(w.size()) - r.capacity;
    }
    r.aux_sum += cfg.aux_coeff * double(E) * aux;
  }

  // Expert-major buffer: each expert's kept tokens in token order, padded blocks.
  r.count.assign(size_t(E), 0);
  for (int64_t s = 0; s < n * k; ++s)
    if (r.slot_kept[size_t(s)]) ++r.count[size_t(r.slot_expert[size_t(s)])];
  r.begin.assign(size_t(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) r.begin[size_t(e + 1)] = r.begin[size_t(e)] + expert_rows_bucket(r.count[size_t(e)]);
  std::vector<int64_t> next(r.begin.begin(), r.begin.end() - 1);
  std::vector<int32_t> row_of_slot(size_t(n * k), -1);
  r.rows_of_expert.assign(size_t(r.begin[size_t(E)]), 0);
  for (int64_t s = 0; s < n * k; ++s) {  // token order
    if (!r.slot_kept[size_t(s)]) continue;
    const int64_t e = r.slot_expert[size_t(s)];
    row_of_slot[size_t(s)] = int32_t(next[size_t(e)]);
    r.rows_of_expert[size_t(next[size_t(e)]++)] = int32_t(s / k);
  }
  for (int64_t s = 0; s < n * k; ++s) {
    if (!r.slot_kept[size_t(s)]) continue;
    const int64_t t = s / k;
    r.comb_token.push_back(int32_t(t));
    r.comb_row.push_back(row_of_slot[size_t(s)]);
    const double p = r.probs[size_t(t * E + r.slot_expert[size_t(s)])];
    r.comb_gate.push_back(cfg.renormalize ? p / top_k_sum(r, t) : p);
  }
  return r;
}

MoeRouting balanced_routing(const MoeRoutingConfig& cfg, int64_t n) {
  const int64_t E = cfg.experts;
  std::vector<double> logits(size_t(n * E));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e) logits[size_t(t * E + e)] = -double(((e - t * cfg.top_k) % E + E) % E);
  return route_tokens(cfg, logits.data(), n);
}

std::vector<double> router_logit_grads(const MoeRouting& r, const MoeRoutingConfig& cfg, const double* dgate,
                                       double aux_scale) {
  const int64_t E = r.experts, k = r.top_k, n = r.n, seq = cfg.seq;
  std::vector<double> dp(size_t(n * E), 0.0);
  const double aux = aux_scale * cfg.aux_coeff * double(E);
  if (aux != 0)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < E; ++e) dp[size_t(t * E + e)] = aux * r.row_fraction[size_t(t / seq * E + e)];
  std::vector<double> dslot(size_t(n * k), 0.0);  // d loss / d gate per slot; dropped slots 0
  size_t c = 0;  // comb order is the kept slots in (token, slot) order
  for (int64_t s = 0; s < n * k; ++s)
    if (r.slot_kept[size_t(s)]) dslot[size_t(s)] = dgate[c++];
  for (int64_t t = 0; t < n; ++t) {
    const double* ds = dslot.data() + t * k;
    const int32_t* ex = r.slot_expert.data() + t * k;
    if (!cfg.renormalize) {
      for (int64_t j = 0; j < k; ++j) dp[size_t(t * E + ex[j])] += ds[j];
      continue;
    }
    // g_j = p_j / S, S the top-k sum: d/dp_i = (dg_i - sum_j dg_j g_j) / S.
    const double S = top_k_sum(r, t);
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += ds[j] * r.probs[size_t(t * E + ex[j])] / S;
    for (int64_t j = 0; j < k; ++j) dp[size_t(t * E + ex[j])] += (ds[j] - dot) / S;
  }
  std::vector<double> dl(size_t(n * E));
  for (int64_t t = 0; t < n; ++t) {
    const double* p = r.probs.data() + t * E;
    const double* g = dp.data() + t * E;
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += p[e] * g[e];
    for (int64_t e = 0; e < E; ++e) dl[size_t(t * E + e)] = p[e] * (g[e] - dot);
  }
  return dl;
}

}  // namespace meshtrain::kernels
