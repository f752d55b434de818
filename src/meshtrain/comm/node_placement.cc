#include "meshtrain/comm/node_placement.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <map>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {
namespace {

// A host name as all_gather moves it: fixed-size i32 words, NUL padded.
constexpr size_t kNameWords = 64;  // 256 bytes: above HOST_NAME_MAX (64) on Linux

// MESHTRAIN_HOST_OF_RANK="node0,node0,node1,node1": the host name of each
// rank of the launched world, in place of the machine's, so one machine can
// stand for several nodes (tests of placement and hierarchical collectives
// on the threads backend or under a single-host mpirun).
std::string this_host(int rank, int ranks) {
  if (const char* fake = std::getenv("MESHTRAIN_HOST_OF_RANK"); fake && *fake) {
    std::vector<std::string> names;
    for (std::string_view rest = fake;;) {
      const size_t comma = rest.find(',');
      names.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    MT_REQUIRE(ConfigError, int(names.size()) == ranks, "MESHTRAIN_HOST_OF_RANK='", fake, "' names ", names.size(),
               " host(s) but the job has ", ranks, " ranks: give one name per rank, comma-separated");
    MT_REQUIRE(ConfigError, !names[size_t(rank)].empty(), "MESHTRAIN_HOST_OF_RANK='", fake, "': rank ", rank,
               "'s host name is empty");
    return names[size_t(rank)];
  }
  char buf[HOST_NAME_MAX + 1] = {};
  MT_REQUIRE(CommError, ::gethostname(buf, sizeof buf - 1) == 0, "gethostname failed: ", std::strerror(errno));
  return buf;
}

// "node0: ranks 0,1; node1: ranks 2,3": a group's members by node.
std::string by_node(const std::vector<int>& members, const std::vector<std::string>& host_of_rank) {
  std::map<std::string, std::vector<int>> ranks_of;
  std::vector<std::string> order;
  for (int r : members) {
    const std::string& h = host_of_rank[size_t(r)];
    if (!ranks_of.count(h)) order.push_back(h);
    ranks_of[h].push_back(r);
  }
  std::string out;
  for (const auto& h : order) {
    if (!out.empty()) out += "; ";
    out += h + ": rank" + (ranks_of[h].size() > 1 ? "s " : " ");
    for (size_t i = 0; i < ranks_of[h].size(); ++i) out += (i ? "," : "") + std::to_string(ranks_of[h][i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> gather_host_names(ProcessGroup& world) {
  const std::string mine = this_host(world.rank(), world.size());
  std::vector<int32_t> all(kNameWords * size_t(world.size()), 0);
  int32_t* slot = all.data() + kNameWords * size_t(world.rank());
  std::memcpy(slot, mine.data(), std::min(mine.size(), kNameWords * sizeof(int32_t) - 1));
  world.all_gather(slot, all.data(), all.size(), DType::I32);
  std::vector<std::string> hosts;
  for (int r = 0; r < world.size(); ++r) {
    const char* s = reinterpret_cast<const char*>(all.data() + kNameWords * size_t(r));
    hosts.emplace_back(s, strnlen(s, kNameWords * sizeof(int32_t)));
  }
  return hosts;
}

std::vector<int> node_major_order(const std::vector<std::string>& host_of_rank) {
  std::map<std::string, size_t> node_index;  // in the order of each node's first rank
  for (const auto& h : host_of_rank) node_index.emplace(h, node_index.size());
  std::vector<int> order(host_of_rank.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = int(r);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return node_index.at(host_of_rank[size_t(a)]) < node_index.at(host_of_rank[size_t(b)]);
  });
  return order;
}

std::string describe_nodes(const std::vector<std::string>& host_of_rank) {
  std::string out;
  int nodes = 0;
  for (size_t first = 0; first < host_of_rank.size();) {
    size_t last = first;
    while (last + 1 < host_of_rank.size() && host_of_rank[last + 1] == host_of_rank[first]) ++last;
    out += detail::concat(nodes++ ? ", " : "", host_of_rank[first], last > first ? " ranks " : " rank ", first,
                          last > first ? detail::concat("-", last) : "");
    first = last + 1;
  }
  return nodes > 1 ? detail::concat(nodes, " nodes: ", out) : "";
}

void check_groups_inside_nodes(const MeshShape& shape, const std::vector<std::string>& host_of_rank,
                               bool allow_cross_node) {
  MT_CHECK(int(host_of_rank.size()) == shape.world_size(), "host names of ", host_of_rank.size(),
           " ranks for a mesh of ", shape.world_size());
  if (allow_cross_node) return;
  std::map<std::string, int> ranks_on;
  for (const auto& h : host_of_rank) ++ranks_on[h];
  std::string counts;
  for (const auto& [h, n] : ranks_on) counts += detail::concat(counts.empty() ? "" : ", ", h, " ", n);
  // tp first: it communicates in every layer, cp (with tp inside it) next.
  for (const Axes axes : {Axes{Axis::Tp}, Axes{Axis::Cp, Axis::Tp}}) {
    const int size = shape.size(axes);
    for (int r = 0; r < shape.world_size(); ++r) {
      const std::vector<int> members = shape.members(r, axes);
      const bool one_node = std::all_of(members.begin(), members.end(), [&](int m) {
        return host_of_rank[size_t(m)] == host_of_rank[size_t(members.front())];
      });
      if (one_node) continue;
      const char* what = axes == Axes{Axis::Tp} ? "tensor-parallel (tp)" : "context-parallel (cp x tp)";
      MT_THROW(ConfigError, "mesh ", shape.str(), ": the ", what, " group of mesh ranks ", members.front(), "-",
               members.back(), " spans nodes (", by_node(members, host_of_rank), "); tp and cp groups communicate in every layer and are kept inside a node (shared "
               "memory), with dp and pp across nodes. Ranks per node: ", counts, ". Give every node a multiple of ",
               axes.key() == "tp" ? "parallel.tp" : "parallel.cp * parallel.tp", " = ", size,
               " ranks (the hostfile's slots), lower parallel.tp / parallel.cp, or allow it with `meshtrain launch "
               "--allow-cross-node-tp` (comm.allow_cross_node_tp = true; every layer's collectives then cross the "
               "network)");
    }
  }
}

}  // namespace meshtrain::comm
