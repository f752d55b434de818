// `meshtrain bench comm`: algorithm and bus bandwidth of every collective, the
// copy-bandwidth lower bound next to each time, raw MPI for the MPI backend,
// the hierarchical form across nodes beside the flat one (--hierarchical,
// comm/hierarchical_group.h), and a least-squares fit of the alpha-beta model
// (docs/math.md (M.20), (M.23)).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "meshtrain/comm/launch.h"

namespace meshtrain::comm::bench {

struct BenchOptions {
  Backend backend = Backend::Threads;
  int ranks = 2;  // threads only
  size_t min_bytes = 4096, max_bytes = size_t(256) << 20;
  int iters = 7;  // median of at least this many (more for small sizes)
  // Also time the hierarchical form of all_reduce, reduce_scatter and
  // all_gather (the world spread over nodes, node_placement.h), alternating
  // with the flat one.
  bool hierarchical = false;
  std::vector<OpKind> ops{OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::AllToAll,
                          OpKind::Broadcast};
};
BenchOptions parse_args(const std::vector<std::string>& args);  // ConfigError on bad flags
size_t parse_size(const std::string& text);  // "4096", "4K", "16M", "1GiB"; ConfigError otherwise
OpKind parse_op(const std::string& name);    // "all_reduce", ...; ConfigError otherwise
int run_from_args(const std::vector<std::string>& args);

struct Measurement {
  OpKind op;
  size_t bytes;            // M: all_reduce/bcast buffer, RS input, AG output, A2A send
  double seconds;          // median, max over ranks
  double raw_seconds = -1; // raw MPI call (MPI backend only)
  double hier_seconds = -1; // the hierarchical form (--hierarchical; ops it composes)
};

// STREAM-like copy with `threads` threads: (read + write bytes) / s.
double copy_bandwidth(size_t bytes, int threads);
// Bytes the whole machine must read and write for `op` on R ranks.
double bound_bytes(OpKind op, size_t M, int R);
double busbw_factor(OpKind op, int R);
// docs/math.md (M.20), (M.23): t = k_a * alpha + k_b * M * beta, fitted with relative weights.
struct AlphaBeta {
  double alpha_s = 0, beta_s_per_byte = 0;
};
AlphaBeta fit_alpha_beta(OpKind op, int R, const std::vector<Measurement>& ms);

// Median time of every op and size (on rank 0; empty on other MPI ranks);
// *ranks receives the group size.
// *layout: "2 nodes x 2 ranks" with --hierarchical.
std::vector<Measurement> measure(const BenchOptions& options, int* ranks, std::string* layout = nullptr);
void run(const BenchOptions& options, std::FILE* out);

}  // namespace meshtrain::comm::bench
