#include "meshtrain/plan/mesh_search.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/plan/byte_size.h"

namespace meshtrain::plan {

std::string describe_groups(const comm::MeshShape& mesh) {
  std::string out;
  for (comm::Axis axis : comm::kWorldAxes) {
    if (mesh.size(axis) <= 1) continue;
    std::string members;
    for (int r : mesh.members(0, axis)) {
      if (!members.empty()) members += ',';
      members += std::to_string(r);
    }
    if (!out.empty()) out += ' ';
    out += comm::axis_name(axis);
    out += " {";
    out += members;
    out += '}';
  }
  return out.empty() ? "one rank" : out;
}

namespace {

// "; tp across nodes" where the mesh's tp or cp groups span the nodes of
// --nodes.
std::string across_nodes(const StepInputs& in, const HardwareProfile* hw) {
  std::string out;
  if (in.nodes == 0) return out;
  for (const std::string& axis : axes_across_nodes(in, hw, kLayerAxes)) out += (out.empty() ? "; " : "+") + axis;
  return out.empty() ? out : out + " across nodes";
}

}  // namespace

std::vector<MeshCandidate> search_meshes(const StepInputs& base, int devices, const HardwareProfile* hw,
                                         const StepRecorder& record) {
  MT_REQUIRE(ConfigError, devices >= 1, "--devices ", devices, ": needs at least one device");
  const int64_t rows = base.global_rows();
  std::vector<MeshCandidate> out;
  for (int tp = 1; tp <= devices; ++tp) {
    if (devices % tp) continue;
    for (int pp = 1; pp <= devices / tp; ++pp) {
      if ((devices / tp) % pp) continue;
      for (int cp = 1; cp <= devices / tp / pp; ++cp) {
        if ((devices / tp / pp) % cp || (cp > 1 && base.seq_len % (2 * cp))) continue;
        const int dp = devices / tp / pp / cp;
        // Expert parallelism is carved out of dp x cp (never multiplied into D).
        for (int ep = 1; ep <= dp * cp; ++ep) {
          if ((dp * cp) % ep || (ep > 1 && (base.model.n_experts == 0 || base.model.n_experts % ep))) continue;
          for (int stage = 0; stage <= (dp * cp > 1 ? 3 : 0); ++stage) {
            MeshCandidate c;
            c.inputs = base;
            c.global_rows = rows;
            c.inputs.mesh = comm::MeshShape{pp, dp, cp, tp, ep};
            c.inputs.layout.zero_stage = stage;
            c.inputs.parallel.zero_stage = stage;
            c.inputs.parallel.dp = dp;
            c.inputs.layout.pp_layers.clear();
            try {
              const WindowSplit w = split_window(rows, dp, base.micro_batch);
              c.inputs.micro_batch = w.micro_batch;
              c.inputs.grad_accum = w.grad_accum;
              c.prediction = predict(c.inputs, record, hw, /*brackets=*/false);
            } catch (const ConfigError& e) {
              c.rejected = e.what();
            }
            out.push_back(std::move(c));
          }
        }
      }
    }
  }
  auto key = [](const MeshCandidate& c) {
    if (!c.prediction) return std::make_tuple(2, 0.0, 0.0);
    const double t = c.prediction->time ? c.prediction->time->step_s : 0.0;
    return std::make_tuple(c.prediction->fits() ? 0 : 1, t, double(c.prediction->peak_bytes()));
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  return out;
}

std::string render_search(const std::vector<MeshCandidate>& candidates, int devices, const HardwareProfile* hw) {
  std::ostringstream os;
  const int64_t rows = candidates.empty() ? 0 : candidates.front().global_rows;
  os << "meshes of " << devices << " devices (D = pp x dp x cp x tp; ep carved out of dp x cp), global batch fixed at " << rows << " rows";
  const int nodes = candidates.empty() ? 0 : candidates.front().inputs.nodes;
  if (nodes > 0)
    os << ", on " << nodes << " node(s) of " << devices / nodes
       << " ranks (numbered node by node, tp innermost, then cp; a group within a node priced on [link.intra], one "
          "across nodes on [link.inter])";
  if (hw) os << ", ranked by predicted step time on " << hw->name << " among those fitting " << gib(hw->memory_bytes);
  else os << ", ranked by peak memory (give --hardware FILE for step times)";
  os << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-4s %-28s %-5s %7s %11s %5s %11s %12s %7s  %s\n", "#", "mesh", "zero", "B x G",
                "peak", "fits", "step", "tokens/s", "MFU", "rank 0's groups");
  os << line;
  int n = 0;
  for (const MeshCandidate& c : candidates) {
    const comm::MeshShape& m = c.inputs.mesh;
    char mesh[96];
    std::snprintf(mesh, sizeof mesh, "pp=%d dp=%d cp=%d tp=%d%s", m.pp, m.dp, m.cp, m.tp,
                  m.ep > 1 ? (" ep=" + std::to_string(m.ep)).c_str() : "");
    if (!c.prediction) {
      std::snprintf(line, sizeof line, "  %-4s %-28s %-5d  cannot run: %s\n", "-", mesh,
                    c.inputs.layout.zero_stage, c.rejected.c_str());
      os << line;
      continue;
    }
    const Prediction& p = *c.prediction;
    char step[32] = "-", tps[32] = "-", mfu[32] = "-";
    if (p.time) {
      std::snprintf(step, sizeof step, "%.4g s", p.time->step_s);
      std::snprintf(tps, sizeof tps, "%.0f", double(c.inputs.global_rows() * c.inputs.seq_len) / p.time->step_s);
      std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * p.time->mfu);
    }
    char bg[32];
    std::snprintf(bg, sizeof bg, "%lldx%lld", (long long)c.inputs.micro_batch, (long long)c.inputs.grad_accum);
    std::snprintf(line, sizeof line, "  %-4d %-28s %-5d %7s %11s %5s %11s %12s %7s  %s\n", ++n, mesh,
                  c.inputs.layout.zero_stage, bg, gib(double(p.peak_bytes())).c_str(),
                  hw ? (p.fits() ? "yes" : "NO") : "-", step, tps, mfu, (describe_groups(m) + across_nodes(c.inputs, hw)).c_str());
    os << line;
  }
  if (n == 0)
    os << "no mesh of " << devices << " devices can run this model with a global batch of " << rows
       << " rows (reasons above): choose another --devices, or a global batch (training.micro_batch x grad_accum) "
          "that splits over the data-parallel replicas\n";
  return os.str();
}

}  // namespace meshtrain::plan
