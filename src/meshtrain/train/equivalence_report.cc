// The equivalence harness's comparison (equivalence.h): every parameter
// tensor on its own, for the gradients, the update deltas and the
// parameters, with the worst tensor named (docs/reproducibility.md,
// "Equivalence checks").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/train/equivalence.h"

namespace meshtrain::train {

std::vector<GlobalTensor> global_tensors(const model::ModelConfig& cfg) {
  model::ModelConfig c = cfg;
  c.finalize();  // derived sizes (head_dim, ffn_hidden) filled in
  std::vector<GlobalTensor> out;
  int64_t at = 0;
  for (const model::ParamSpec& p : model::build_model_spec(c).params) {  // gather_global_values' order
    out.push_back({p.name, at, at + p.numel()});
    at += p.numel();
  }
  return out;
}

namespace {

double largest_magnitude(const std::vector<double>& v, int64_t begin, int64_t end) {
  double m = 0;
  for (int64_t i = begin; i < end; ++i) m = std::max(m, std::abs(v[size_t(i)]));
  return m;
}

// The noise floor of a vector: `fraction` x its largest magnitude (the
// smallest double above zero for a zero vector, so that 0 / floor is 0).
double noise_floor(const std::vector<double>& v, double fraction) {
  return std::max(fraction * largest_magnitude(v, 0, int64_t(v.size())), std::numeric_limits<double>::min());
}

}  // namespace

double noise_floor_fraction(const std::string& precision) {
  return precision == "fp64" || precision == "fp32" ? 1e-6 : 1e-5;
}

TensorDiff per_tensor_diff(const std::vector<double>& a, const std::vector<double>& ref,
                           const std::vector<GlobalTensor>& tensors, double floor_fraction,
                           const std::vector<bool>& skip) {
  MT_CHECK(a.size() == ref.size() && (tensors.empty() || size_t(tensors.back().end) == ref.size()),
           "per_tensor_diff: ", a.size(), " vs ", ref.size(), " values for tensors of ",
           tensors.empty() ? 0 : tensors.back().end);
  const double floor = noise_floor(ref, floor_fraction);
  TensorDiff worst;
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (t < skip.size() && skip[t]) continue;
    const GlobalTensor& g = tensors[t];
    double diff = 0;
    for (int64_t i = g.begin; i < g.end; ++i) diff = std::max(diff, std::abs(a[size_t(i)] - ref[size_t(i)]));
    const double rel = diff / std::max(largest_magnitude(ref, g.begin, g.end), floor);
    // NaN compares false: a NaN anywhere is the worst difference there is.
    if (rel > worst.rel || (std::isnan(rel) && !std::isnan(worst.rel))) worst = {rel, g.name};
  }
  return worst;
}

double default_tolerance(const std::string& precision) {
  if (precision == "fp64") return 1e-10;
  if (precision == "fp32") return 5e-4;
  return 5e-2;
}

double update_tolerance(const std::string& precision, double tolerance) {
  if (precision == "fp64") return std::max(tolerance, 1e-8);
  if (precision == "fp32") return std::max(tolerance, 0.1);
  return std::numeric_limits<double>::infinity();
}

bool EquivalenceReport::pass() const {
  // Written so that a NaN fails.
  auto within = [](double rel, double tol) { return rel <= tol; };
  for (const auto& s : steps)
    if (!s.counts_equal || !within(s.loss_rel, tolerance) || !within(s.grad.rel, tolerance) ||
        !within(s.param.rel, tolerance) || !within(s.update.rel, update_tolerance))
      return false;
  return !steps.empty();
}

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string diff_text(const char* what, const TensorDiff& d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s %.2e", what, d.rel);
  return std::string(buf) + (d.tensor.empty() ? "" : " (" + d.tensor + ")");
}

std::string update_tolerance_text(double t) {
  if (std::isinf(t)) return "not checked";
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace

std::string EquivalenceReport::str() const {
  std::ostringstream os;
  char buf[256];
  if (bitwise)
    os << "layout " << layout << " vs single rank, " << precision
       << ", reproducible mode, bitwise (zero difference); the claim covers: " << joined(claim_covers) << "\n";
  else
    os << "layout " << layout << " vs single rank, " << precision << ", tolerance " << tolerance << " (updates "
       << update_tolerance_text(update_tolerance)
       << "), relative per tensor: max |a - b| / max |b| of each parameter tensor, the worst one named\n";
  if (!noise_driven.empty())
    os << "zero gradient up to rounding, so their updates and parameters are not compared: " << joined(noise_driven)
       << "\n";
  for (const auto& s : steps) {
    std::snprintf(buf, sizeof buf, "step %3lld | loss %.6f vs %.6f (rel %.2e)", static_cast<long long>(s.step),
                  s.loss_layout, s.loss_ref, s.loss_rel);
    os << buf << " | " << diff_text("grad", s.grad) << " | " << diff_text("update", s.update) << " | "
       << diff_text("param", s.param) << (s.counts_equal ? "" : " | SUPERVISED COUNTS DIFFER") << "\n";
  }
  os << (pass() ? "PASS" : "FAIL") << "\n";
  return os.str();
}

EquivalenceReport compare_records(const std::vector<StepRecord>& ref, const std::vector<StepRecord>& layout,
                                  const std::vector<GlobalTensor>& tensors, const std::string& precision,
                                  double tolerance) {
  MT_CHECK(ref.size() == layout.size(), "compare_records: ", ref.size(), " reference steps, ", layout.size(),
           " layout steps");
  EquivalenceReport r;
  r.precision = precision;
  r.tolerance = tolerance;
  r.update_tolerance = update_tolerance(precision, tolerance);
  const double fraction = noise_floor_fraction(precision);
  std::vector<bool> noise_driven(tensors.size(), false);
  for (size_t s = 0; s < ref.size(); ++s) {
    const StepRecord &a = ref[s], &b = layout[s];
    // A gradient below the floor but not zero is noise (an exact zero, an
    // expert no token reached, steps the same way on every layout); once a
    // tensor's gradient is noise, its parameters carry AdamW's normalization
    // of that noise for good.
    const double floor = noise_floor(a.grads, fraction);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const double g = largest_magnitude(a.grads, tensors[t].begin, tensors[t].end);
      if (!noise_driven[t] && g > 0 && g < floor) {
        noise_driven[t] = true;
        r.noise_driven.push_back(tensors[t].name);
      }
    }
    StepDiff d;
    d.step = int64_t(s) + 1;
    d.loss_ref = a.metrics.loss;
    d.loss_layout = b.metrics.loss;
    d.loss_rel = std::abs(d.loss_layout - d.loss_ref) / std::max(std::abs(d.loss_ref), 1e-30);
    d.grad = per_tensor_diff(b.grads, a.grads, tensors, fraction);
    d.update = per_tensor_diff(b.update, a.update, tensors, fraction, noise_driven);
    d.param = per_tensor_diff(b.params, a.params, tensors, fraction, noise_driven);
    d.counts_equal = a.metrics.supervised == b.metrics.supervised;
    r.steps.push_back(d);
  }
  return r;
}

}  // namespace meshtrain::train
