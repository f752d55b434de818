#include "meshtrain/model/memory_trace.h"

#include "meshtrain/core/error.h"
#include "meshtrain/model/layers.h"

namespace meshtrain::model {

namespace {

constexpr MemCategory kAct = MemCategory::Activations;
constexpr MemCategory kWork = MemCategory::Workspace;

int64_t rows_of(const ModelSpec& s, const std::string& name) {
  const ParamSpec* p = s.find_or_null(name);
  return p ? p->shape[0] : 0;
}

ModelConfig finalized(ModelConfig cfg) {
  cfg.finalize();
  return cfg;
}

}  // namespace

LocalDims local_dims(const ModelConfig& cfg, const ModelSpec& local) {
  LocalDims out;
  out.blocks.resize(size_t(cfg.n_layers));
  const bool swiglu = cfg.mlp == MlpKind::SwiGLU;
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    LocalBlockDims& d = out.blocks[size_t(l)];
    d.q = rows_of(local, p + ".self_attn.q_proj.weight");
    d.kv = rows_of(local, p + ".self_attn.k_proj.weight");
    d.ffn = rows_of(local, p + (swiglu ? ".mlp.gate_proj.weight" : ".mlp.fc_in.weight"));
    d.q_heads = cfg.head_dim > 0 ? d.q / cfg.head_dim : 0;
  }
  out.vocab_rows = cfg.tied_embeddings ? rows_of(local, "model.embed_tokens.weight") : rows_of(local, "lm_head.weight");
  return out;
}

ModelMemoryTrace::ModelMemoryTrace(const ModelConfig& cfg, const ModelSpec& local, const ExecOptions& exec,
                                   int tp_size)
    : cfg_(finalized(cfg)),
      exec_(exec),
      tp_(tp_size),
      sp_(exec.sequence_parallel && tp_size > 1),
      op_(exec.precision.compute),
      acc_(exec.precision.accumulate()),
      dims_(local_dims(cfg_, local)) {}

int64_t ModelMemoryTrace::stream_rows(int64_t n) const {
  if (!sp_) return n;
  MT_REQUIRE(ConfigError, n % tp_ == 0, "sequence parallelism: a micro-batch of ", n,
             " tokens does not split over parallel.tp = ", tp_, " ranks; data.seq_len must be a multiple of it");
  return n / tp_;
}

void ModelMemoryTrace::tp_collective(comm::CommLedger* ledger, comm::OpKind kind, int64_t n, DType dt,
                                     comm::StepPhase phase, const char* what) const {
  // The regions talk only to a group of more than one rank; CommStats
  // counts the whole [n, d] message (all-gather output, reduce-scatter input).
  if (ledger && tp_ > 1) ledger->add({"tp", tp_, kind, n * cfg_.d_model * int64_t(dtype_size(dt)), phase, what});
}

SymTensor ModelMemoryTrace::column_input(MemoryReplay& r, comm::CommLedger* ledger, const SymTensor& x_local,
                                         int64_t n, comm::StepPhase phase) const {
  if (!sp_) return x_local;
  SymTensor full = r.alloc(n * cfg_.d_model, x_local.dtype(), kAct);
  tp_collective(ledger, comm::OpKind::AllGather, n, x_local.dtype(), phase, "normed rows (sequence gather)");
  return full;
}

SymTensor ModelMemoryTrace::column_input_grad(MemoryReplay& r, comm::CommLedger* ledger, int64_t n,
                                              const char* what) const {
  if (!sp_) {
    tp_collective(ledger, comm::OpKind::AllReduce, n, acc_, comm::StepPhase::Backward, what);
    return SymTensor();  // summed in place
  }
  SymTensor mine = r.alloc(stream_rows(n) * cfg_.d_model, acc_, kWork);
  tp_collective(ledger, comm::OpKind::ReduceScatter, n, acc_, comm::StepPhase::Backward, what);
  return mine;
}

SymTensor ModelMemoryTrace::row_output(MemoryReplay& r, comm::CommLedger* ledger, const SymTensor& partial,
                                       int64_t n, MemCategory cat, comm::StepPhase phase, const char* what) const {
  if (!sp_) {
    tp_collective(ledger, comm::OpKind::AllReduce, n, acc_, phase, what);
    return partial;
  }
  SymTensor mine = r.alloc(stream_rows(n) * cfg_.d_model, acc_, cat);
  tp_collective(ledger, comm::OpKind::ReduceScatter, n, acc_, phase, what);
  return mine;
}

