// `meshtrain bench machine`: measures the machine a job runs on and writes
// its profile (hardware.h) as TOML. Every rank of the job measures at the
// same time, as a training step's ranks run: on this machine `ranks`
// threads (one node); under mpirun (`bench machine --hostfile`, which starts
// itself on every slot of the hostfile's hosts) the job's ranks, numbered
// node by node (comm/node_placement.h). Measured:
//   - GEMM rates per shape class in f32 and bf16 and the copy bandwidth of
//     one core (a CPU "device" is a core; the ranks of a run share their
//     node's cores: node.shared), each rank on one thread, the median over
//     ranks. A class is a linear layer's three products (forward, input
//     and weight gradient) with operands from beyond the caches, the rate
//     a step's GEMMs reach (kernels/cpu/gemm_peak.h: measure_linear_core_flops).
//     Each GEMM is timed by the thread's CPU time, so a core that other
//     processes share does not lower it; the sharing is node.devices: the
//     cores this process may use, split between nodes that run on one
//     machine (the same kernel boot id, as an emulated cluster's namespaces
//     do).
//   - alpha and beta of docs/math.md (M.20) per collective (link_bench.h):
//     [link.intra] over the ranks of each node (one node after another:
//     the nodes of an emulated cluster share one machine's cores),
//     [link.inter] over one rank of each node, every rank of a node in its
//     group at once (shared_by = the ranks per node), [link.inter.whole_nodes]
//     over the whole job as one group; with one node the inter-node figures repeat
//     the intra-node ones, with one rank per node the other way round, and
//     the file says so.
// peak_tflops is the best rate of one product repeated (cache-hot) per
// dtype: a CPU has no vendor
// figure to quote, and MFU against it reads as a fraction of what this
// machine's GEMM reaches (training's MFU divides by the same figure:
// train/peak_flops.h).
#pragma once

#include <cstddef>
#include <string>

namespace meshtrain::plan {

struct MachineBenchOptions {
  int ranks = 0;                          // threads backend: this many ranks; 0: the cores (at least 2)
  size_t max_bytes = size_t(16) << 20;    // largest collective message
  int iters = 5;                          // medians of at least this many repetitions
  double seconds_per_gemm = 0.3;          // CPU time spent on each GEMM class
};

// The profile as TOML text (comments say how each figure was measured) on
// rank 0 of the job; "" on the other ranks of an mpirun job.
std::string bench_machine(const MachineBenchOptions& options);

}  // namespace meshtrain::plan
