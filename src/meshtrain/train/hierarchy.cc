#include "meshtrain/train/hierarchy.h"

#include <algorithm>
#include <memory>

#include "meshtrain/comm/hierarchical_group.h"
#include "meshtrain/plan/hierarchical_cost.h"

namespace meshtrain::train {
namespace {

using comm::HierarchicalMode;

// What auto predicts for one all-reduce of `bytes` (the log's example).
std::string example(const comm::NodeLayout& L, const plan::HardwareProfile& hw, double bytes) {
  const double h = plan::hierarchical_seconds(comm::OpKind::AllReduce, L, bytes, hw),
               f = plan::flat_seconds(comm::OpKind::AllReduce, L, bytes, hw);
  return detail::concat("a ", bytes / double(1 << 20), " MiB all-reduce runs ", h < f ? "hierarchical" : "flat",
                        ", predicted ", h * 1e3, " ms hierarchical vs ", f * 1e3, " ms flat");
}

}  // namespace

parallel::DataGroupForm data_group_form(const TrainConfig& cfg, const comm::ParallelContext& ctx, std::string* note) {
  const HierarchicalMode mode = comm::parse_hierarchical_mode(cfg.comm.hierarchical);
  std::shared_ptr<const plan::HardwareProfile> hw;
  if (!cfg.comm.hardware.empty()) hw = std::make_shared<plan::HardwareProfile>(plan::load_hardware(cfg.comm.hardware));
  const std::vector<std::string> hosts = ctx.host_of_rank;
  // A context without hosts (the planner's recording) or on one node: flat.
  const bool one_node = int(hosts.size()) != ctx.world_size ||
                        std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  return [mode, hw, hosts, one_node, note](const std::shared_ptr<comm::ProcessGroup>& group,
                                           const std::vector<int>& members) -> std::shared_ptr<comm::ProcessGroup> {
    if (one_node) return group;
    auto say = [&](const std::string& line) {
      if (note) *note += detail::concat("data-parallel group '", group->name(), "': ", line, "\n");
    };
    std::vector<std::string> host_of_member;
    for (int r : members) host_of_member.push_back(hosts[size_t(r)]);
    std::string why;
    const std::optional<comm::NodeLayout> layout = comm::node_layout(host_of_member, group->rank(), &why);
    if (!layout) {
      say(detail::concat("flat: ", why));
      return group;
    }
    const std::string shape = detail::concat("(", layout->str(), ")");
    if (mode == HierarchicalMode::Off) {
      say(detail::concat("flat ", shape, " (comm.hierarchical = off)"));
      return group;
    }
    if (mode == HierarchicalMode::Auto && !hw) {
      say(detail::concat("flat ", shape, " (comm.hierarchical = auto without a machine profile to price the two forms: "
                         "set comm.hardware, or comm.hierarchical = on)"));
      return group;
    }
    comm::HierarchicalGroup::Choice choose;
    if (mode == HierarchicalMode::Auto) {
      choose = [hw, L = *layout](comm::OpKind kind, DType dtype, size_t count) {
        return plan::runs_hierarchical(HierarchicalMode::Auto, kind, L, double(count * dtype_size(dtype)), *hw);
      };
      say(detail::concat("per collective, the form predicted faster on ", hw->name, " ", shape,
                         " (comm.hierarchical = auto; docs/math.md (M.20), (M.70)): ",
                         example(*layout, *hw, double(64 << 20))));
    } else {
      say(detail::concat("hierarchical ", shape, ": reduce-scatter inside each node, all-reduce across nodes, "
                         "all-gather inside (comm.hierarchical = on)"));
    }
    return comm::HierarchicalGroup::create(group, *layout, std::move(choose));
  };
}

}  // namespace meshtrain::train
