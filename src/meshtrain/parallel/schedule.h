// Pipeline schedules as data (docs/math.md, "Pipeline parallelism"): per
// pipeline rank, the list of actions of one update window. A schedule names
// chunks (chunk c holds a contiguous range of segments and sits on pipeline
// rank chunk_rank[c]); the executor (executor.h) runs each rank's list
// after expand() has turned chunks into segments and added the engine's
// parameter actions. validate() rejects a schedule before anything runs: a
// missing or duplicated compute action, a W before its B, a backward before
// its forward, data used before it exists, a transfer without its partner,
// or a deadlock (a cycle of receives waiting on sends that come later).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::parallel {

enum class Op : uint8_t {
  Forward,         // F(mb, chunk)
  Backward,        // B + W fused (mb, chunk)
  BackwardInput,   // B(mb, chunk): the input gradient
  BackwardWeight,  // W(mb, chunk): the weight gradient
  SendActivation,  // chunk's output of mb to the rank of chunk + 1
  RecvActivation,  // chunk's input of mb from the rank of chunk - 1
  SendGradient,    // d(chunk's input) of mb to the rank of chunk - 1
  RecvGradient,    // d(chunk's output) of mb from the rank of chunk + 1
  // Parameter actions (inserted by expand(), on units): start a ZeRO-3
  // gather, wait for and bind it, free it; this unit's gradient is complete
  // for the window: reduce it; (reproducible mode) this micro-batch's
  // gradient of the unit is complete: close its leaf.
  Gather,
  Require,
  Release,
  ReduceGrads,
  CloseLeaf,
};
const char* to_string(Op op);
bool is_compute(Op op);
// The chunk at the other end of a transfer of `chunk`: activations go from
// chunk c to c + 1, gradients from c to c - 1 (the four transfer ops only).
int peer_chunk(Op transfer, int chunk);

struct Action {
  Op op = Op::Forward;
  int micro = -1;    // micro-batch within the window
  int chunk = -1;    // schedule level: the chunk; after expand(): also set
  int segment = -1;  // after expand(): the segment a compute action runs
  int unit = -1;     // parameter actions: the unit
  int peer = -1;     // transfers: the other pipeline rank
  std::string str() const;  // "F(mb=2, chunk=1)"
  bool operator==(const Action&) const = default;
};

struct Schedule {
  std::string name;
  int ranks = 1;          // pipeline ranks p
  int micro_batches = 1;  // m
  std::vector<int> chunk_rank;               // pipeline rank of each chunk
  std::vector<std::vector<Action>> actions;  // per pipeline rank
  int chunks() const { return int(chunk_rank.size()); }
};

// Throws ConfigError naming the first broken action and why.
void validate(const Schedule& s);

// Simulation of a valid schedule: the makespan, the idle (bubble) fraction
// over all ranks and the peak number of (micro-batch, chunk) activations a
// rank holds at once (F started, its BW or W not yet).
struct SimResult {
  double makespan = 0;
  double bubble = 0;                    // idle time / (ranks * makespan)
  std::vector<int> peak_live;           // per rank
};
// Unit time: every F, B, W of a chunk takes the given time, a fused BW
// takes b + w, transfers are free.
SimResult simulate(const Schedule& s, double f = 1, double b = 1, double w = 1);
// Costed: per chunk the measured times of its F, B and W (a fused BW
// takes b + w), and each transfer arrives `latency` after its send.
struct ChunkCosts {
  std::vector<double> f, b, w;  // per chunk
  double latency = 0;
};
SimResult simulate(const Schedule& s, const ChunkCosts& costs);

}  // namespace meshtrain::parallel
