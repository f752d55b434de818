#include "meshtrain/checkpoint/compare.h"

#include <cmath>
#include <set>
#include <sstream>

namespace meshtrain::checkpoint {

bool CheckpointDiff::identical() const {
  return only_in_a.empty() && only_in_b.empty() && shape_mismatch.empty() && differing.empty() && position_equal;
}

std::string CheckpointDiff::str() const {
  std::ostringstream os;
  for (const auto& n : only_in_a) os << "only in A: " << n << "\n";
  for (const auto& n : only_in_b) os << "only in B: " << n << "\n";
  for (const auto& n : shape_mismatch) os << "shape or dtype differs: " << n << "\n";
  for (const auto& d : differing)
    os << "values differ: " << d.name << " (" << d.differing << " elements, max |diff| " << d.max_abs << ")\n";
  if (!position_equal) os << "training position differs: " << position_note << "\n";
  os << tensors_compared << " tensors compared: " << (identical() ? "IDENTICAL" : "DIFFERENT") << "\n";
  return os.str();
}

CheckpointDiff compare_checkpoints(const CheckpointReader& a, const CheckpointReader& b) {
  CheckpointDiff d;
  const auto na = a.names(), nb = b.names();
  const std::set<std::string> sa(na.begin(), na.end()), sb(nb.begin(), nb.end());
  for (const auto& n : na)
    if (!sb.count(n)) d.only_in_a.push_back(n);
  for (const auto& n : nb)
    if (!sa.count(n)) d.only_in_b.push_back(n);
  for (const auto& n : na) {
    if (!sb.count(n)) continue;
    const auto &ta = a.tensor(n), &tb = b.tensor(n);
    if (!(ta.shape == tb.shape) || ta.dtype != tb.dtype) {
      d.shape_mismatch.push_back(n);
      continue;
    }
    const size_t count = size_t(ta.shape.numel());
    TensorDiff td{n, 0, 0};
    if (ta.dtype == DType::I32 || ta.dtype == DType::I64) {
      // Integers compare exactly in i64 (f64 would lose values above 2^53).
      std::vector<int64_t> va(count), vb(count);
      a.read_all(n, va.data(), DType::I64);
      b.read_all(n, vb.data(), DType::I64);
      for (size_t i = 0; i < count; ++i)
        if (va[i] != vb[i]) {
          ++td.differing;
          td.max_abs = std::max(td.max_abs, std::abs(double(va[i]) - double(vb[i])));
        }
    } else {
      // Every float dtype widens to f64 exactly, so equal f64 means equal bits
      // (NaN equals NaN here).
      std::vector<double> va(count), vb(count);
      a.read_all(n, va.data(), DType::F64);
      b.read_all(n, vb.data(), DType::F64);
      for (size_t i = 0; i < count; ++i) {
        if (va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) continue;
        ++td.differing;
        td.max_abs = std::max(td.max_abs, std::abs(va[i] - vb[i]));
      }
    }
    if (td.differing) d.differing.push_back(td);
    ++d.tensors_compared;
  }
  const auto& ma = a.metadata();
  const auto& mb = b.metadata();
  for (const char* key : {"step", "loader_state", "consumed_rows", "consumed_tokens"}) {
    if (ma.value(key, nlohmann::json()) != mb.value(key, nlohmann::json())) {
      d.position_equal = false;
      d.position_note += std::string(d.position_note.empty() ? "" : ", ") + key;
    }
  }
  const auto steps = [](const nlohmann::json& m) {
    return m.contains("optimizer") ? m.at("optimizer").value("steps_taken", nlohmann::json()) : nlohmann::json();
  };
  if (steps(ma) != steps(mb)) {
    d.position_equal = false;
    d.position_note += std::string(d.position_note.empty() ? "" : ", ") + "optimizer.steps_taken";
  }
  return d;
}

}  // namespace meshtrain::checkpoint
