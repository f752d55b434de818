// The segments' allocations and tensor-parallel collectives, replayed
// without computing: a mirror of segments.cc, block.cc, attention_layer.cc,
// mlp_layer.cc and layers.cc that allocates a SymTensor wherever they
// allocate a Tensor (same shape, dtype and category, same owner: saved
// state, a local that dies at the end of the function, a deferred weight
// job's copy). The planner runs it through a rank's step program to predict
// the Activations and Workspace peaks exactly; tests/plan/validation_test.cc
// compares it with the MemoryTracker of real steps, so a layer that changes
// what it saves or when it frees fails there until this mirror follows.
#pragma once

#include <cstdint>
#include <vector>

#include "meshtrain/comm/comm_plan.h"
#include "meshtrain/core/memory_replay.h"
#include "meshtrain/model/param_spec.h"
#include "meshtrain/model/transformer.h"

namespace meshtrain::model {

struct TraceBatch {
  int64_t rows = 0, seq = 0;
  int64_t n() const { return rows * seq; }
};

// Norm::Stats, SelfAttention::Saved, Mlp::Saved, Block::Saved and
// SegmentState with SymTensors.
struct NormTrace {
  SymTensor mean, rstd;
};
struct AttentionTrace {
  SymTensor q, k, v, out, out_op, lse;
};
struct MlpTrace {
  SymTensor a, b, act;
};
struct BlockTrace {
  SymTensor x;
  bool full = false;
  SymTensor xn1, h, xn2;
  NormTrace stats1, stats2;
  AttentionTrace attn;
  MlpTrace mlp;
};
struct SegmentTrace {
  BlockTrace block;
  SymTensor x_final, xf, dlogits;
  NormTrace final_stats;
  bool defer = false;
  std::vector<SymTensor> weight_jobs;  // what queued weight-gradient jobs keep alive
  // The last job's dy and what it was taken from (WeightGrads::keep shares
  // one copy between consecutive jobs reading the same changing tensor).
  SymTensor last_dy;
  const void* last_dy_source = nullptr;
  void clear_jobs() {
    weight_jobs.clear();
    last_dy = SymTensor();
    last_dy_source = nullptr;
  }
};

// The sizes a rank's layers take from its local spec (bind_linear): per
// block the local q, k/v and MLP hidden rows and query heads; the LM
// head's rows. Zero where the rank does not hold the block.
struct LocalBlockDims {
  int64_t q = 0, kv = 0, ffn = 0, q_heads = 0;
};
struct LocalDims {
  std::vector<LocalBlockDims> blocks;
  int64_t vocab_rows = 0;
};
LocalDims local_dims(const ModelConfig& cfg, const ModelSpec& local);

class ModelMemoryTrace {
 public:
  // local: the rank-local spec (its tensor-parallel slice and pipeline
  // segments); exec: recomputation, precision, residual fusion, sequence
  // parallelism.
  ModelMemoryTrace(const ModelConfig& cfg, const ModelSpec& local, const ExecOptions& exec, int tp_size);

  int num_segments() const { return int(cfg_.n_layers) + 2; }
  // Transformer::stream_rows: rows of the residual stream this rank holds
  // (and sends between stages) for n tokens, n / tp under sequence
  // parallelism (ConfigError when tp does not divide n, as the trainer).
  int64_t stream_rows(int64_t n) const;
  // Transformer::forward_segment in training mode (backward = true) or
  // forward-only; returns the output activation (nothing for the head).
  SymTensor forward(MemoryReplay& r, comm::CommLedger* ledger, int s, const TraceBatch& b, const SymTensor& x,
                    SegmentTrace& st, bool backward) const;
  // Transformer::backward_segment_input: dy in, the input gradient out.
  SymTensor backward_input(MemoryReplay& r, comm::CommLedger* ledger, int s, const TraceBatch& b, SymTensor dy,
                           SegmentTrace& st, bool defer_weights) const;
  // Transformer::backward_segment_weight: the queued jobs run and let go.
  void backward_weight(SegmentTrace& st) const { st.clear_jobs(); }

 private:
  using BlockDims = LocalBlockDims;
  NormTrace norm_forward(MemoryReplay& r, int64_t n, DType dt) const;
  AttentionTrace attention_forward(MemoryReplay& r, const TraceBatch& b, const BlockDims& dims) const;
  MlpTrace mlp_forward(MemoryReplay& r, int64_t n, const BlockDims& dims) const;
  SymTensor block_forward(MemoryReplay& r, comm::CommLedger* ledger, const TraceBatch& b, const BlockDims& dims,
                          const SymTensor& x, bool recompute, BlockTrace* saved, comm::StepPhase phase) const;
  void block_backward(MemoryReplay& r, comm::CommLedger* ledger, const TraceBatch& b, const BlockDims& dims,
                      BlockTrace& saved, const SymTensor& dres, SegmentTrace& st) const;
  void attention_backward(MemoryReplay& r, const TraceBatch& b, const BlockDims& dims, const AttentionTrace& s,
                          const SymTensor& xn, const SymTensor& dy, bool dy_changes, SegmentTrace& st) const;
  // dy_changes: dy is the stream's gradient, which the norm backward
  // updates before deferred weight jobs run (not a gathered copy).
  void mlp_backward(MemoryReplay& r, int64_t n, const BlockDims& dims, const MlpTrace& s, const SymTensor& xn,
                    const SymTensor& dy, bool dy_changes, SegmentTrace& st) const;
  // WeightGrads::linear / bias / embedding: a deferred job keeps x and dy (a
  // copy of dy when the caller overwrites it, shared with the previous job
  // when that one copied the same tensor).
  void weight_job(MemoryReplay& r, SegmentTrace& st, const SymTensor& x, const SymTensor& dy, bool dy_changes) const;
  // regions.cc: the collectives of the tensor-parallel regions on [n, d]
  // messages and the buffers sequence parallelism gathers and scatters into
  // (returned; without SP the region is the identity or an in-place
  // all-reduce and nothing new is allocated).
  void tp_collective(comm::CommLedger* ledger, comm::OpKind kind, int64_t n, DType dt, comm::StepPhase phase,
                     const char* what) const;
  SymTensor column_input(MemoryReplay& r, comm::CommLedger* ledger, const SymTensor& x_local, int64_t n,
                         comm::StepPhase phase) const;
  SymTensor column_input_grad(MemoryReplay& r, comm::CommLedger* ledger, int64_t n, const char* what) const;
  SymTensor row_output(MemoryReplay& r, comm::CommLedger* ledger, const SymTensor& partial, int64_t n,
                       MemCategory cat, comm::StepPhase phase, const char* what) const;
  SymTensor row_output_grad(MemoryReplay& r, comm::CommLedger* ledger, const SymTensor& dy_local, int64_t n,
                            MemCategory cat) const;

  ModelConfig cfg_;
  ExecOptions exec_;
  int tp_;
  bool sp_;  // sequence parallelism over tp_ > 1 ranks (TpRegions::shards_rows)
  DType op_, acc_;  // matmul operand type, activations' type
  LocalDims dims_;
};

}  // namespace meshtrain::model
