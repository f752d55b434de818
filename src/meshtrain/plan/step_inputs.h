// What a training step's memory, communication and time depend on: the
// model, the mesh and the layout options the LayoutPlan is built from, the
// engine's settings, the precision policy and the shape of the window. The
// CLI fills it from a TrainConfig and a --layout; the planner needs nothing
// that runs.
#pragma once

#include <cstdint>
#include <string>

#include "meshtrain/comm/hierarchical_group.h"
#include "meshtrain/comm/mesh.h"
#include "meshtrain/core/precision.h"
#include "meshtrain/model/model_config.h"
#include "meshtrain/parallel/layout_plan.h"
#include "meshtrain/parallel/parallel_config.h"

namespace meshtrain::plan {

struct StepInputs {
  model::ModelConfig model;
  comm::MeshShape mesh;
  parallel::LayoutOptions layout;      // zero stage, virtual stages, pp_layers, sequence parallel
  parallel::ParallelConfig parallel;   // bucket size, reshard after forward, overlap, reduce op
  PrecisionPolicy precision = PrecisionPolicy::uniform(DType::F32);
  bool recompute = false;
  int64_t head_chunk_rows = 0;  // training.head_chunk_rows: the head's GEMMs and loss all in B
  bool fuse_residual = true;
  int64_t micro_batch = 1;   // rows per micro-batch (B)
  int64_t grad_accum = 1;    // micro-batches per replica per update (G, the schedule's m)
  int64_t seq_len = 128;     // positions per row
  std::string schedule = "1f1b";
  // CPU runs (a shared node): compute threads per rank (training.threads);
  // 0: the node's cores split over the ranks.
  int threads_per_rank = 0;
  // The nodes the mesh's ranks are split over (`meshtrain plan --nodes`),
  // world / nodes on each, numbered node by node (docs/multi-node.md); 0:
  // nodes of the machine profile's node.devices, and for a shared node (CPU
  // ranks on one machine) one node.
  int nodes = 0;
  // comm.hierarchical: how data-parallel collectives across nodes are
  // priced (hierarchical_cost.h, docs/math.md (M.70)).
  comm::HierarchicalMode hierarchical = comm::HierarchicalMode::Auto;
  // Published runs of another framework (published_runs.h): interleaved
  // 1F1B with this many chunks per rank, priced by the makespan
  // (m + (p - 1) / v)(f + b) (docs/math.md (M.46)) while memory and communication
  // are recorded with one chunk per rank. meshtrain's own runs keep 1 and
  // set layout.virtual_stages: their interleaved program is recorded and
  // simulated as the trainer expands it.
  int interleave = 1;

  // How another framework executes what the time model prices beyond the
  // recorded step, for modelling its published runs (published_runs.h); meshtrain's
  // own runs keep the defaults.
  struct Execution {
    // Element type of activations on the wire (tensor- and pipeline-parallel
    // collectives); F32 by default, as the recorded step holds meshtrain's.
    DType activation_wire = DType::F32;
    // false: attention scores and probabilities are written to memory
    // ([heads, s, s] per sequence, 16-bit) by separate GEMM and softmax
    // kernels instead of one fused kernel.
    bool fused_attention = true;
    // The updated parameters' all-gather (ZeRO 1/2 publication) overlaps the
    // next step's warm-up forwards instead of ending the step.
    bool overlap_param_gather = false;
  } execution;

  int world() const { return mesh.world_size(); }
  // Global samples per update: R * B * G (docs/math.md (M.62); never times pp or tp).
  int64_t global_rows() const { return int64_t(mesh.dp) * micro_batch * grad_accum; }
  // ConfigError naming the field for a negative or zero size.
  void validate() const;
};

// A global window of `rows` rows over R replicas with micro-batches of at
// most `micro_batch` rows: the largest micro-batch B' <= micro_batch with
// R * B' dividing rows, and G = rows / (R * B'). ConfigError naming the
// numbers when R > rows.
struct WindowSplit {
  int64_t micro_batch = 1, grad_accum = 1;
};
WindowSplit split_window(int64_t rows, int replicas, int64_t micro_batch);

}  // namespace meshtrain::plan
