// A machine profile (TOML, configs/hardware/*.toml): what a device computes
// and holds, how fast its links move bytes. `meshtrain bench machine`
// writes this machine's from measurements; the cluster files carry public
// figures with their sources. Every field below is required; a missing one
// is a ConfigError naming the file and the key.
//
//   name = "..."            source = "..."   (where the figures come from)
//   [device]  memory = "80GiB"   memory_bandwidth_gbps = 2039
//             peak_tflops = { bf16 = 312.0, fp16 = 312.0, fp32 = 19.5 }
//   [gemm]    bf16 = [ { min_dim = 1, tflops = 80 }, { min_dim = 1024, tflops = 230 }, ... ]
//             (achieved rate by the smallest of a GEMM's m, n, k; one list per dtype)
//   [node]    devices = 8   (shared = true: ranks split one node's cores, CPU runs)
//   [link.intra] / [link.inter]   alpha_us = 8.0   bandwidth_gbps = 235
//             optional per collective: all_reduce = { alpha_us = .., bandwidth_gbps = .. },
//             reduce_scatter, all_gather, send
//             optional shared_by = 2 (a shared node's [link.inter]): the figures are
//             what each of that many streams crossing the node's link at once gets
//             (bench machine --hostfile: every rank of a node crossing)
//             optional [link.inter.whole_nodes], the same keys: a group holding
//             every rank of each node it spans (bench machine --hostfile: the job)
//   [overheads] (optional) step_us = 0   per launch of a kernel, layer_us = 0
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshtrain/comm/types.h"
#include "meshtrain/core/dtype.h"

namespace meshtrain::plan {

struct AlphaBeta {
  double alpha_s = 0;           // per round
  double bytes_per_s = 1;       // effective bandwidth of one rank's link (1/beta)
};

struct LinkProfile {
  AlphaBeta base;
  std::map<comm::OpKind, AlphaBeta> per_op;  // measured per collective where known
  // > 0: the figures are what each of this many streams crossing a shared
  // node's link at once gets; 0: the link's, alone (crossing_link).
  int shared_by = 0;
  // Measured for a group holding every rank of each node it spans (its own
  // collective algorithm and no stream beside it); null: the figures above.
  std::shared_ptr<const LinkProfile> whole_nodes;
  const AlphaBeta& for_op(comm::OpKind k) const;
};

struct GemmClass {
  int64_t min_dim = 1;
  double flops_per_s = 0;
};

struct HardwareProfile {
  std::string name, source, path;
  double memory_bytes = 0;
  double memory_bytes_per_s = 0;
  std::map<DType, double> peak_flops;              // per device
  std::map<DType, std::vector<GemmClass>> gemm;    // ascending min_dim
  int devices_per_node = 1;
  // CPU machines: a "device" is a core and the ranks of a run share the
  // node's cores (threads per rank = cores / ranks), node.shared = true.
  bool shared_node = false;
  LinkProfile intra, inter;
  double per_layer_overhead_s = 0;  // fixed cost per block per pass (kernel launches)

  double peak(DType t) const;  // ConfigError naming the dtype when the file lacks it
  // Achieved rate of an m x n x k GEMM in `t` by its smallest dimension:
  // the class's, interpolated in log2 of the dimension between two classes,
  // never above the peak.
  double gemm_rate(DType t, int64_t m, int64_t n, int64_t k) const;
};

// The link a group that crosses nodes is priced on, with `here` of its
// members on each node of `per_node` ranks, and the part of that link's
// bandwidth the group's stream gets (docs/planning.md, "Nodes and links"):
// [link.inter.whole_nodes] for a group of whole nodes (here == per_node)
// where the profile has it; else [link.inter], which on a shared node
// (node.shared: one link a node) the S = per_node / here groups crossing at
// once share, one stream each (a ring crosses a node's boundary once each
// way): each gets 1 / S of the link, or shared_by / S of figures measured
// as one of shared_by streams. A device with a link of its own (a GPU node)
// has it whole.
struct CrossingLink {
  const LinkProfile* link = nullptr;
  double share = 1;
};
CrossingLink crossing_link(const HardwareProfile& hw, int here, int per_node);

HardwareProfile load_hardware(const std::string& path);
HardwareProfile parse_hardware(const std::string& toml_text, const std::string& source_name);

}  // namespace meshtrain::plan
