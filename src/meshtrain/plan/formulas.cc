#include "meshtrain/plan/formulas.h"

#include <algorithm>
#include <cmath>

#include "meshtrain/core/error.h"

namespace meshtrain::plan {

StateBytes zero_state(double P, double G, double O, int R, int stage) {
  MT_REQUIRE(ConfigError, R >= 1, "sharding group of ", R, " ranks: needs at least one");
  MT_REQUIRE(ConfigError, stage >= 0 && stage <= 3, "zero stage ", stage, ": expected 0, 1, 2 or 3");
  StateBytes s{P, G, O};
  if (stage >= 1) s.optimizer = O / R;  // docs/math.md (M.26), stage 1
  if (stage >= 2) s.grads = G / R;      // (M.26), stage 2
  if (stage >= 3) s.params = P / R;     // (M.26), stage 3
  return s;                             // stage 0: (M.26)
}

BytesPerParam bytes_per_param(const std::string& precision) {
  if (precision == "fp32") return {4, 4, 8};
  if (precision == "bf16" || precision == "fp16-mixed" || precision == "fp16") return {2, 2, 12};
  MT_THROW(ConfigError, "--precision ", precision, ": expected fp32, bf16 or fp16-mixed");
}

double peak_bytes(const StateBytes& state, const PeakTerms& t) {
  return state.total() + t.activations + t.workspace + t.gathered + t.prefetch;
}

double recompute_memory(int64_t L, int64_t k, double A) {
  MT_REQUIRE(ConfigError, L >= 1 && k >= 1 && k <= L, "checkpoint interval k = ", k, " for L = ", L,
             " layers: needs 1 <= k <= L");
  return A * double((L + k - 1) / k + k);  // docs/math.md (M.30)
}

RecomputeChoice best_checkpoint_interval(int64_t L, double A) {
  MT_REQUIRE(ConfigError, L >= 1, "--recompute-layers ", L, ": needs at least one layer");
  MT_REQUIRE(ConfigError, A >= 0, "--activation-unit: a size cannot be negative");
  const int64_t root = int64_t(std::floor(std::sqrt(double(L))));
  RecomputeChoice best;
  best.bytes = -1;
  for (int64_t k = root - 1; k <= root + 2; ++k) {
    if (k < 1 || k > L) continue;
    const double m = recompute_memory(L, k, A);
    best.compared.push_back({k, m});
    if (best.bytes < 0 || m < best.bytes) best.k = k, best.bytes = m;
  }
  return best;
}

double pipeline_time(int p, int m, double f, double b) { return double(m + p - 1) * (f + b); }

double pipeline_utilization(int p, int m) {
  MT_REQUIRE(ConfigError, p >= 1 && m >= 1, "pipeline p = ", p, ", m = ", m, ": both must be >= 1");
  return double(m) / double(m + p - 1);  // docs/math.md (M.42)
}

double pipeline_bubble(int p, int m) { return 1.0 - pipeline_utilization(p, m); }

int64_t micro_batches_for_bubble(int p, double target) {
  MT_REQUIRE(ConfigError, p >= 1, "--pp ", p, ": needs at least one stage");
  MT_REQUIRE(ConfigError, target > 0 && target < 1, "--target-bubble ", target, ": expected a fraction in (0, 1)");
  if (p == 1) return 1;
  // (p - 1) / (m + p - 1) <= F  <=>  m >= (p - 1)(1 - F) / F
  int64_t m = std::max<int64_t>(1, int64_t(std::ceil(double(p - 1) * (1 - target) / target - 1e-9)));
  while (m > 1 && pipeline_bubble(p, int(m - 1)) <= target) --m;
  while (pipeline_bubble(p, int(m)) > target) ++m;
  return m;
}

double ring_rounds(comm::OpKind kind, int R) {
  if (R <= 1) return 0;
  switch (kind) {
    case comm::OpKind::AllReduce: return 2.0 * (R - 1);
    case comm::OpKind::Send:
    case comm::OpKind::Recv: return 1;
    case comm::OpKind::Broadcast: return std::ceil(std::log2(double(R)));
    default: return double(R - 1);
  }
}

double ring_wire_bytes(comm::OpKind kind, int R, double M) {
  if (R <= 1) return 0;
  switch (kind) {
    case comm::OpKind::AllReduce: return 2.0 * (R - 1) / R * M;
    case comm::OpKind::Send:
    case comm::OpKind::Recv:
    case comm::OpKind::Broadcast: return M;
    default: return double(R - 1) / R * M;
  }
}

double ring_time(comm::OpKind kind, int R, double M, double alpha_s, double beta_s_per_byte) {
  return ring_rounds(kind, R) * alpha_s + ring_wire_bytes(kind, R, M) * beta_s_per_byte;  // docs/math.md (M.20)
}

Scaling scaling_efficiency(double t0, int64_t D0, double t1, int64_t D1) {
  MT_REQUIRE(ConfigError, t0 > 0 && t1 > 0, "--scaling: times must be positive (got ", t0, " and ", t1, ")");
  MT_REQUIRE(ConfigError, D0 >= 1 && D1 >= 1, "--scaling: device counts must be >= 1 (got ", D0, " and ", D1, ")");
  Scaling s;
  s.speedup = t0 / t1;
  s.efficiency = s.speedup / (double(D1) / double(D0));  // docs/math.md (M.68)
  return s;
}

double megatron_flops(double B, double s, double l, double h, double V, bool recompute) {
  if (recompute) return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return 72.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

}  // namespace meshtrain::plan