SymTensor ModelMemoryTrace::row_output_grad(MemoryReplay& r, comm::CommLedger* ledger, const SymTensor& dy_local,
                                            int64_t n, MemCategory cat) const {
  if (!sp_) return dy_local;
  SymTensor full = r.alloc(n * cfg_.d_model, acc_, cat);
  tp_collective(ledger, comm::OpKind::AllGather, n, acc_, comm::StepPhase::Backward,
                "output gradient rows (sequence gather)");
  return full;
}

void ModelMemoryTrace::weight_job(MemoryReplay& r, SegmentTrace& st, const SymTensor& x, const SymTensor& dy,
                                  bool dy_changes) const {
  if (!st.defer) return;  // run at once: nothing kept
  if (x.defined()) st.weight_jobs.push_back(x);
  SymTensor kept = dy;
  if (dy_changes) {
    const bool copied_before = st.last_dy_source == dy.storage_id() && !st.last_dy.shares_storage(dy) &&
                               st.last_dy.numel() == dy.numel();
    kept = copied_before ? st.last_dy : r.alloc(dy.numel(), dy.dtype(), kAct);
  }
  st.weight_jobs.push_back(kept);
  st.last_dy = kept;
  st.last_dy_source = dy.storage_id();
}

// layers.cc Norm::forward: rstd (and the LayerNorm mean) per row.
NormTrace ModelMemoryTrace::norm_forward(MemoryReplay& r, int64_t n, DType dt) const {
  NormTrace s;
  s.rstd = r.alloc(n, dt, kAct);
  if (cfg_.norm == NormKind::LayerNorm) s.mean = r.alloc(n, dt, kAct);
  return s;
}

// attention_layer.cc SelfAttention::forward.
AttentionTrace ModelMemoryTrace::attention_forward(MemoryReplay& r, const TraceBatch& b, const BlockDims& d) const {
  const int64_t n = b.n();
  AttentionTrace s;
  s.q = r.alloc(n * d.q, acc_, kAct);
  s.k = r.alloc(n * d.kv, acc_, kAct);
  s.v = r.alloc(n * d.kv, acc_, kAct);
  s.out = r.alloc(n * d.q, acc_, kAct);
  s.lse = r.alloc(b.rows * d.q_heads * b.seq, acc_, kAct);
  s.out_op = r.as_operand(s.out, op_);
  return s;
}

// mlp_layer.cc Mlp::forward.
MlpTrace ModelMemoryTrace::mlp_forward(MemoryReplay& r, int64_t n, const BlockDims& d) const {
  MlpTrace s;
  s.a = r.alloc(n * d.ffn, acc_, kAct);
  SymTensor act = r.alloc(n * d.ffn, written_operand_dtype(op_, acc_), kAct);
  if (cfg_.mlp == MlpKind::SwiGLU) s.b = r.alloc(n * d.ffn, acc_, kAct);
  s.act = r.as_operand(act, op_);
  return s;
}

// block.cc Block::forward.
SymTensor ModelMemoryTrace::block_forward(MemoryReplay& r, comm::CommLedger* ledger, const TraceBatch& b,
                                          const BlockDims& dims, const SymTensor& x, bool recompute,
                                          BlockTrace* saved, comm::StepPhase phase) const {
  const int64_t n = b.n(), nl = stream_rows(n), d = cfg_.d_model;
  const bool fuse = exec_.fuse_residual && tp_ == 1;
  // Under SP the norms write this rank's rows and the gathered operand is kept.
  const MemCategory normed = sp_ ? kWork : kAct;
  BlockTrace s;
  s.x = x;
  const DType normed_dt = written_operand_dtype(op_, acc_);
  SymTensor xn1 = r.alloc(nl * d, normed_dt, normed);
  s.stats1 = norm_forward(r, nl, acc_);
  s.xn1 = column_input(r, ledger, r.as_operand(xn1, op_, normed), n, phase);
  s.h = r.alloc(nl * d, acc_, kAct);
  if (fuse) {
    s.attn = attention_forward(r, b, dims);
  } else {  // add_branch: the partial output, reduced (its rows added to the stream and freed)
    SymTensor part = r.alloc(n * d, acc_, kWork);
    s.attn = attention_forward(r, b, dims);
    row_output(r, ledger, part, n, kWork, phase, "attention output (row-parallel partial sums)");
  }
  SymTensor xn2 = r.alloc(nl * d, normed_dt, normed);
  s.stats2 = norm_forward(r, nl, acc_);
  s.xn2 = column_input(r, ledger, r.as_operand(xn2, op_, normed), n, phase);
  SymTensor y = r.alloc(nl * d, acc_, kAct);
  if (fuse) {
    s.mlp = mlp_forward(r, n, dims);
  } else {
    SymTensor part = r.alloc(n * d, acc_, kWork);
    s.mlp = mlp_forward(r, n, dims);
    row_output(r, ledger, part, n, kWork, phase, "mlp output (row-parallel partial sums)");
  }
  s.full = true;
  if (recompute) {
    s = BlockTrace{};
    s.x = x;
  }
  *saved = std::move(s);
  return y;
}

