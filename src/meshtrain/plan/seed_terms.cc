#include "meshtrain/plan/seed_terms.h"

#include <cstdio>
#include <sstream>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/byte_size.h"
#include "meshtrain/plan/formulas.h"

namespace meshtrain::plan {

namespace {

std::string pct(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * f);
  return buf;
}

void state_memory(std::ostringstream& os, const SeedTerms& t) {
  MT_REQUIRE(ConfigError, *t.params > 0, "--params ", *t.params, ": needs at least one parameter");
  const BytesPerParam b = bytes_per_param(t.precision);
  // Tensor and pipeline parallelism split the parameters before ZeRO shards them over dp.
  const double N = *t.params / double(t.tp * t.pp);
  const double P = N * b.params, G = N * b.grads, O = N * b.optimizer;
  os << "state memory per rank, docs/math.md (M.26): N = " << *t.params << " parameters";
  if (t.tp * t.pp > 1) os << " (" << N << " per rank after tp = " << t.tp << " x pp = " << t.pp << ")";
  os << ", " << t.precision << ": " << b.params << " + " << b.grads << " + " << b.optimizer
     << " bytes per parameter; P = " << gib(P) << ", G = " << gib(G) << ", O = " << gib(O) << ", R = " << t.dp << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-7s %-16s %12s %12s %12s %12s\n", "stage", "formula", "params", "grads",
                "optimizer", "total");
  os << line;
  const char* formula[] = {"P + G + O", "P + G + O/R", "P + (G + O)/R", "(P + G + O)/R"};
  for (int s = 0; s <= 3; ++s) {
    const StateBytes st = zero_state(P, G, O, t.dp, s);
    std::snprintf(line, sizeof line, "  %s%-6d %-16s %12s %12s %12s %12s\n", s == t.zero_stage ? "*" : " ", s,
                  formula[s], gib(st.params).c_str(), gib(st.grads).c_str(), gib(st.optimizer).c_str(),
                  gib(st.total()).c_str());
    os << line;
  }
  const StateBytes st = zero_state(P, G, O, t.dp, t.zero_stage);
  PeakTerms terms{t.activations, t.workspace, t.gathered, t.prefetch};
  const double peak = peak_bytes(st, terms);
  os << "peak at stage " << t.zero_stage << ", docs/math.md (M.28): " << gib(st.total()) << " state + "
     << gib(t.activations) << " activations + " << gib(t.workspace) << " workspace";
  if (t.gathered > 0 || t.prefetch > 0) os << " + " << gib(t.gathered) << " gathered + " << gib(t.prefetch) << " prefetched";
  os << " = " << gib(peak) << "\n";
  if (t.device_memory)
    os << "device memory " << gib(*t.device_memory) << ": " << (peak <= *t.device_memory ? "fits" : "does NOT fit")
       << " (" << (peak <= *t.device_memory ? "headroom " + gib(*t.device_memory - peak)
                                            : "short by " + gib(peak - *t.device_memory))
       << ")\n";
}

void recompute(std::ostringstream& os, const SeedTerms& t) {
  MT_REQUIRE(ConfigError, t.activation_unit.has_value(), "--recompute-layers needs --activation-unit BYTES");
  const RecomputeChoice c = best_checkpoint_interval(*t.recompute_layers, *t.activation_unit);
  os << "recomputation, docs/math.md (M.30): M(k) = A (ceil(L/k) + k), L = " << *t.recompute_layers
     << ", A = " << gib(*t.activation_unit) << "\n";
  for (const auto& cand : c.compared)
    os << "  " << (cand.k == c.k ? "*" : " ") << " k = " << cand.k << ": " << gib(cand.bytes) << "\n";
  os << "  best k = " << c.k << ": " << gib(c.bytes) << " (storing every layer: "
     << gib(*t.activation_unit * double(*t.recompute_layers)) << ")\n";
}

void bubble(std::ostringstream& os, const SeedTerms& t) {
  MT_REQUIRE(ConfigError, t.target_bubble.has_value(), "--pp needs --target-bubble F (a fraction, e.g. 0.1)");
  const int p = *t.pipeline_stages;
  const int64_t m = micro_batches_for_bubble(p, *t.target_bubble);
  os << "pipeline, docs/math.md (M.42)-(M.43): p = " << p << ", bubble (p-1)/(m+p-1) <= " << pct(*t.target_bubble)
     << ": smallest m = " << m << " (bubble " << pct(pipeline_bubble(p, int(m))) << ", utilization "
     << pct(pipeline_utilization(p, int(m))) << ")";
  if (m > 1) os << "; m = " << m - 1 << " gives " << pct(pipeline_bubble(p, int(m - 1)));
  os << "\n";
}

void scaling(std::ostringstream& os, const std::string& text) {
  std::vector<double> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    MT_REQUIRE(ConfigError, end != item.c_str() && *end == '\0', "--scaling ", text, ": '", item,
               "' is not a number (expected t0,D0,t1,D1)");
    v.push_back(x);
  }
  MT_REQUIRE(ConfigError, v.size() == 4, "--scaling ", text, ": expected four values t0,D0,t1,D1");
  MT_REQUIRE(ConfigError, v[1] == double(int64_t(v[1])) && v[3] == double(int64_t(v[3])), "--scaling ", text,
             ": device counts D0 and D1 must be whole numbers");
  const Scaling s = scaling_efficiency(v[0], int64_t(v[1]), v[2], int64_t(v[3]));
  os << "strong scaling, docs/math.md (M.68): " << v[1] << " devices " << v[0] << " -> " << v[3] << " devices "
     << v[2] << ": speedup " << s.speedup << ", efficiency E = (t0/t1)/(D1/D0) = " << pct(s.efficiency) << "\n";
}

}  // namespace

std::string seed_terms_report(const SeedTerms& t) {
  std::ostringstream os;
  bool any = false;
  if (t.params) state_memory(os, t), any = true;
  if (t.recompute_layers) recompute(os, t), any = true;
  if (t.pipeline_stages) bubble(os, t), any = true;
  if (t.scaling) scaling(os, *t.scaling), any = true;
  MT_REQUIRE(ConfigError, any,
             "meshtrain plan without a config needs --params N, --recompute-layers L, --pp p or --scaling "
             "t0,D0,t1,D1");
  return os.str();
}

}  // namespace meshtrain::plan
