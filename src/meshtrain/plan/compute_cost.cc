#include "meshtrain/plan/compute_cost.h"

#include "meshtrain/kernels/moe_routing.h"
#include "meshtrain/model/moe_layer.h"

namespace meshtrain::plan {

namespace {

int64_t rows_of(const model::ModelSpec& s, const std::string& name) {
  const model::ParamSpec* p = s.find_or_null(name);
  return p ? p->shape[0] : 0;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TraceBatch trace_batch(const StepInputs& in) { return {in.micro_batch, in.seq_len, in.mesh.cp}; }

PassCost action_cost(const SegmentCost& c, parallel::Op op) {
  PassCost p;
  if (op == parallel::Op::Forward) p = c.f;
  if (op == parallel::Op::Backward || op == parallel::Op::BackwardInput) p += c.b;
  if (op == parallel::Op::Backward || op == parallel::Op::BackwardWeight) p += c.w;
  return p;
}

LocalDims local_dims(const model::ModelConfig& cfg, const model::ModelSpec& local) {
  LocalDims out;
  out.blocks.resize(size_t(cfg.n_layers));
  // A feed-forward's hidden units: the rows of its input projection.
  const std::string in_proj = cfg.mlp == model::MlpKind::SwiGLU ? ".gate_proj.weight" : ".fc_in.weight";
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    LocalBlockDims& d = out.blocks[size_t(l)];
    d.q = rows_of(local, p + ".self_attn.q_proj.weight");
    d.kv = rows_of(local, p + ".self_attn.k_proj.weight");
    d.ffn = rows_of(local, p + ".mlp" + in_proj);
    d.q_heads = cfg.head_dim > 0 ? d.q / cfg.head_dim : 0;
    d.router = rows_of(local, p + ".mlp.router.weight");
    d.shared_ffn = rows_of(local, p + ".mlp.shared_expert" + in_proj);
    d.sources = local.partition.ep_size;
  }
  // Routed experts (model/param_spec.cc: model.layers.L.mlp.experts.E.*), in
  // the units of their block's segment L + 1.
  for (const model::ParamSpec& p : local.params) {
    if (p.expert < 0 || !ends_with(p.name, in_proj)) continue;
    LocalBlockDims& d = out.blocks[size_t(local.units[size_t(p.unit)].segment - 1)];
    d.experts.push_back(p.expert);
    d.expert_ffn = p.shape[0];
  }
  out.vocab_rows = cfg.tied_embeddings ? rows_of(local, "model.embed_tokens.weight") : rows_of(local, "lm_head.weight");
  return out;
}

ComputeModel::ComputeModel(const model::ModelConfig& cfg, const LocalDims& dims,
                           const PrecisionPolicy& precision, const HardwareProfile* hw, double speed,
                           bool fused_attention)
    : cfg_(cfg), dims_(dims), precision_(precision), hw_(hw), speed_(speed), fused_attention_(fused_attention) {}

PassCost ComputeModel::gemm(int64_t m, int64_t n, int64_t k) const {
  PassCost c;
  if (m == 0 || n == 0 || k == 0) return c;
  c.flops = 2.0 * double(m) * double(n) * double(k);
  if (hw_) c.seconds = c.flops / (hw_->gemm_rate(precision_.compute, m, n, k) * speed_);
  return c;
}

// Causal attention: Q K^T and P V over half the (seq x seq) square per head
// and row: 2 * 2 * seq^2 * D / 2 FLOPs forward; backward recomputes the
// scores and runs four products (factor 2.5). Under context parallelism a
// rank's two chunks see 2 cp + 1 of the row's chunk pairs, two of them
// diagonal (docs/math.md (M.48)): 1/cp of the score pairs, in ring blocks
// of its seq/cp queries by seq/cp keys. Rate of a (seq/cp, seq/cp, D) GEMM.
PassCost ComputeModel::attention(const TraceBatch& b, int64_t heads, double factor) const {
  PassCost c;
  if (heads == 0) return c;
  const int64_t D = cfg_.head_dim, span = b.seq / b.cp;
  c.flops = factor * 2.0 * double(b.rows) * double(heads) * double(b.seq) * double(b.seq) * double(D) / double(b.cp);
  if (hw_) c.seconds = c.flops / (hw_->gemm_rate(precision_.compute, span, span, D) * speed_);
  return c;
}

PassCost ComputeModel::elementwise(double bytes) const {
  PassCost c;
  if (hw_) c.seconds = bytes / (hw_->memory_bytes_per_s * speed_);
  return c;
}

void ComputeModel::linear(SegmentCost& c, int64_t n, int64_t out, int64_t in) const {
  c.f += gemm(n, out, in);  // y = x W^T
  c.b += gemm(n, in, out);  // dx = dy W
  c.w += gemm(out, in, n);  // dW = dy^T x
}

void ComputeModel::ffn(SegmentCost& c, int64_t n, int64_t f) const {
  const int64_t d = cfg_.d_model;
  if (cfg_.mlp == model::MlpKind::SwiGLU) linear(c, n, f, d);  // gate
  linear(c, n, f, d);                                           // up (fc_in)
  linear(c, n, d, f);                                           // down (fc_out)
}

const std::vector<int64_t>& ComputeModel::expert_blocks(const TraceBatch& b) const {
  auto it = blocks_.find({b.rows, b.seq});
  if (it != blocks_.end()) return it->second;
  const kernels::MoeRouting r = kernels::balanced_routing(model::moe_routing_config(cfg_, b.seq), b.n());
  std::vector<int64_t> rows(size_t(cfg_.n_experts));
  for (size_t e = 0; e < rows.size(); ++e) rows[e] = r.begin[e + 1] - r.begin[e];
  return blocks_.emplace(std::make_pair(b.rows, b.seq), std::move(rows)).first->second;
}

// Expert parallelism: each of the `sources` ranks of the ep group sends its
// block for every expert this rank holds; the blocks run one by one
// (model/moe_layer.cc), their bucket padding included (docs/math.md (M.59)).
int64_t ComputeModel::experts(SegmentCost& c, const LocalBlockDims& k, const TraceBatch& b) const {
  const std::vector<int64_t>& blocks = expert_blocks(b);
  int64_t rows = 0;
  for (int e : k.experts)
    for (int64_t q = 0; q < k.sources; ++q) {
      ffn(c, blocks[size_t(e)], k.expert_ffn);
      rows += blocks[size_t(e)];
    }
  return rows;
}

SegmentCost ComputeModel::segment(int s, const TraceBatch& b, const StepInputs& exec) const {
  SegmentCost c;
  const int64_t n = b.n(), d = cfg_.d_model;
  const double e = double(dtype_size(precision_.accumulate()));
  const double conv = precision_.compute == precision_.accumulate() ? 0.0 : e + dtype_size(precision_.compute);
  if (s == 0) {  // embedding rows gathered, their gradient scattered
    c.f += elementwise(double(n) * d * e * 2);
    c.w += elementwise(double(n) * d * e * 2);
    return c;
  }
  if (s == int(cfg_.n_layers) + 1) {  // final norm, LM head, loss
    const int64_t V = dims_.vocab_rows;
    c.f += elementwise(double(n) * (e * 2 * d + conv * d));  // the norm and its output as an operand
    c.b += elementwise(double(n) * e * (4 * d));
    SegmentCost head;  // the LM head and the loss
    linear(head, n, V, d);
    head.f += elementwise(double(n) * (e * 3 * V + conv * V));
    if (exec.head_chunk_rows > 0) {  // all of it in B, chunk by chunk (model/segments.h)
      c.b += head.f, c.b += head.b, c.b += head.w;
    } else {
      c.f += head.f, c.b += head.b, c.w += head.w;
    }
    return c;
  }
  const LocalBlockDims& k = dims_.blocks[size_t(s - 1)];
  if (k.q == 0) return c;  // a block another stage holds
  linear(c, n, k.q, d);
  linear(c, n, k.kv, d);
  linear(c, n, k.kv, d);
  linear(c, n, d, k.q);
  ffn(c, n, k.ffn);         // a dense block's (none in an MoE block)
  ffn(c, n, k.shared_ffn);  // the shared expert, if any
  linear(c, n, k.router, d);  // the router's logits (a dense block has none)
  const int64_t expert_rows = k.router > 0 ? experts(c, k, b) : 0;
  c.f += attention(b, k.q_heads, 1.0);
  c.b += attention(b, k.q_heads, 2.5);
  if (!fused_attention_) {
    // Unfused attention: the [heads, s, s] scores are written by one GEMM,
    // read and written by the masked softmax (and its dropout), read by the
    // value GEMM; backward moves about twice that. 16-bit elements.
    const double square = double(b.rows) * double(k.q_heads) * double(b.seq) * double(b.seq) * 2.0 / double(b.cp);
    c.f += elementwise(square * 5);
    c.b += elementwise(square * 10);
  }
  // Elementwise passes: two norms, two residual copies, RoPE, the MLP's
  // activation, the 16-bit copies of the matmul inputs; an MoE block's
  // router softmax and its experts' rows gathered, returned and combined;
  // backward about twice the traffic (norm and activation backward read
  // more than they write).
  const double ffn_in = cfg_.mlp == model::MlpKind::SwiGLU ? 2.0 : 1.0;
  const double ffn_elems = double(n) * double(k.ffn + k.shared_ffn) + double(expert_rows) * double(k.expert_ffn);
  const double fwd_elems = double(n) * (8.0 * d + 2.0 * (k.q + k.kv) + 2.0 * k.router) + (ffn_in + 2.0) * ffn_elems +
                           3.0 * double(expert_rows) * d;
  const double conv_elems = double(n) * (2.0 * d + k.q) + ffn_elems;
  const double fwd_bytes = fwd_elems * e + conv_elems * conv;
  c.f += elementwise(fwd_bytes);
  c.b += elementwise(2.0 * fwd_bytes);
  if (hw_) {
    c.f.seconds += hw_->per_layer_overhead_s;
    c.b.seconds += 2 * hw_->per_layer_overhead_s;
  }
  if (exec.recompute) c.b += c.f;  // the block's forward replayed before its backward (docs/math.md, "Segment costs")
  return c;
}

double ComputeModel::optimizer_seconds(int64_t owned) const {
  const double master = precision_.has_master_copy() ? double(dtype_size(precision_.params)) : 0.0;
  const double per = 2.0 * dtype_size(precision_.master) + dtype_size(precision_.grad_accum) +
                     4.0 * dtype_size(precision_.optimizer) + master;
  return hw_ ? double(owned) * per / (hw_->memory_bytes_per_s * speed_) : 0.0;
}

}  // namespace meshtrain::plan