// mlp_layer.cc Mlp::backward.
void ModelMemoryTrace::mlp_backward(MemoryReplay& r, int64_t n, const BlockDims& d, const MlpTrace& s,
                                    const SymTensor& xn, const SymTensor& dy, bool dy_changes, SegmentTrace& st) const {
  const SymTensor dy_op = r.as_operand(dy, op_);
  weight_job(r, st, s.act, dy_op, dy_changes && dy_op.shares_storage(dy));
  SymTensor dact = r.alloc(n * d.ffn, acc_, kWork);
  const MemCategory grads_cat = st.defer ? kAct : kWork;
  const DType grad_dt = written_operand_dtype(op_, acc_);
  SymTensor da = r.alloc(n * d.ffn, grad_dt, grads_cat);
  if (cfg_.mlp == MlpKind::SwiGLU) {
    SymTensor db = r.alloc(n * d.ffn, grad_dt, grads_cat);
    const SymTensor da_op = r.as_operand(da, op_, grads_cat), db_op = r.as_operand(db, op_, grads_cat);
    weight_job(r, st, xn, da_op, false);
    weight_job(r, st, xn, db_op, false);
  } else {
    const SymTensor da_op = r.as_operand(da, op_, grads_cat);
    weight_job(r, st, xn, da_op, false);
  }
}

// attention_layer.cc SelfAttention::backward.
void ModelMemoryTrace::attention_backward(MemoryReplay& r, const TraceBatch& b, const BlockDims& d,
                                          const AttentionTrace& s, const SymTensor& xn, const SymTensor& dy,
                                          bool dy_changes, SegmentTrace& st) const {
  const int64_t n = b.n();
  const SymTensor dy_op = r.as_operand(dy, op_);
  weight_job(r, st, s.out_op, dy_op, dy_changes && dy_op.shares_storage(dy));
  SymTensor dout = r.alloc(n * d.q, acc_, kWork);
  const MemCategory grads_cat = st.defer ? kAct : kWork;
  SymTensor dq = r.alloc(n * d.q, acc_, grads_cat);
  SymTensor dk = r.alloc(n * d.kv, acc_, grads_cat);
  SymTensor dv = r.alloc(n * d.kv, acc_, grads_cat);
  const SymTensor dq_op = r.as_operand(dq, op_, grads_cat), dk_op = r.as_operand(dk, op_, grads_cat),
                  dv_op = r.as_operand(dv, op_, grads_cat);
  weight_job(r, st, xn, dq_op, false);
  weight_job(r, st, xn, dk_op, false);
  weight_job(r, st, xn, dv_op, false);
}

// block.cc Block::backward.
void ModelMemoryTrace::block_backward(MemoryReplay& r, comm::CommLedger* ledger, const TraceBatch& b,
                                      const BlockDims& dims, BlockTrace& saved, const SymTensor& dres,
                                      SegmentTrace& st) const {
  if (!saved.full)  // replay (S3)
    block_forward(r, ledger, b, dims, saved.x, /*recompute=*/false, &saved, comm::StepPhase::Backward);
  const BlockTrace& s = saved;
  const int64_t n = b.n(), d = cfg_.d_model;
  // A deferred weight job keeps the gathered output gradient.
  const MemCategory kept = st.defer ? kAct : kWork;
  SymTensor dxn = r.alloc(n * d, acc_, kWork);
  {  // each sublayer: the bias's gradient (from the stream's), the whole
     // output gradient, the branch, its partial input gradient reduced
    if (cfg_.bias) weight_job(r, st, SymTensor(), dres, true);
    const SymTensor dy = row_output_grad(r, ledger, dres, n, kept);
    mlp_backward(r, n, dims, s.mlp, s.xn2, dy, dy.shares_storage(dres), st);
    column_input_grad(r, ledger, n, "mlp input gradient (column-parallel partial sums)");
  }
  {
    if (cfg_.bias) weight_job(r, st, SymTensor(), dres, true);
    const SymTensor dy = row_output_grad(r, ledger, dres, n, kept);
    attention_backward(r, b, dims, s.attn, s.xn1, dy, dy.shares_storage(dres), st);
    column_input_grad(r, ledger, n, "attention input gradient (column-parallel partial sums)");
  }
}

