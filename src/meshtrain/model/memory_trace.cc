#include "meshtrain/model/memory_trace.h"

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
      op_(exec.precision.compute),
      acc_(exec.precision.accumulate()),
      dims_(local_dims(cfg_, local)) {}

void ModelMemoryTrace::tp_all_reduce(comm::CommLedger* ledger, int64_t n, comm::StepPhase phase,
                                     const char* what) const {
  // Block::sum_over_tp: the tp group exists only when tp > 1.
  if (ledger && tp_ > 1)
    ledger->add({"tp", tp_, comm::OpKind::AllReduce, n * cfg_.d_model * int64_t(dtype_size(acc_)), phase, what});
}

void ModelMemoryTrace::weight_job(MemoryReplay& r, SegmentTrace& st, const SymTensor& x, const SymTensor& dy,
                                  bool dy_changes) const {
  if (!st.defer) return;  // run at once: nothing kept
  if (x.defined()) st.weight_jobs.push_back(x);
  st.weight_jobs.push_back(dy_changes ? r.alloc(dy.numel(), dy.dtype(), kAct) : dy);
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
  SymTensor act = r.alloc(n * d.ffn, acc_, kAct);
  if (cfg_.mlp == MlpKind::SwiGLU) s.b = r.alloc(n * d.ffn, acc_, kAct);
  s.act = r.as_operand(act, op_);
  return s;
}

// block.cc Block::forward.
SymTensor ModelMemoryTrace::block_forward(MemoryReplay& r, comm::CommLedger* ledger, const TraceBatch& b,
                                          const BlockDims& dims, const SymTensor& x, bool recompute,
                                          BlockTrace* saved, comm::StepPhase phase) const {
  const int64_t n = b.n(), d = cfg_.d_model;
  const bool fuse = exec_.fuse_residual && tp_ == 1;
  BlockTrace s;
  s.x = x;
  SymTensor xn1 = r.alloc(n * d, acc_, kAct);
  s.stats1 = norm_forward(r, n, acc_);
  s.xn1 = r.as_operand(xn1, op_);
  s.h = r.alloc(n * d, acc_, kAct);
  if (fuse) {
    s.attn = attention_forward(r, b, dims);
  } else {
    SymTensor part = r.alloc(n * d, acc_, kWork);
    s.attn = attention_forward(r, b, dims);
    tp_all_reduce(ledger, n, phase, "attention output (row-parallel partial sums)");
  }
  SymTensor xn2 = r.alloc(n * d, acc_, kAct);
  s.stats2 = norm_forward(r, n, acc_);
  s.xn2 = r.as_operand(xn2, op_);
  SymTensor y = r.alloc(n * d, acc_, kAct);
  if (fuse) {
    s.mlp = mlp_forward(r, n, dims);
  } else {
    SymTensor part = r.alloc(n * d, acc_, kWork);
    s.mlp = mlp_forward(r, n, dims);
    tp_all_reduce(ledger, n, phase, "mlp output (row-parallel partial sums)");
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
                                    const SymTensor& xn, const SymTensor& dy, SegmentTrace& st) const {
  const SymTensor dy_op = r.as_operand(dy, op_);
  weight_job(r, st, s.act, dy_op, dy_op.shares_storage(dy));
  SymTensor dact = r.alloc(n * d.ffn, acc_, kWork);
  const MemCategory grads_cat = st.defer ? kAct : kWork;
  SymTensor da = r.alloc(n * d.ffn, acc_, grads_cat);
  if (cfg_.mlp == MlpKind::SwiGLU) {
    SymTensor db = r.alloc(n * d.ffn, acc_, grads_cat);
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
                                          SegmentTrace& st) const {
  const int64_t n = b.n();
  const SymTensor dy_op = r.as_operand(dy, op_);
  weight_job(r, st, s.out_op, dy_op, dy_op.shares_storage(dy));
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
  SymTensor dxn = r.alloc(n * d, acc_, kWork);
  mlp_backward(r, n, dims, s.mlp, s.xn2, dres, st);
  tp_all_reduce(ledger, n, comm::StepPhase::Backward, "mlp input gradient (column-parallel partial sums)");
  attention_backward(r, b, dims, s.attn, s.xn1, dres, st);
  tp_all_reduce(ledger, n, comm::StepPhase::Backward, "attention input gradient (column-parallel partial sums)");
}

// transformer.cc forward_segment (segments.cc EmbeddingSegment / HeadSegment).
SymTensor ModelMemoryTrace::forward(MemoryReplay& r, comm::CommLedger* ledger, int s, const TraceBatch& b,
                                    const SymTensor& x, SegmentTrace& st, bool backward) const {
  const int64_t n = b.n(), d = cfg_.d_model;
  if (s == 0) {
    SymTensor out = r.alloc(n * d, acc_, kAct);
    tp_all_reduce(ledger, n, comm::StepPhase::Forward, "embedding rows of the vocabulary slices (row_output)");
    if (cfg_.positions == PositionKind::Learned) r.alloc(n * d, acc_, kWork);  // positions, added and freed
    return out;
  }
  if (s == num_segments() - 1) {
    st.x_final = x;
    SymTensor xf = r.alloc(n * d, acc_, kAct);
    st.final_stats = norm_forward(r, n, acc_);
    st.xf = r.as_operand(xf, op_);
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
  const int64_t n = b.n(), d = cfg_.d_model;
  st.defer = defer_weights;
  st.weight_jobs.clear();
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
    tp_all_reduce(ledger, n, comm::StepPhase::Backward, "head input gradient (column-parallel partial sums)");
    SymTensor dres = r.alloc(n * d, acc_, kAct);
    st.xf = SymTensor();
    return dres;
  }
  if (s == 0) {
    // EmbeddingSegment::backward: the table gradients read dx.
    weight_job(r, st, SymTensor(), dy, false);
    if (cfg_.positions == PositionKind::Learned) weight_job(r, st, SymTensor(), dy, false);
    return SymTensor();
  }
  block_backward(r, ledger, b, dims_.blocks[size_t(s - 1)], st.block, dy, st);
  st.block = BlockTrace{};  // activations released as backward goes
  return dy;
}

}  // namespace meshtrain::model
