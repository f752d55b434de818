// A job across machines (docs/multi-node.md): the hosts of an Open MPI
// hostfile, and which of them still answer through the rsh agent when a
// job has failed, so that the launcher can name a lost node.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace meshtrain::train {

struct HostfileEntry {
  std::string host;
  int slots = 1;  // "slots=N"; 1 when not given (Open MPI's default)
};

// The hosts of an Open MPI hostfile ("host [slots=N] [max_slots=M]" per
// line, '#' comments). ConfigError naming the file and line for a file
// that cannot be read, holds no host, or a slot count that is not a
// positive integer.
std::vector<HostfileEntry> read_hostfile(const std::string& path);

// The hosts among `hosts` on which `agent HOST true` (ssh, or the emulated
// cluster's scripts/cluster-rsh.sh) does not succeed within `deadline`,
// each with what the agent said, e.g. "node1 (exit 255: no node 'node1' ...)".
std::vector<std::string> unreachable_hosts(const std::vector<HostfileEntry>& hosts, const std::string& agent,
                                           std::chrono::milliseconds deadline);

}  // namespace meshtrain::train