// transformer.cc forward_segment (segments.cc EmbeddingSegment / HeadSegment).
SymTensor ModelMemoryTrace::forward(MemoryReplay& r, comm::CommLedger* ledger, int s, const TraceBatch& b,
                                    const SymTensor& x, SegmentTrace& st, bool backward) const {
  const int64_t n = b.n(), nl = stream_rows(n), d = cfg_.d_model;
  const MemCategory normed = sp_ ? kWork : kAct;
  if (s == 0) {
    const SymTensor part = r.alloc(n * d, acc_, normed);
    SymTensor out = row_output(r, ledger, part, n, kAct, comm::StepPhase::Forward,
                               "embedding rows of the vocabulary slices (row_output)");
    if (cfg_.positions == PositionKind::Learned) r.alloc(nl * d, acc_, kWork);  // positions, added and freed
    return out;
  }
  if (s == num_segments() - 1) {
    st.x_final = x;
    SymTensor xf = r.alloc(nl * d, written_operand_dtype(op_, acc_), normed);
    st.final_stats = norm_forward(r, nl, acc_);
    st.xf = column_input(r, ledger, r.as_operand(xf, op_, normed), n, comm::StepPhase::Forward);
    SymTensor logits = r.alloc(n * dims_.vocab_rows, acc_, kAct);
    {  // vocab_parallel.cc: [max | sum_exp | target logit] per row, max and sums reduced over tp
      const SymTensor stats = r.alloc(3 * n, acc_, kWork);
      if (ledger && tp_ > 1) {
        const int64_t row = n * int64_t(dtype_size(acc_));
        ledger->add({"tp", tp_, comm::OpKind::AllReduce, row, comm::StepPhase::Forward, "cross-entropy row max"});
        ledger->add({"tp", tp_, comm::OpKind::AllReduce, 2 * row, comm::StepPhase::Forward,
                     "cross-entropy row sums"});
      }
    }
    if (backward) st.dlogits = logits;  // the loss backward writes dlogits over the logits
    return SymTensor();
  }
  const bool recompute = exec_.recompute || !backward;
  return block_forward(r, ledger, b, dims_.blocks[size_t(s - 1)], x, recompute, &st.block, comm::StepPhase::Forward);
}

// transformer.cc backward_segment_input.
SymTensor ModelMemoryTrace::backward_input(MemoryReplay& r, comm::CommLedger* ledger, int s, const TraceBatch& b,
                                           SymTensor dy, SegmentTrace& st, bool defer_weights) const {
  const int64_t n = b.n(), nl = stream_rows(n), d = cfg_.d_model;
  st.defer = defer_weights;
  st.clear_jobs();
  if (s == num_segments() - 1) {
    // HeadSegment::backward
    SymTensor dxf = r.alloc(n * d, acc_, kWork);
    {
      const SymTensor dlogits = r.as_operand(st.dlogits, op_);
      weight_job(r, st, st.xf, dlogits, false);
    }
    // The logits go before the stream's gradient is allocated (a deferred
    // weight job keeps its own reference).
    st.dlogits = SymTensor();
    const SymTensor dxf_mine =
        column_input_grad(r, ledger, n, "head input gradient (column-parallel partial sums)");
    SymTensor dres = r.alloc(nl * d, acc_, kAct);
    st.xf = SymTensor();
    return dres;
  }
  if (s == 0) {
    // EmbeddingSegment::backward: the table gradients read dx (the token
    // table all of its rows, gathered under SP).
    weight_job(r, st, SymTensor(), row_output_grad(r, ledger, dy, n, st.defer ? kAct : kWork), false);
    if (cfg_.positions == PositionKind::Learned) weight_job(r, st, SymTensor(), dy, false);
    return SymTensor();
  }
  block_backward(r, ledger, b, dims_.blocks[size_t(s - 1)], st.block, dy, st);
  st.block = BlockTrace{};  // activations released as backward goes
  return dy;
}

}  // namespace meshtrain::model
